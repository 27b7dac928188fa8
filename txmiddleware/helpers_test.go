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

// env is one target with a fresh ledger table and a business table.
type env struct {
	name  string
	d     dialects.Dialect
	db    *sql.DB
	table string
	biz   string // quoted business table: (k, worker)
	l     *ledger.Store
}

func forEachTarget(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			db := tg.Open(t, maxConns)
			f(t, newEnv(t, tg.Name, tg.Dialect, db))
		})
	}
}

func forEachPostgres(t *testing.T, maxConns int, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, tg := range testdb.Targets() {
		if tg.Dialect.Name() != "postgres" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			db := tg.Open(t, maxConns)
			f(t, newEnv(t, tg.Name, tg.Dialect, db))
		})
	}
}

func newEnv(t testing.TB, name string, d dialects.Dialect, db *sql.DB) *env {
	t.Helper()
	table := testdb.NewTable(t, db, d)
	biz := d.QuoteIdent(table + "_biz")
	if _, err := db.Exec("CREATE TABLE " + biz + " (k VARCHAR(255) NOT NULL, worker INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + biz) })
	l, err := ledger.New(d, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return &env{name: name, d: d, db: db, table: table, biz: biz, l: l}
}

func (e *env) runner(t testing.TB, opts ...txmiddleware.Option) *txmiddleware.Runner {
	t.Helper()
	r, err := txmiddleware.New(e.db, e.l, e.d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
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

func (e *env) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) ledgerRows(t testing.TB) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.d.QuoteIdent(e.table))
}

func (e *env) bizRows(t testing.TB, key string) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.biz+" WHERE k = "+e.ph(1), key)
}

// requireLockWaiter skips when the dialect cannot bound lock waits.
func (e *env) requireLockWaiter(t testing.TB) {
	t.Helper()
	if _, ok := e.d.(dialects.LockWaiter); !ok {
		t.Skipf("dialect %s does not implement dialects.LockWaiter", e.d.Name())
	}
}

// isolationLevels lists the levels each dialect offers for the test.
func (e *env) isolationLevels() []sql.IsolationLevel {
	switch e.d.Name() {
	case "postgres":
		return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
	case "mysql":
		return []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead}
	}
	return []sql.IsolationLevel{sql.LevelDefault}
}

// lookup reads the committed entry for key.
func (e *env) lookup(t testing.TB, key string) (*ledger.Entry, error) {
	t.Helper()
	return e.l.Lookup(context.Background(), e.db, mustID(t, key))
}

// assertNothing checks that nothing was recorded or written for key.
func (e *env) assertNothing(t testing.TB, key string) {
	t.Helper()
	if _, err := e.lookup(t, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("key %s: lookup %v, want ErrNotFound", key, err)
	}
	if n := e.bizRows(t, key); n != 0 {
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
		if err := e.writeBiz(ctx, tx, key, worker); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: []byte("done " + key + " by " + strconv.Itoa(worker)), TypeName: "pay.v1.TransferResponse"}, nil
	}
}
