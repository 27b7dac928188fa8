package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

const method = "/pay.v1.Payments/Transfer"

// env is one target with a fresh ledger table, a business table and a
// Store on them.
type env struct {
	*testdb.Env
	l *ledger.Store
}

func forEachTarget(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	t.Helper()
	testdb.ForEach(t, maxConns, func(t *testing.T, te *testdb.Env) { f(t, withStore(t, te)) })
}

func forEachPostgres(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	t.Helper()
	testdb.ForEach(t, maxConns, func(t *testing.T, te *testdb.Env) { f(t, withStore(t, te)) }, "postgres")
}

func withStore(t testing.TB, te *testdb.Env) *env {
	t.Helper()
	l, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	return &env{Env: te, l: l}
}

func (e *env) runner(t testing.TB, opts ...txmiddleware.Option) *txmiddleware.Runner {
	t.Helper()
	r, err := txmiddleware.New(e.DB, e.l, e.Dialect, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// requireLockWaiter skips when the dialect cannot bound lock waits.
func (e *env) requireLockWaiter(t testing.TB) {
	t.Helper()
	if _, ok := e.Dialect.(dialects.LockWaiter); !ok {
		t.Skipf("dialect %s does not implement dialects.LockWaiter", e.Dialect.Name())
	}
}

// lookup reads the committed entry for key.
func (e *env) lookup(t testing.TB, key string) (*ledger.Entry, error) {
	t.Helper()
	return e.l.Lookup(context.Background(), e.DB, mustID(t, key))
}

// assertNothing checks that nothing was recorded or written for key.
func (e *env) assertNothing(t testing.TB, key string) {
	t.Helper()
	if _, err := e.lookup(t, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("key %s: lookup %v, want ErrNotFound", key, err)
	}
	if n := e.BizRows(t, key); n != 0 {
		t.Fatalf("key %s: %d business rows persisted, want 0", key, n)
	}
}

// waitIdle fails unless every connection is back in the pool within a
// second (a transaction whose context ended is rolled back by database/sql
// in the background).
func waitIdle(t testing.TB, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use", db.Stats().InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustID(t testing.TB, key string) ledger.Identity {
	t.Helper()
	id, err := ledger.NewIdentity("tenant-a", method, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func req(t testing.TB, key string) ledger.ClaimRequest {
	t.Helper()
	return ledger.ClaimRequest{Identity: mustID(t, key), Fingerprint: ledger.FingerprintOf([]byte(key))}
}

// bizWork writes one business row for key and returns a response naming
// the worker; it counts its runs in runs.
func (e *env) bizWork(key string, worker int, runs *atomic.Int64) txmiddleware.Work {
	return func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
		runs.Add(1)
		if err := e.WriteBiz(ctx, tx, key, worker); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: []byte("done " + key + " by " + strconv.Itoa(worker)), TypeName: "pay.v1.TransferResponse"}, nil
	}
}
