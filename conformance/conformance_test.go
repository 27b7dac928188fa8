package conformance_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
)

// keys is the herd's key count in these tests (OPLEDGER_CONFORMANCE_KEYS
// overrides it).
func keys(t *testing.T) int { return testdb.Keys(t, 25) }

// TestStore: the kit's own ledger passes the whole suite on every target,
// at every isolation level the target offers; through lib/pq with the
// one-statement claim (ledger.WithOneStatementClaim), so that both forms
// of the PostgreSQL claim are proven.
func TestStore(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := tg.Open(t, conformance.DefaultConcurrency+4)
			start := time.Now()
			var opts []ledger.Option
			if tg.Name == "postgres/pq" {
				opts = append(opts, ledger.WithOneStatementClaim())
			}
			conformance.Run(t, conformance.StoreTarget(tg.Name, db, tg.Dialect, opts...), conformance.WithKeys(testdb.Scaled(tg.Name, keys(t))))
			t.Logf("suite took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestStoreAtCommit: the kit's own ledger passes every case that applies
// to the claim-at-commit order (Store.Record), on every target, at every
// isolation level, with 10 keys (the ledger's TestRecordHerd runs the
// at-commit herd at 64 × 20 on every target). Not parallel with the other
// tests (its targets run in parallel with each other): together with
// TestStore and TestSuiteHasTeeth it loaded a 2-core machine under -race
// until SQLite claimants starved past the teeth test's case timeout.
func TestStoreAtCommit(t *testing.T) {
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := tg.Open(t, conformance.DefaultConcurrency+4)
			start := time.Now()
			conformance.Run(t, conformance.StoreTarget(tg.Name, db, tg.Dialect).AtCommit(), conformance.WithKeys(testdb.Scaled(tg.Name, min(keys(t), 10))))
			t.Logf("suite took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestCheckStore: the report form gives every case a verdict, a duration
// and figures, and no failure for the kit's ledger.
func TestCheckStore(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0] // SQLite: always available
	db := tg.Open(t, conformance.DefaultConcurrency+4)
	rep := conformance.Check(context.Background(), conformance.StoreTarget(tg.Name, db, tg.Dialect), conformance.WithKeys(5))
	if rep.Failed() {
		t.Fatalf("failures: %v\n%s", rep.Failures(), describe(rep))
	}
	if len(rep.Results) != len(conformance.Cases()) {
		t.Fatalf("%d results for %d cases (SQLite runs each once)", len(rep.Results), len(conformance.Cases()))
	}
	for _, r := range rep.Results {
		switch r.Verdict {
		case conformance.Pass:
			if r.Figures == "" || r.Duration <= 0 {
				t.Errorf("%s passed without figures or duration: %+v", r.Name, r)
			}
		case conformance.Skip:
			if len(r.Messages) == 0 {
				t.Errorf("%s skipped without a reason", r.Name)
			}
		}
	}
}

// TestCheckFiltersAndValidates: WithCases runs only the named cases, and
// an incomplete target is one failed result, not a panic.
func TestCheckFiltersAndValidates(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	rep := conformance.Check(context.Background(), conformance.StoreTarget(tg.Name, db, tg.Dialect), conformance.WithCases("identity-isolation"))
	if len(rep.Results) != 1 || rep.Results[0].Name != "identity-isolation" || rep.Results[0].Verdict != conformance.Pass {
		t.Fatalf("filtered run: %+v", rep.Results)
	}
	if rep.Concurrency > db.Stats().MaxOpenConnections {
		// The report keeps the option; the cases lower it to fit the pool.
		t.Logf("concurrency %d over a pool of %d", rep.Concurrency, db.Stats().MaxOpenConnections)
	}
	bad := conformance.Check(context.Background(), conformance.Target{Name: "empty"})
	if !bad.Failed() || len(bad.Results) != 1 {
		t.Fatalf("empty target: %+v", bad)
	}
}

// TestCheckSurvivesPanicsAndReportsProgress: a ledger that panics fails
// its cases instead of crashing the tool, every result reaches the
// progress callback, and no scratch table is left behind.
func TestCheckSurvivesPanicsAndReportsProgress(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	target := conformance.StoreTarget(tg.Name, db, tg.Dialect)
	target.NewLedger = func(conformance.LedgerConfig) (ledger.Ledger, error) { return panicky{}, nil }
	var seen []string
	rep := conformance.Check(context.Background(), target,
		conformance.WithCases("herd", "identity-isolation", "snapshot"),
		conformance.WithKeys(2), conformance.WithConcurrency(4),
		conformance.WithProgress(func(r conformance.CaseResult) { seen = append(seen, r.Name+" "+string(r.Verdict)) }))
	want := []string{"herd/default fail", "snapshot skip", "identity-isolation fail"}
	if !slices.Equal(seen, want) {
		t.Fatalf("progress: %v, want %v", seen, want)
	}
	if !strings.Contains(strings.Join(rep.Results[0].Messages, " "), "panic") {
		t.Fatalf("herd messages: %v", rep.Results[0].Messages)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'opl_conf_%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d scratch tables left (%v)", n, err)
	}
}

// panicky panics in Claim; its dialect is SQLite's (the target's).
type panicky struct{}

func (panicky) Dialect() dialects.Dialect { return sqlite.New() }

func (panicky) Claim(context.Context, *sql.Tx, ledger.ClaimRequest) (*ledger.Claim, error) {
	panic("claim exploded")
}

func (panicky) Complete(context.Context, *sql.Tx, *ledger.Claim, ledger.Result) error { return nil }

func (panicky) Lookup(context.Context, ledger.Querier, ledger.Identity) (*ledger.Entry, error) {
	return nil, ledger.ErrNotFound
}

// TestSuiteHasTeeth runs two broken ledgers through the suite (via Check,
// so that their failures are data) and asserts which cases catch each.
func TestSuiteHasTeeth(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" || tg.Name == testdb.ModerncName {
			continue // the driver does not change what a broken ledger does; pgx covers PostgreSQL, mattn SQLite
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := tg.Open(t, conformance.DefaultConcurrency+4)
			opts := []conformance.Option{conformance.WithKeys(8), conformance.WithCaseTimeout(20 * time.Second)}
			for _, kind := range []string{"naive", "own-tx", "own-tx-record"} {
				base := conformance.StoreTarget(tg.Name, db, tg.Dialect)
				if kind == "own-tx-record" {
					base = base.AtCommit()
				}
				if kind != "naive" && dialectkit.TraitsOf(tg.Dialect).SerialWriters {
					// A claim in its own transaction deadlocks a
					// serial-writer database (SQLite) against the caller's
					// write lock until the busy timeout: keep it short.
					base.DB = openSQLite(t, filepath.Join(t.TempDir(), "teeth.db"), 250*time.Millisecond)
				}
				t.Run(kind, func(t *testing.T) {
					if kind == "naive" {
						testdb.SkipOnTiDB(t, tg.Dialect, "which cases catch the naive ledger is pinned for InnoDB's locking (its 1062 waits and shared locks)")
					}
					rep := conformance.Check(context.Background(), badTarget(base, kind), opts...)
					tornDown(t, rep)
					caught := rep.Failures()
					t.Logf("%s on %s, caught by %d of %d: %s", kind, tg.Name, len(caught), len(rep.Results), strings.Join(caught, " "))
					want := mustCatch(tg, kind)
					for _, w := range want {
						if !slices.Contains(caught, w) {
							t.Errorf("%s on %s: case %s passed; it must catch this ledger", kind, tg.Name, w)
						}
					}
					if len(want) == 0 && len(caught) != 0 {
						t.Errorf("%s on %s: want no case to fail, got %v\n%s", kind, tg.Name, caught, describe(rep))
					}
					if t.Failed() || testing.Verbose() {
						t.Log(describe(rep))
					}
				})
			}
		})
	}
}

// mustCatch lists the cases that must catch a broken ledger on a target
// (by its database family).
//
// The naive read-then-insert ledger is correct on SQLite: immediate
// transactions serialise every writer, so nothing races. On PostgreSQL and
// MySQL the loser's INSERT waits and then fails with a duplicate key
// (23505, which also poisons a PostgreSQL transaction; 1062); at
// REPEATABLE READ the stale read says "absent"; claimants of an expired
// entry all re-acquire it. PostgreSQL SERIALIZABLE turns most of these
// into 40001, which the naive ledger retries, so fewer cases catch it
// there.
//
// The own-transaction ledger commits the claim before the caller's
// mutation: a rollback leaves a pending entry behind, and waiters see a
// committed entry without a result instead of waiting. On SQLite it also
// deadlocks against the caller's own write lock.
//
// The own-transaction recorder, run claim at commit, commits the
// completed entry before the caller's work commits: a rollback leaves the
// entry behind (atomicity, the killed holder of faults), and waiters
// replay it instead of waiting for the holder.
func mustCatch(tg testdb.Target, kind string) []string {
	switch {
	case kind == "naive" && tg.Family() == "sqlite":
		return nil
	case kind == "naive" && tg.Family() == "postgres":
		return []string{"herd/read_committed", "herd/repeatable_read", "wait-then-commit/read_committed",
			"snapshot/repeatable_read", "prior-read/read_committed", "three-waiter-rollback/read_committed",
			"expiry/read_committed"}
	case kind == "naive" && tg.Family() == "mysql":
		return []string{"herd/repeatable_read", "herd/read_committed", "wait-then-commit/repeatable_read",
			"snapshot/repeatable_read", "prior-read/repeatable_read", "expiry/repeatable_read"}
	case kind == "own-tx-record":
		out := []string{"atomicity", "faults", "in-progress"}
		for _, l := range dialectkit.TraitsOf(tg.Dialect).IsolationLevels {
			l := levelName(l)
			out = append(out, "wait-then-commit/"+l, "wait-then-rollback/"+l, "three-waiter-rollback/"+l)
		}
		return out
	case kind == "own-tx":
		out := []string{"atomicity", "faults", "in-progress"}
		for _, l := range dialectkit.TraitsOf(tg.Dialect).IsolationLevels {
			l := levelName(l)
			out = append(out, "herd/"+l, "wait-then-commit/"+l, "wait-then-rollback/"+l, "three-waiter-rollback/"+l)
		}
		return out
	}
	return nil
}

// levelName is the suite's name for an isolation level in case names.
func levelName(l sql.IsolationLevel) string {
	return strings.ReplaceAll(strings.ToLower(l.String()), " ", "_")
}

func describe(rep conformance.Report) string {
	var b strings.Builder
	for _, r := range rep.Results {
		msg := ""
		if len(r.Messages) > 0 {
			msg = r.Messages[0]
			if len(msg) > 160 {
				msg = msg[:160] + "…"
			}
		}
		fmt.Fprintf(&b, "  %-40s %-4s %8v  %s | %s\n", r.Name, r.Verdict, r.Duration.Round(time.Millisecond), r.Figures, msg)
	}
	return b.String()
}

// tornDown fails t when a case of rep could not drop its scratch tables:
// a broken ledger's case fails anyway, so a teardown that failed with it
// would go unseen, its tables left on the shared server.
func tornDown(t *testing.T, rep conformance.Report) {
	t.Helper()
	for _, r := range rep.Results {
		for _, m := range r.Messages {
			if strings.Contains(m, "teardown: ") {
				t.Errorf("%s: %s", r.Name, m)
			}
		}
	}
}

func openSQLite(t *testing.T, path string, busy time.Duration) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", sqlite.DSN(path, busy))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conformance.DefaultConcurrency + 4)
	db.SetMaxIdleConns(conformance.DefaultConcurrency + 4)
	t.Cleanup(func() {
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d connections in use at the end", n)
		}
		db.Close()
	})
	return db
}
