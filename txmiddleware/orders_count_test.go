package txmiddleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/txmiddleware"
)

// TestStatementCountsByOrder counts, through a driver wrapper, what one keyed
// call sends, BEGIN and COMMIT (or ROLLBACK) included, against a bare
// transaction doing the same business insert: claim first two statements
// more (the claim and the completion), claim at commit one more (the
// record); a replay claim first sends the claim and rolls back (on
// PostgreSQL one statement reads the stored entry; elsewhere the INSERT
// and its read-back), at commit the work, the record's INSERT and its
// read-back before the rollback (the record is optimised for recording).
func TestStatementCountsByOrder(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 1)
			db, n := tg.OpenCounting(t, 1)
			e := withStore(t, testdb.NewEnv(t, tg.Name, tg.Dialect, db))
			ctx := context.Background()
			count := func(f func()) int64 {
				n.Reset()
				f()
				return int64(n.Count())
			}
			bare := count(func() {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := e.WriteBiz(ctx, tx, "bare", 1); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			})
			if bare != 3 {
				t.Fatalf("a bare transaction counted %d statements, want 3 (BEGIN, INSERT, COMMIT)", bare)
			}
			replayFirst := int64(4)  // BEGIN, INSERT, SELECT, ROLLBACK
			replayCommit := int64(5) // BEGIN, the work, INSERT, SELECT, ROLLBACK
			// TiDB checks the transaction's mode before each claim and
			// record: one SELECT more on every path.
			check := int64(0)
			if tg.Server() == "tidb" {
				check = 1
			}
			first, atCommit := e.runner(t), e.runner(t, txmiddleware.WithClaimAtCommit())
			bounded := e.runner(t, txmiddleware.WithClaimAtCommit(), txmiddleware.WithLockWait(2*time.Second))
			// What the lock-wait bound adds at commit: nothing on
			// PostgreSQL (it rides in the record statement); elsewhere the
			// session setting, set and put back (SQLite reads it first).
			boundCost := map[string]int64{"postgres": 0, "mysql": 2, "tidb": 3, "sqlite": 3}[tg.Server()]
			var runs atomic.Int64
			run := func(r *txmiddleware.Runner, key string) (txmiddleware.RunResult, int64) {
				var out txmiddleware.RunResult
				c := count(func() {
					var err error
					out, err = r.Run(ctx, req(t, key), e.bizWork(key, 1, &runs))
					if err != nil {
						t.Fatal(err)
					}
				})
				return out, c
			}
			for _, c := range []struct {
				name   string
				r      *txmiddleware.Runner
				key    string
				replay bool
				want   int64
			}{
				{"claim first", first, "k-first", false, bare + 2 + check},
				{"claim first, replay", first, "k-first", true, replayFirst + check},
				{"claim at commit", atCommit, "k-commit", false, bare + 1 + check},
				{"claim at commit, replay", atCommit, "k-commit", true, replayCommit + check},
				{"claim at commit, replay of a claim-first call", atCommit, "k-first", true, replayCommit + check},
				{"claim at commit with a lock-wait bound", bounded, "k-bounded", false, bare + 1 + check + boundCost},
			} {
				out, got := run(c.r, c.key)
				if out.Replayed != c.replay {
					t.Fatalf("%s: %+v", c.name, out)
				}
				if got != c.want {
					t.Errorf("%s: %d statements, want %d (the bare transaction: %d)", c.name, got, c.want, bare)
				}
				t.Logf("%s %s: %d statements (bare transaction %d)", tg.Name, c.name, got, bare)
			}
		})
	}
}
