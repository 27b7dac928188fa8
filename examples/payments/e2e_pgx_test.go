package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// pgxScenario is scenario on PostgreSQL's pgx path: the keyed calls in
// pipelined pgx transactions on a pool of 16 (Scenario.Pgx), the reads
// and checks on database/sql over the same pool.
func pgxScenario(t *testing.T, calls int) payments.Scenario {
	pool := testdb.OpenPgx(t, testdb.PgxConfig(t, "", 16, nil))
	db := testdb.SQLDB(t, pool)
	d := postgres.New()
	table := testdb.NewTable(t, db, d)
	biz := table + "_transfers"
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, d, biz) })
	return payments.Scenario{DB: db, Pgx: pool, Dialect: d, LedgerTable: table, BusinessTable: biz, Calls: calls, Concurrency: 32}
}

// TestDefiniteOutcomesPgx is TestDefiniteOutcomes and
// TestDefiniteOutcomesClaimAtCommit on the pgx path (the server on
// pgxledger.Transactions, Transfer writing through its pgx.Tx): 2,000
// keyed transfers with 30% of the answers lost after the server committed
// at three places, 5% of the attempts failed before sending, 5% delayed;
// zero duplicates, losses, wrong answers and ambiguous returns, for both
// owners and both claim orders, and over HTTP; and one TransferCompleted
// event per committed transfer through the outbox (pgxledger.Enqueue).
func TestDefiniteOutcomesPgx(t *testing.T) {
	appOptions := func(t *testing.T) []keyed.ClientOption {
		budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
		if err != nil {
			t.Fatal(err)
		}
		return []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithMaxAttempts(12),
			keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
	}
	everyAnswer := func(t *testing.T, rep payments.Report) {
		t.Helper()
		if rep.Failed != 0 || rep.Succeeded != rep.Calls {
			t.Errorf("%d of %d calls failed (%v); with this budget every call should get its answer", rep.Failed, rep.Calls, rep.FailedBy)
		}
		if rep.Resolved == 0 {
			t.Error("no call was resolved; lost answers should have been resolved")
		}
	}
	t.Run("application", func(t *testing.T) {
		t.Parallel()
		sc := pgxScenario(t, 2000)
		sc.Faults = lossAtThreePlaces(17)
		sc.ClientOptions = appOptions(t)
		sc.Events = &outboxtest.Broker{} // TransferCompleted through pgxledger.Enqueue
		rep := run(t, sc)
		checkDefinite(t, rep)
		everyAnswer(t, rep)
		if !rep.OK() || rep.Events != rep.Calls {
			t.Errorf("%d events for %d calls; duplicates %d, missing %d, of uncommitted transfers %d",
				rep.Events, rep.Calls, rep.EventDuplicates, rep.EventsMissing, rep.EventsForFailed)
		}
	})
	t.Run("claim-at-commit", func(t *testing.T) {
		t.Parallel()
		sc := pgxScenario(t, 2000)
		sc.Faults = lossAtThreePlaces(19)
		sc.ServerOptions = []keyed.ServerOption{keyed.WithClaimAtCommit(paymentspb.TransferMethod)}
		sc.ClientOptions = appOptions(t)
		rep := run(t, sc)
		checkDefinite(t, rep)
		everyAnswer(t, rep)
	})
	t.Run("service-config", func(t *testing.T) {
		t.Parallel()
		sc := pgxScenario(t, 2000)
		sc.Owner = policy.OwnerServiceConfig
		sc.Faults = lossAtThreePlaces(23)
		sc.ClientOptions = []keyed.ClientOption{grpcint.WithRetrySettings(serviceconfig.RetrySettings{
			MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			Throttling: &serviceconfig.RetryThrottling{MaxTokens: 1000, TokenRatio: 1},
		}), keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
		rep := run(t, sc)
		checkDefinite(t, rep)
		if rep.Replayed == 0 || rep.Resolved == 0 {
			t.Errorf("%d replayed, %d resolved; want grpc-go's retries to replay and the kit to resolve what grpc-go gave up on", rep.Replayed, rep.Resolved)
		}
		if rep.Failed > int(rep.Faults.FailedBeforeSend)+rep.Calls/100 {
			t.Errorf("%d calls failed (%d failed before send): %v", rep.Failed, rep.Faults.FailedBeforeSend, rep.FailedBy)
		}
	})
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		sc := pgxScenario(t, 1000)
		sc.Transport = payments.TransportHTTP
		budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
		if err != nil {
			t.Fatal(err)
		}
		sc.Faults = lossAtThreePlaces(29)
		sc.HTTPClient = payments.HTTPClientSettings{Budget: budget, MaxAttempts: 12,
			Backoff: policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}}
		rep := run(t, sc)
		checkDefinite(t, rep)
		everyAnswer(t, rep)
	})
}
