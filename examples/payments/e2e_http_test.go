package payments_test

import (
	"testing"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/policy"
)

// TestDefiniteOutcomesHTTP: the same scenario over HTTP on every
// database: 1,000 keyed transfers through the httpint middleware, 30% of
// the answers lost after the server committed (on the server, after the
// response headers, after the whole response), 5% failed before sending,
// 5% delayed, with the example's HTTP client owning the retries: every
// call gets its answer, none twice, none lost.
func TestDefiniteOutcomesHTTP(t *testing.T) {
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			sc := scenario(t, tg, 1000)
			sc.Transport = payments.TransportHTTP
			budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
			if err != nil {
				t.Fatal(err)
			}
			sc.Faults = lossAtThreePlaces(13)
			sc.HTTPClient = payments.HTTPClientSettings{Budget: budget, MaxAttempts: 12,
				Backoff: policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}}
			rep := run(t, sc)
			checkDefinite(t, rep)
			if rep.Failed != 0 || rep.Succeeded != rep.Calls {
				t.Errorf("%d of %d calls failed (%v); with this budget every call should get its answer", rep.Failed, rep.Calls, rep.FailedBy)
			}
			if rep.Resolved == 0 {
				t.Error("no call was resolved; lost answers should have been resolved")
			}
		})
	}
}

// TestOutageAmplificationHTTP: the outage over HTTP: the budget keeps the
// attempts per call close to one, and every call ends definitely.
func TestOutageAmplificationHTTP(t *testing.T) {
	tg := e2eTargets()[0]
	sc := scenario(t, tg, 100)
	sc.Transport = payments.TransportHTTP
	sc.OutageCalls = 200
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		t.Fatal(err)
	}
	sc.Faults = payments.FaultSettings{DropAfterCommit: 0.3, Seed: 3}
	sc.OutagePause = time.Second
	sc.HTTPClient = payments.HTTPClientSettings{Budget: budget, Backoff: policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}}
	rep := run(t, sc)
	if !rep.OK() {
		t.Errorf("duplicates %d, lost %d, wrong %d, wrong reasons %d, ambiguous %d (%v)", rep.Duplicates, rep.Lost, rep.WrongResponses, rep.WrongOutcomes, rep.Ambiguous, rep.FailedBy)
	}
	if a := rep.Amplification(); a > 1.25 {
		t.Errorf("amplification during the outage %.2f, want at most 1.25", a)
	}
	if rep.BudgetRefusals == 0 || rep.Definite < rep.OutageCalls {
		t.Errorf("budget refusals %d, definite errors %d (want at least %d)", rep.BudgetRefusals, rep.Definite, rep.OutageCalls)
	}
}
