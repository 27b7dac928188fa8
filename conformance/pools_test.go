package conformance_test

import (
	"database/sql"
	"sync"
	"testing"

	"github.com/opledger/opledger/internal/testdb"
)

// The package's tests run in parallel, but the database servers are
// shared with every other package's tests (PostgreSQL allows 100
// connections, MariaDB 151): at most connBudget connections of this
// package's pools are open on one server at a time. A suite pool
// (conformance.DefaultConcurrency+4 = 36) fits once per server, on
// PostgreSQL beside TestBareDialect's pool of 8, so the big tests of one
// server queue behind each other while different servers (and SQLite,
// which has no budget) run side by side.
var connBudget = map[string]int{"postgres": 44, "mysql": 36}

// budgets hold the connections in use per server family.
var budgets = struct {
	sync.Mutex
	cond  *sync.Cond
	inUse map[string]int
}{inUse: map[string]int{}}

func init() { budgets.cond = sync.NewCond(&budgets.Mutex) }

// reserve waits until n connections of family's budget are free, takes
// them, and gives them back when the test ends (after the pools it opened
// afterwards have been closed: cleanups run last-in first-out).
func reserve(t testing.TB, family string, n int) {
	t.Helper()
	budget, ok := connBudget[family]
	if !ok {
		return
	}
	if n > budget {
		t.Fatalf("a pool of %d connections exceeds the %s budget of %d", n, family, budget)
	}
	budgets.Lock()
	for budgets.inUse[family]+n > budget {
		budgets.cond.Wait()
	}
	budgets.inUse[family] += n
	budgets.Unlock()
	t.Cleanup(func() {
		budgets.Lock()
		budgets.inUse[family] -= n
		budgets.Unlock()
		budgets.cond.Broadcast()
	})
}

// openPool opens tg with maxConns connections within its server's budget.
func openPool(t testing.TB, tg testdb.Target, maxConns int) *sql.DB {
	t.Helper()
	reserve(t, tg.Family(), maxConns)
	return tg.Open(t, maxConns)
}
