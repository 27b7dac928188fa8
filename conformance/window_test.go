package conformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/internal/testkit/testdb"
)

// windowCases are the suite's window cases.
var windowCases = []string{"window-stale-key-refused", "window-resolve-stale-key", "window-future-key-refused", "window-unknown-birth-policy"}

// TestWindowCasesListed: the window cases are in the suite, so that
// opledger conformance runs and reports them.
func TestWindowCasesListed(t *testing.T) {
	t.Parallel()
	var names []string
	for _, c := range conformance.Cases() {
		names = append(names, c.Name)
		if strings.HasPrefix(c.Name, "window-") && (c.PerLevel || c.Proves == "") {
			t.Errorf("%s: per level %v, proves %q; want a single-level case that says what it proves", c.Name, c.PerLevel, c.Proves)
		}
	}
	for _, w := range windowCases {
		if !slices.Contains(names, w) {
			t.Errorf("case %s missing from %v", w, names)
		}
	}
}

// TestSuiteCatchesBirthBlind: a ledger that ignores a key's birth (claims
// a key the window refuses as one without a birth, so that an expired key
// runs again, and answers its lookup ErrNotFound) fails every window case,
// claim first and claim at commit, on every database; and it is otherwise
// correct: the herd and the expiry cases pass.
func TestSuiteCatchesBirthBlind(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" || tg.Name == testdb.ModerncName {
			continue // the driver does not change what a broken ledger does
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := tg.Open(t, conformance.DefaultConcurrency+4)
			for _, base := range []conformance.Target{conformance.StoreTarget(tg.Name, db, tg.Dialect), conformance.StoreTarget(tg.Name, db, tg.Dialect).AtCommit()} {
				rep := conformance.Check(context.Background(), badTarget(base, "birth-blind"),
					conformance.WithCases(append([]string{"herd", "expiry"}, windowCases...)...),
					conformance.WithKeys(4), conformance.WithCaseTimeout(time.Minute))
				tornDown(t, rep)
				var want []string
				for _, r := range rep.Results {
					if strings.HasPrefix(r.Case, "window-") {
						want = append(want, r.Name)
					}
				}
				if got := rep.Failures(); !slices.Equal(got, want) || len(want) != len(windowCases) {
					t.Errorf("birth-blind on %s: failed %v, want exactly %v\n%s", base.Name, got, want, describe(rep))
				} else if testing.Verbose() {
					t.Log(describe(rep))
				}
			}
		})
	}
}

// TestStoreWindowCases: the kit's ledger passes the window cases on every
// target, claim first and claim at commit (TestStore runs them too, among
// all the others; this one prints their figures).
func TestStoreWindowCases(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			db := tg.Open(t, conformance.DefaultConcurrency+4)
			for _, target := range []conformance.Target{conformance.StoreTarget(tg.Name, db, tg.Dialect), conformance.StoreTarget(tg.Name, db, tg.Dialect).AtCommit()} {
				rep := conformance.Check(context.Background(), target, conformance.WithCases(windowCases...))
				if rep.Failed() || len(rep.Results) != len(windowCases) {
					t.Errorf("%s: failures %v\n%s", target.Name, rep.Failures(), describe(rep))
				}
				for _, r := range rep.Results {
					t.Logf("%s %s %s: %s", target.Name, r.Name, r.Verdict, r.Figures)
				}
			}
		})
	}
}
