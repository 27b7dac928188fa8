package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
)

// env is one target with a fresh ledger table and a business table.
type env struct {
	name  string
	d     dialects.Dialect
	db    *sql.DB
	table string
	biz   string // quoted business table: (k text, worker integer)
	l     *ledger.Store
}

func forEachTarget(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			db := tg.Open(t, maxConns)
			f(t, newEnv(t, tg.Name, tg.Dialect, db))
		})
	}
}

func newEnv(t testing.TB, name string, d dialects.Dialect, db *sql.DB, opts ...ledger.Option) *env {
	t.Helper()
	table := testdb.NewTable(t, db, d)
	biz := d.QuoteIdent(table + "_biz")
	if _, err := db.Exec("CREATE TABLE " + biz + " (k VARCHAR(255) NOT NULL, worker INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + biz) })
	l, err := ledger.New(d, append([]ledger.Option{ledger.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{name: name, d: d, db: db, table: table, biz: biz, l: l}
}

func (e *env) store(t *testing.T, opts ...ledger.Option) *ledger.Store {
	t.Helper()
	l, err := ledger.New(e.d, append([]ledger.Option{ledger.WithTable(e.table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ph returns the n-th placeholder for the dialect.
func (e *env) ph(n int) string {
	if e.d.Name() == "postgres" {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

func (e *env) writeBiz(ctx context.Context, tx *sql.Tx, key string, worker int) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+e.biz+" (k, worker) VALUES ("+e.ph(1)+", "+e.ph(2)+")", key, worker)
	return err
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) ledgerRows(t *testing.T) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.d.QuoteIdent(e.table))
}

func (e *env) bizRows(t *testing.T, key string) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.biz+" WHERE k = "+e.ph(1), key)
}

// isolationLevels lists the levels a target is tested under.
func (e *env) isolationLevels() []sql.IsolationLevel {
	switch e.d.Name() {
	case "postgres":
		return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
	case "mysql":
		return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead}
	}
	return []sql.IsolationLevel{sql.LevelDefault}
}

func mustID(t testing.TB, caller, method, key string) ledger.Identity {
	t.Helper()
	id, err := ledger.NewIdentity(caller, method, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
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
		tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			if e.d.Classify(err).Retryable() {
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
		if errors.Is(err, ledger.ErrRetryable) || e.d.Classify(err).Retryable() {
			last = err
			continue
		}
		return err
	}
	return fmt.Errorf("still failing after 20 attempts: %w", last)
}
