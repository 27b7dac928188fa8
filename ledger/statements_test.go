package ledger_test

import (
	"context"
	"slices"
	"strings"
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
	},
	"mysql": {
		"happy":  {"BEGIN", "INSERT", "UPDATE", "COMMIT"},
		"replay": {"BEGIN", "INSERT", "SELECT", "COMMIT"},
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
			testdb.Parallel(t, tg.Family(), 1)
			db, c := tg.OpenCounting(t, 1)
			e := newEnv(t, tg.Name, tg.Dialect, db)
			ctx := context.Background()
			id, err := ledger.NewIdentity("counter", "/count.v1/Op", "k1")
			if err != nil {
				t.Fatal(err)
			}
			req := ledger.ClaimRequest{Identity: id, Fingerprint: fp("one")}
			run := func(want ledger.Outcome) []string {
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
				return c.Statements()
			}
			want := ledgerStatements[tg.Family()]
			checkStatements(t, "happy path", run(ledger.Acquired), want["happy"], c)
			checkStatements(t, "replay", run(ledger.Replay), want["replay"], c)
		})
	}
}

// checkStatements fails unless got is want.
func checkStatements(t *testing.T, path string, got, want []string, c *testdb.Counter) {
	t.Helper()
	t.Logf("%s: %d statements: %s", path, len(got), strings.Join(got, " "))
	if !slices.Equal(got, want) {
		t.Errorf("%s: statements %v, want %v\nSQL:\n%s", path, got, want, strings.Join(c.SQL(), "\n"))
	}
}
