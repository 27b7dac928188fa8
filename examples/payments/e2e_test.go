package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/policy"
)

// e2eTargets are SQLite and PostgreSQL through pgx (lib/pq is covered by
// the ledger's own tests; the scenario adds nothing driver-specific).
func e2eTargets() []testdb.Target {
	var out []testdb.Target
	for _, tg := range testdb.Targets() {
		if tg.Name != "postgres/pq" {
			out = append(out, tg)
		}
	}
	return out
}

func scenario(t *testing.T, tg testdb.Target) payments.Scenario {
	db := tg.Open(t, 16)
	table := testdb.NewTable(t, db, tg.Dialect)
	biz := table + "_transfers"
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
	return payments.Scenario{DB: db, Dialect: tg.Dialect, LedgerTable: table, BusinessTable: biz, Calls: 1000, Concurrency: 32}
}

func checkExactlyOnce(t *testing.T, rep payments.Report) {
	t.Helper()
	if rep.Duplicates != 0 || rep.Lost != 0 || rep.WrongResponses != 0 {
		t.Errorf("duplicates %d, lost %d, wrong responses %d; want 0", rep.Duplicates, rep.Lost, rep.WrongResponses)
	}
	// Every call that failed for good and that resolve found uncommitted
	// never ran; every other call ran exactly once.
	if want := int64(rep.Calls - (rep.Failed - rep.Reconciled)); rep.Executed != want {
		t.Errorf("executed %d, want one execution per committed logical call (%d)", rep.Executed, want)
	}
	if rep.Faults.DroppedAfterRun < int64(rep.Calls)/5 {
		t.Errorf("only %d responses dropped; the fault injector did not run", rep.Faults.DroppedAfterRun)
	}
}

// TestExactlyOnceApplicationOwner: 1,000 logical transfers over loopback
// TCP, 30% of responses dropped after the server committed, 5% of
// attempts failed before sending, 5% delayed. The application owns
// retries: every call must get its response, the business table must hold
// exactly one row per call, and each response must match its row.
func TestExactlyOnceApplicationOwner(t *testing.T) {
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			sc := scenario(t, tg)
			budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
			if err != nil {
				t.Fatal(err)
			}
			sc.Faults = payments.FaultSettings{FailBeforeSend: 0.05, DropAfterCommit: 0.3, Delay: 0.05, Seed: 7}
			sc.ClientOptions = []grpcint.ClientOption{grpcint.WithBudget(budget), grpcint.WithMaxAttempts(12),
				grpcint.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := sc.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkExactlyOnce(t, rep)
			if rep.Failed != 0 || rep.Succeeded != rep.Calls {
				t.Errorf("%d of %d calls failed (%v); with this budget every call should get its answer", rep.Failed, rep.Calls, rep.FailedBy)
			}
			if rep.Resolved == 0 {
				t.Error("no call was resolved; dropped responses should have been resolved")
			}
			t.Logf("attempts %d, resolved %d, replayed %d, elapsed %s", rep.Attempts, rep.Resolved, rep.Replayed, rep.Elapsed)
		})
	}
}

// TestExactlyOnceServiceConfigOwner: the same with grpc-go's own retries
// (the generated service config covers the keyed Transfer, which has a
// ledger). grpc-go resends the same metadata, so every retry carries the
// same key and replays. grpc-go gives up after maxAttempts; such calls are
// resolved afterwards and must show exactly one committed effect.
func TestExactlyOnceServiceConfigOwner(t *testing.T) {
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			sc := scenario(t, tg)
			sc.Owner = policy.OwnerServiceConfig
			sc.Faults = payments.FaultSettings{DropAfterCommit: 0.3, Delay: 0.05, Seed: 11}
			sc.ClientOptions = []grpcint.ClientOption{grpcint.WithRetrySettings(policy.RetrySettings{
				MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
				Throttling: &policy.RetryThrottling{MaxTokens: 1000, TokenRatio: 1},
			})}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := sc.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkExactlyOnce(t, rep)
			if rep.Replayed < rep.Faults.DroppedAfterRun/2 {
				t.Errorf("replayed %d for %d dropped responses: grpc-go's retries did not replay", rep.Replayed, rep.Faults.DroppedAfterRun)
			}
			// grpc-go gives up after maxAttempts (5): 0.3^5 of the calls, and
			// ABORTED after the lock-wait bound under write contention.
			if rep.Failed > rep.Calls/50 {
				t.Errorf("%d calls failed (%d found committed by resolve): %v", rep.Failed, rep.Reconciled, rep.FailedBy)
			}
			t.Logf("attempts %d, replayed %d, failed %d %v, elapsed %s", rep.Attempts, rep.Replayed, rep.Failed, rep.FailedBy, rep.Elapsed)
		})
	}
}

// TestOutageAmplification: during a total outage the budget keeps the
// attempts per logical call close to one.
func TestOutageAmplification(t *testing.T) {
	tg := testdb.Targets()[0]
	sc := scenario(t, tg)
	sc.Calls = 100
	sc.OutageCalls = 200
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		t.Fatal(err)
	}
	sc.Faults = payments.FaultSettings{DropAfterCommit: 0.3, Seed: 3}
	sc.OutagePause = time.Second
	sc.ClientOptions = []grpcint.ClientOption{grpcint.WithBudget(budget), grpcint.WithBudgetFundedBySuccess(),
		grpcint.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
	rep, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("duplicates %d, lost %d, wrong %d", rep.Duplicates, rep.Lost, rep.WrongResponses)
	}
	if a := rep.Amplification(); a > 1.25 {
		t.Errorf("amplification during the outage %.2f, want at most 1.25 (naive retries: up to 5)", a)
	}
	if rep.BudgetRefusals == 0 {
		t.Error("the budget refused nothing during the outage")
	}
}
