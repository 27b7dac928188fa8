package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Parallel marks t as a parallel test (t.Parallel) and then reserves n
// connections of the family's server budget (family "postgres" or
// "mysql"; any other family, such as "sqlite", has none) until t and its
// subtests have ended, waiting while other tests, of this binary or any
// other, hold too much of it (see [Reserve]). Call it once, first in the
// test, before any pool is opened, with the sum of the sizes of the pools
// the test opens on that family's server; a test that uses several servers
// calls [ParallelOn] instead.
func Parallel(t *testing.T, family string, n int) {
	t.Helper()
	ParallelOn(t, map[string]int{family: n})
}

// ParallelOn is [Parallel] for a test that uses several servers: conns
// maps each family to the connections the test opens on it. The budgets
// are taken in one order (by family name), so two tests never wait for
// each other's.
func ParallelOn(t *testing.T, conns map[string]int) {
	t.Helper()
	t.Parallel()
	families := make([]string, 0, len(conns))
	for f := range conns {
		families = append(families, f)
	}
	sort.Strings(families)
	for _, f := range families {
		Reserve(t, f, conns[f])
	}
}

// ForEachParallel is [ForEach] with every subtest parallel: each calls
// [Parallel] with its target's family and maxConns before its pool opens.
// The caller decides whether t itself is parallel.
func ForEachParallel(t *testing.T, maxConns int, f func(t *testing.T, e *Env), families ...string) {
	t.Helper()
	for _, tg := range Targets() {
		if len(families) > 0 && !contains(families, tg.Family()) {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			Parallel(t, tg.Family(), maxConns)
			f(t, NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, maxConns)))
		})
	}
}

// ForEachTarget runs f in a parallel subtest per target whose family is
// in families (every target when none is given), having reserved conns
// connections (see [Parallel]): f opens its own pools with tg.Open, at most
// conns connections in all. For tests that need no ledger table.
func ForEachTarget(t *testing.T, conns int, f func(t *testing.T, tg Target), families ...string) {
	t.Helper()
	for _, tg := range Targets() {
		if len(families) > 0 && !contains(families, tg.Family()) {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			Parallel(t, tg.Family(), conns)
			f(t, tg)
		})
	}
}

// ScratchTable creates a uniquely named table with the given column
// definitions in db, for example "(k INTEGER PRIMARY KEY, v INTEGER NOT
// NULL)", drops it when the test ends and returns its quoted name.
func ScratchTable(t testing.TB, db *sql.DB, d dialects.Dialect, columns string) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := d.QuoteIdent("opl_scratch_" + hex.EncodeToString(b[:]))
	if _, err := db.Exec("CREATE TABLE " + name + " " + columns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP TABLE " + name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}

// AwaitBlocked is [WaitBlocked] for goroutines other than the test's: it
// returns an error instead of failing the test, after timeout or when ctx
// ends. d must implement dialectkit.Sessions.
func AwaitBlocked(ctx context.Context, db *sql.DB, d dialects.Dialect, holder int64, n int, timeout time.Duration) error {
	ss, ok := d.(dialectkit.Sessions)
	if !ok {
		return fmt.Errorf("dialect %s shows no sessions (dialectkit.Sessions)", d.Name())
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := ss.BlockedBy(ctx, db, holder)
		if err != nil {
			return fmt.Errorf("read the database's lock waits: %w", err)
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v the database shows %d of %d sessions waiting for session %d", timeout, got, n, holder)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ConnSessionID returns the database's id of conn's session (through a
// transaction that is rolled back again). d must implement
// dialectkit.Sessions.
func ConnSessionID(t testing.TB, d dialects.Dialect, conn *sql.Conn) int64 {
	t.Helper()
	tx, err := conn.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatalf("session id: %v", err)
	}
	defer tx.Rollback()
	return SessionID(t, d, tx)
}

// PooledConns takes every connection of db's pool (db.Stats().MaxOpenConnections
// of them, which must be set and must all be idle or openable) and returns
// them with their session ids, giving them back when the test ends (or
// earlier, when the caller closes them). A pool thus shows which sessions
// it holds: whether a session came back to it, or was discarded.
func PooledConns(t testing.TB, db *sql.DB, d dialects.Dialect) map[int64]*sql.Conn {
	t.Helper()
	max := db.Stats().MaxOpenConnections
	if max <= 0 {
		t.Fatal("PooledConns needs a pool with SetMaxOpenConns")
	}
	out := make(map[int64]*sql.Conn, max)
	for range max {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := db.Conn(ctx)
		cancel()
		if err != nil {
			t.Fatalf("take connection %d of %d from the pool: %v", len(out)+1, max, err)
		}
		t.Cleanup(func() { conn.Close() })
		out[ConnSessionID(t, d, conn)] = conn
	}
	return out
}
