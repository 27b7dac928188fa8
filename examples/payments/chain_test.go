package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/internal/testkit/outboxtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// TestChain: 2,000 transfers, each calling the ledger-backed fraud check
// service with the key derived from the transfer's operation, with
// faults on both hops: answers lost after commit and attempts failed
// before sending, on the client → payments hop and on the payments →
// fraud hop, and 10% of the payments transactions failed after the
// fraud check committed (the connection killed before COMMIT on
// PostgreSQL, a serialization failure on SQLite). The client retries the
// transfer, the transfer calls the fraud check again with the same key,
// the fraud service replays, the transfer commits once: one transfer row
// and one check row per logical call, and one TransferCompleted event
// per committed transfer through the outbox.
func TestChain(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Name != "sqlite" && tg.Name != "postgres/pq" {
			continue // the chain adds nothing driver-specific
		}
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 44)
			sc := scenario(t, tg, 2000)
			sc.Concurrency = 16
			// The fraud service's own database: another SQLite file (a
			// transfer holds its database's write lock while it calls the
			// check), another pool and tables on PostgreSQL.
			fdb := tg.Open(t, 20)
			ftable := testdb.NewTable(t, fdb, tg.Dialect)
			sc.Faults = lossAtThreePlaces(21)
			sc.Faults.FailTransaction = 0.1
			budget := func() *policy.Budget {
				b, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			opts := func() []keyed.ClientOption {
				return []keyed.ClientOption{keyed.WithBudget(budget()), keyed.WithMaxAttempts(12),
					keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
			}
			sc.ClientOptions = opts()
			sc.Chain = &payments.Chain{DB: fdb, Dialect: tg.Dialect, LedgerTable: ftable, Table: ftable + "_checks",
				Faults: lossAtThreePlaces(22), ClientOptions: opts()}
			broker := &outboxtest.Broker{}
			sc.Events = broker
			t.Cleanup(func() { _ = payments.DropTable(context.Background(), fdb, tg.Dialect, ftable+"_checks") })
			rep := run(t, sc)
			checkDefinite(t, rep)
			if !rep.OK() {
				t.Errorf("chain: duplicate checks %d, transfers without a check %d; events: duplicates %d, missing %d, of uncommitted transfers %d",
					rep.FraudDuplicates, rep.FraudMissing, rep.EventDuplicates, rep.EventsMissing, rep.EventsForFailed)
			}
			if rep.Failed != 0 || rep.Succeeded != rep.Calls {
				t.Errorf("%d of %d calls failed (%v)", rep.Failed, rep.Calls, rep.FailedBy)
			}
			if rep.Faults.FailedTransactions < int64(rep.Calls)/20 || rep.FraudFaults.DroppedAfterRun < int64(rep.Calls)/10 {
				t.Errorf("%d failed transactions, %d answers lost on the fraud hop: the faults did not run", rep.Faults.FailedTransactions, rep.FraudFaults.DroppedAfterRun)
			}
			if rep.FraudReplayed == 0 {
				t.Error("the fraud service never replayed: retried transfers did not reuse their derived keys")
			}
			if rep.FraudExecuted != int64(rep.Calls) || rep.Events != rep.Calls {
				t.Errorf("%d checks executed, %d events, want one per call (%d)", rep.FraudExecuted, rep.Events, rep.Calls)
			}
			t.Logf("%d calls, %d attempts, %d transactions failed after the check, fraud checks: %d executed, %d replayed, %d answers lost on the fraud hop; %d events; %v",
				rep.Calls, rep.Attempts, rep.Faults.FailedTransactions, rep.FraudExecuted, rep.FraudReplayed, rep.FraudFaults.DroppedAfterRun, rep.Events, rep.Elapsed)
		})
	}
}
