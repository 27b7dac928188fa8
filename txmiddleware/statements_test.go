package txmiddleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/txmiddleware"
)

// keyedStatements is what a keyed call through a Runner with a lock-wait
// bound and an error codec costs in statements, per database family,
// BEGIN and COMMIT (or ROLLBACK) included, "WORK" standing for the work's
// own statement. The runner takes no SAVEPOINT on any path.
var keyedStatements = map[string]map[string][]string{
	// The bound is set inside the claim's insert (a CTE: "WITH"), and at
	// commit inside the record's insert (a CTE too); a replay reads the
	// stored entry with a SELECT of its own.
	"postgres": {
		"happy":           {"BEGIN", "WITH", "WORK", "UPDATE", "COMMIT"},
		"replay":          {"BEGIN", "WITH", "SELECT", "ROLLBACK"},
		"atcommit":        {"BEGIN", "WORK", "WITH", "COMMIT"},
		"atcommit replay": {"BEGIN", "WORK", "WITH", "SELECT", "ROLLBACK"},
	},
	// The bound is a session setting: set (keeping the session's value
	// in a user variable) before BEGIN, put back after the transaction.
	"mysql": {
		"happy":           {"SET", "BEGIN", "INSERT", "WORK", "UPDATE", "COMMIT", "SET"},
		"replay":          {"SET", "BEGIN", "INSERT", "SELECT", "ROLLBACK", "SET"},
		"atcommit":        {"SET", "BEGIN", "WORK", "INSERT", "COMMIT", "SET"},
		"atcommit replay": {"SET", "BEGIN", "WORK", "INSERT", "SELECT", "ROLLBACK", "SET"},
	},
	// TiDB: the bound and the transaction mode are read, set together and
	// put back; the ledger checks the transaction's mode (a SELECT of
	// tidb_txn_mode) before each claim and record (mysql.NewTiDB).
	"tidb": {
		"happy":           {"SELECT", "SET", "BEGIN", "SELECT", "INSERT", "WORK", "UPDATE", "COMMIT", "SET"},
		"replay":          {"SELECT", "SET", "BEGIN", "SELECT", "INSERT", "SELECT", "ROLLBACK", "SET"},
		"atcommit":        {"SELECT", "SET", "BEGIN", "WORK", "SELECT", "INSERT", "COMMIT", "SET"},
		"atcommit replay": {"SELECT", "SET", "BEGIN", "WORK", "SELECT", "INSERT", "SELECT", "ROLLBACK", "SET"},
	},
	// busy_timeout is a setting of the connection, and the wait is at
	// BEGIN: read, set, and put back after the transaction (in-process
	// calls, no round trip).
	"sqlite": {
		"happy":           {"PRAGMA", "PRAGMA", "BEGIN", "INSERT", "WORK", "UPDATE", "COMMIT", "PRAGMA"},
		"replay":          {"PRAGMA", "PRAGMA", "BEGIN", "INSERT", "SELECT", "ROLLBACK", "PRAGMA"},
		"atcommit":        {"PRAGMA", "PRAGMA", "BEGIN", "WORK", "INSERT", "COMMIT", "PRAGMA"},
		"atcommit replay": {"PRAGMA", "PRAGMA", "BEGIN", "WORK", "INSERT", "SELECT", "ROLLBACK", "PRAGMA"},
	},
}

// TestStatementCounts counts, through a counting driver wrapper on the
// real database, the statements of a keyed call that runs the work and of
// one that replays, with the bound grpcint sets by default (2 s), in both
// orders: claim first, and claim at commit (WithClaimAtCommit), where on
// PostgreSQL the bound rides in the record statement, so that a keyed
// call is one statement over the bare transaction.
func TestStatementCounts(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 1)
			db, c := tg.OpenCounting(t, 1)
			e := withStore(t, testdb.NewEnv(t, tg.Name, tg.Dialect, db))
			r := e.runner(t, txmiddleware.WithLockWait(2*time.Second))
			atCommit := e.runner(t, txmiddleware.WithLockWait(2*time.Second), txmiddleware.WithClaimAtCommit())
			ctx := context.Background()
			var runs atomic.Int64
			run := func(r *txmiddleware.Runner, key string) {
				t.Helper()
				c.Reset()
				if _, err := r.Run(ctx, req(t, key), e.bizWork(key, 1, &runs)); err != nil {
					t.Fatal(err)
				}
			}
			want := keyedStatements[tg.Server()]
			run(r, "count-1")
			testdb.CheckStatements(t, "keyed call", c, e.Biz, want["happy"])
			run(r, "count-1")
			testdb.CheckStatements(t, "keyed replay", c, e.Biz, want["replay"])
			if n := runs.Load(); n != 1 {
				t.Fatalf("work ran %d times, want 1", n)
			}
			run(atCommit, "count-2")
			testdb.CheckStatements(t, "keyed call at commit", c, e.Biz, want["atcommit"])
			// The replay at commit runs the work, then rolls it back.
			run(atCommit, "count-2")
			testdb.CheckStatements(t, "keyed replay at commit", c, e.Biz, want["atcommit replay"])
			if n := runs.Load(); n != 3 {
				t.Fatalf("work ran %d times, want 3", n)
			}
		})
	}
}
