package testdb

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Env is one target opened for a test: a pool, a freshly migrated ledger
// table and a business table (k, worker) for the tests' mutations, both
// dropped when the test ends.
type Env struct {
	Name    string
	Dialect dialects.Dialect
	DB      *sql.DB
	// Table is the ledger table (unquoted).
	Table string
	// Biz is the business table, quoted: (k VARCHAR(255), worker INTEGER),
	// without a unique constraint, so a duplicate effect shows as two rows.
	Biz string
}

// NewEnv creates the tables in db.
func NewEnv(t testing.TB, name string, d dialects.Dialect, db *sql.DB) *Env {
	t.Helper()
	table := NewTable(t, db, d)
	biz := d.QuoteIdent(table + "_biz")
	if _, err := db.Exec("CREATE TABLE " + biz + " (k VARCHAR(255) NOT NULL, worker INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + biz) })
	return &Env{Name: name, Dialect: d, DB: db, Table: table, Biz: biz}
}

// ForEach runs f in a subtest per target whose family (the part of its
// name before "/": "sqlite", "postgres", "mysql") is in families (every
// target when none is given), with a pool of maxConns.
func ForEach(t *testing.T, maxConns int, f func(t *testing.T, e *Env), families ...string) {
	t.Helper()
	for _, tg := range Targets() {
		if len(families) > 0 && !contains(families, tg.Family()) {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			f(t, NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, maxConns)))
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Ph returns the n-th placeholder for the dialect.
func (e *Env) Ph(n int) string { return e.Dialect.Placeholder(n) }

// WriteBiz inserts one business row in tx.
func (e *Env) WriteBiz(ctx context.Context, tx *sql.Tx, key string, worker int) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+e.Biz+" (k, worker) VALUES ("+e.Ph(1)+", "+e.Ph(2)+")", key, worker)
	return err
}

// Count runs a COUNT query on the pool.
func (e *Env) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// LedgerRows counts the ledger table's rows.
func (e *Env) LedgerRows(t testing.TB) int {
	t.Helper()
	return e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.Table))
}

// BizRows counts the business rows for key.
func (e *Env) BizRows(t testing.TB, key string) int {
	t.Helper()
	return e.Count(t, "SELECT COUNT(*) FROM "+e.Biz+" WHERE k = "+e.Ph(1), key)
}

// IsolationLevels lists the levels the dialect is tested under: those of
// its dialectkit.Traits.
func (e *Env) IsolationLevels() []sql.IsolationLevel {
	return dialectkit.TraitsOf(e.Dialect).IsolationLevels
}

// Keys is the herd's key count for a conformance test: full, 10 with
// -short, or OPLEDGER_CONFORMANCE_KEYS when it is set.
func Keys(t testing.TB, full int) int {
	t.Helper()
	if v := os.Getenv("OPLEDGER_CONFORMANCE_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("OPLEDGER_CONFORMANCE_KEYS: %v", err)
		}
		return n
	}
	if testing.Short() {
		return 10
	}
	return full
}

// ModerncName is the target name of the pure-Go SQLite driver
// (modernc.org/sqlite), present where a test binary links it.
const ModerncName = "sqlite/modernc"

// Scaled is a herd size n for target: a quarter of n (at least 1) on the
// pure-Go SQLite driver, n elsewhere. That driver runs the SQLite C code
// translated to Go, so under the race detector every statement costs
// several times the CPU it costs through mattn/go-sqlite3, and a full
// herd on it loads a 2-core machine for minutes; the dialect's SQL and
// its behaviour under the herd are proven at full size through mattn, and
// the modernc target keeps every case, at a smaller size, for what the
// driver itself changes (its error values, its busy handling).
func Scaled(target string, n int) int {
	if target == ModerncName {
		return max(1, n/4)
	}
	return n
}

// InTx runs f in a transaction of db, committing when f succeeds and
// rolling back when it fails.
func InTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
