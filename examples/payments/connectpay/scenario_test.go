package connectpay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/connectpay"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// scenario is a connect scenario of calls on tg, with the kit client's
// budget generous enough for every call to get its answer.
func scenario(t *testing.T, tg testdb.Target, calls int) payments.Scenario {
	t.Helper()
	db := tg.Open(t, 16)
	table := testdb.NewTable(t, db, tg.Dialect)
	biz := table + "_transfers"
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
	budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	return payments.Scenario{DB: db, Dialect: tg.Dialect, LedgerTable: table, BusinessTable: biz, Calls: calls, Concurrency: 32,
		Transport: payments.TransportConnect,
		Wire: connectpay.Wire{ClientOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithMaxAttempts(12),
			keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}}}
}

func run(t *testing.T, sc payments.Scenario) payments.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a hang guard
	defer cancel()
	rep, err := sc.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attempts %d, executed %d, replayed %d, resolved %d, failed %d %v, elapsed %s",
		rep.Attempts, rep.Executed, rep.Replayed, rep.Resolved, rep.Failed, rep.FailedBy, rep.Elapsed)
	return rep
}

// TestDefiniteOutcomes: the payments scenario over connect-go on every
// database: 1,000 keyed transfers, alternating between the Connect
// protocol over HTTP/1.1 and the gRPC protocol over h2c, 30% of the
// answers lost after the server committed (on the server, after the
// response headers, after the whole response), 5% failed before they
// were sent, 5% delayed: every call gets its answer, none twice, none
// lost; answered calls sent again (on either protocol) replay.
func TestDefiniteOutcomes(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Name == "postgres/pq" {
			continue // the scenario's driver on PostgreSQL is pgx
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			sc := scenario(t, tg, 1000)
			sc.Faults = payments.FaultSettings{FailBeforeSend: 0.05, Delay: 0.05, Seed: 17,
				DropAfterCommit: 0.1, LoseAfterHeaders: 0.1, LoseAfterResponse: 0.1}
			var resolved atomic.Int64
			sc.OnEvent = func(e payments.Event) {
				if e.Kind == payments.EventCall && e.Resolved {
					resolved.Add(1)
				}
			}
			rep := run(t, sc)
			if !rep.OK() || rep.Ambiguous != 0 || rep.Failed != 0 || rep.Succeeded != rep.Calls {
				t.Errorf("duplicates %d, lost %d, wrong %d, wrong reasons %d, ambiguous %d, failed %d of %d (%v); want every call answered once",
					rep.Duplicates, rep.Lost, rep.WrongResponses, rep.WrongOutcomes, rep.Ambiguous, rep.Failed, rep.Calls, rep.FailedBy)
			}
			if want := int64(rep.Calls); rep.Executed != want {
				t.Errorf("executed %d, want one execution per call (%d)", rep.Executed, want)
			}
			f := rep.Faults
			if f.FailedBeforeSend == 0 || f.LostAfterHeaders == 0 || f.LostAfterResponse == 0 || f.DroppedAfterRun == f.LostAfterHeaders+f.LostAfterResponse {
				t.Errorf("faults %+v: want each kind injected", f)
			}
			if rep.Resolved == 0 || resolved.Load() == 0 || resolved.Load() > rep.Resolved {
				t.Errorf("%d resolves answered, %d calls answered by a resolve; want some, and no more than answered", rep.Resolved, resolved.Load())
			}
			if rep.Resent == 0 || rep.ResendFailures != 0 {
				t.Errorf("%d answered calls sent again, %d not replayed; want some, and 0", rep.Resent, rep.ResendFailures)
			}
		})
	}
}

// TestOutage: during a total outage, in which the server refuses every
// call without running it (and says so), the budget keeps the attempts
// per call close to one, and every call ends definitely.
func TestOutage(t *testing.T) {
	t.Parallel()
	sc := scenario(t, testdb.Targets()[0], 100)
	sc.OutageCalls = 200
	sc.OutagePause = time.Second
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		t.Fatal(err)
	}
	sc.Wire = connectpay.Wire{ClientOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(),
		keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}}
	sc.Faults = payments.FaultSettings{DropAfterCommit: 0.3, Seed: 3}
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
