package ledger_test

import (
	"context"
	"testing"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
)

// ledgerStatements is what each path of the ledger costs in statements,
// per database family, BEGIN and COMMIT included (the caller's own; the
// test's transaction writes nothing else). The bare transaction it is
// measured against is BEGIN, the caller's write and COMMIT.
var ledgerStatements = map[string]map[string][]string{
	// One statement claims (a CTE: "WITH"), and replays.
	"postgres": {
		"happy":  {"BEGIN", "WITH", "UPDATE", "COMMIT"},
		"replay": {"BEGIN", "WITH", "COMMIT"},
		// The claim waited for the holder: its snapshot cannot show the
		// holder's row, so the entry is read with a separate SELECT.
		"waited": {"BEGIN", "WITH", "SELECT", "COMMIT"},
	},
	"mysql": {
		"happy":  {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
		"waited": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
	"sqlite": {
		"happy":  {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
	},
}

// TestStatementCounts counts, through a counting driver wrapper on the
// real database, the statements of a claim that acquires and completes
// (the happy path) and of a claim that replays, on every target.
func TestStatementCounts(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 3)
			db, c := tg.OpenCounting(t, 1)
			e := newEnv(t, tg.Name, tg.Dialect, db)
			ctx := context.Background()
			id, err := ledger.NewIdentity("counter", "/count.v1/Op", "k1")
			if err != nil {
				t.Fatal(err)
			}
			req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("one")}
			run := func(want ledger.Outcome) {
				t.Helper()
				c.Reset()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				cl, err := e.l.Claim(ctx, tx, req)
				if err != nil {
					t.Fatal(err)
				}
				if cl.Outcome != want {
					t.Fatalf("outcome %v, want %v", cl.Outcome, want)
				}
				if cl.Acquired() {
					if err := e.l.Complete(ctx, tx, cl, ledger.Result{Response: []byte("r")}); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			want := ledgerStatements[tg.Family()]
			run(ledger.Acquired)
			testdb.CheckStatements(t, "happy path", c, "", want["happy"])
			run(ledger.Replay)
			testdb.CheckStatements(t, "replay", c, "", want["replay"])
			if want["waited"] == nil {
				return // SQLite: the wait is at BEGIN, before any claim
			}

			// A replay whose claim waited for the holder to commit.
			other := tg.Open(t, 2) // the holder, and the lock-wait view
			held, err := ledger.NewIdentity("counter", "/count.v1/Op", "held")
			if err != nil {
				t.Fatal(err)
			}
			hreq := ledger.ClaimRequest{Identity: held, Fingerprint: fp("held")}
			holder, err := other.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback()
			hc, err := e.l.Claim(ctx, holder, hreq)
			if err != nil || !hc.Acquired() {
				t.Fatalf("holder: %+v %v", hc, err)
			}
			if err := e.l.Complete(ctx, holder, hc, ledger.Result{Response: []byte("h")}); err != nil {
				t.Fatal(err)
			}
			hid := testdb.SessionID(t, tg.Dialect, holder)
			c.Reset()
			type outcome struct {
				c   *ledger.Claim
				err error
			}
			done, returned := make(chan outcome, 1), make(chan struct{})
			go func() {
				defer close(returned)
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					done <- outcome{err: err}
					return
				}
				cl, err := e.l.Claim(ctx, tx, hreq)
				if err == nil {
					err = tx.Commit()
				} else {
					tx.Rollback()
				}
				done <- outcome{cl, err}
			}()
			testdb.WaitBlocked(t, other, tg.Dialect, hid, 1, returned)
			if err := holder.Commit(); err != nil {
				t.Fatal(err)
			}
			o := <-done
			if o.err != nil || o.c.Outcome != ledger.Replay {
				t.Fatalf("claim that waited: %+v %v, want a replay", o.c, o.err)
			}
			testdb.CheckStatements(t, "replay after waiting", c, "", want["waited"])
		})
	}
}
