package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// env is one target with a fresh ledger table, a business table and a
// Store on them.
type env struct {
	*testdb.Env
	l *ledger.Store
}

// forEachTarget runs f in a parallel subtest per target whose family is in
// families (every target when none is given), each with a pool of
// maxConns, fresh tables and a Store on them.
func forEachTarget(t *testing.T, maxConns int, f func(t *testing.T, e *env), families ...string) {
	t.Helper()
	testdb.ForEachParallel(t, maxConns, func(t *testing.T, te *testdb.Env) { f(t, withStore(t, te)) }, families...)
}

func newEnv(t testing.TB, name string, d dialects.Dialect, db *sql.DB) *env {
	t.Helper()
	return withStore(t, testdb.NewEnv(t, name, d, db))
}

func withStore(t testing.TB, te *testdb.Env) *env {
	t.Helper()
	l, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: te, l: l}
}

func (e *env) store(t *testing.T, opts ...ledger.Option) *ledger.Store {
	t.Helper()
	l, err := ledger.New(e.Dialect, append([]ledger.Option{ledger.WithTable(e.Table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func fp(s string) ledger.Fingerprint { return ledger.FingerprintOf([]byte(s)) }

// unit runs f in a transaction at level, retrying the whole transaction on
// a retryable failure (from the ledger or from COMMIT) up to 20 times. It
// counts the retries in retries.
func (e *env) unit(ctx context.Context, level sql.IsolationLevel, retries *atomic.Int64, f func(tx *sql.Tx) error) error {
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			retries.Add(1)
			time.Sleep(time.Duration(attempt) * time.Millisecond)
		}
		tx, err := e.DB.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			if e.Dialect.Classify(err).Retryable() {
				last = err
				continue
			}
			return err
		}
		err = f(tx)
		if err == nil {
			err = tx.Commit()
			if err == nil {
				return nil
			}
		} else {
			tx.Rollback()
		}
		if errors.Is(err, ledger.ErrRetryable) || e.Dialect.Classify(err).Retryable() {
			last = err
			continue
		}
		return err
	}
	return fmt.Errorf("still failing after 20 attempts: %w", last)
}

// commitIncomplete claims req and commits without completing it: an entry
// committed with no result.
func commitIncomplete(t *testing.T, e *env, req ledger.ClaimRequest) {
	t.Helper()
	tx, err := e.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if c, err := e.l.Claim(context.Background(), tx, req); err != nil || !c.Acquired() {
		tx.Rollback()
		t.Fatalf("claim of an entry to leave incomplete: %+v %v", c, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
