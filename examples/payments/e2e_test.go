package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/sqlitedialect"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// e2eTargets are SQLite, PostgreSQL through pgx and MariaDB (lib/pq is
// covered by the ledger's own tests; the scenario adds nothing
// driver-specific).
func e2eTargets() []testdb.Target {
	var out []testdb.Target
	for _, tg := range testdb.Targets() {
		if tg.Name != "postgres/pq" {
			out = append(out, tg)
		}
	}
	return out
}

func scenario(t *testing.T, tg testdb.Target, calls int) payments.Scenario {
	db := tg.Open(t, 16)
	table := testdb.NewTable(t, db, tg.Dialect)
	biz := table + "_transfers"
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
	return payments.Scenario{DB: db, Dialect: tg.Dialect, LedgerTable: table, BusinessTable: biz, Calls: calls, Concurrency: 32}
}

// lossAtThreePlaces loses 30% of the answers after the server committed,
// a third at each place: on the server before the response is written,
// in the client between the response headers and the message, and in the
// client after the whole response.
func lossAtThreePlaces(seed uint64) payments.FaultSettings {
	return payments.FaultSettings{FailBeforeSend: 0.05, Delay: 0.05, Seed: seed,
		DropAfterCommit: 0.1, LoseAfterHeaders: 0.1, LoseAfterResponse: 0.1}
}

// checkDefinite asserts the promise to a caller of a keyed mutation:
// every call that returned OK has exactly one effect and its response
// matches it; every call that returned an error has a definite reason
// whose effect count matches (0: nothing committed, or a final answer that
// undid its writes); no call returned an outcome it could not know,
// since every deadline allowed a resolve.
func checkDefinite(t *testing.T, rep payments.Report) {
	t.Helper()
	if rep.Duplicates != 0 || rep.Lost != 0 || rep.WrongResponses != 0 || rep.WrongOutcomes != 0 || rep.Ambiguous != 0 {
		t.Errorf("duplicates %d, lost %d, wrong responses %d, wrong failure reasons %d, ambiguous %d; want all 0 (errors %v)",
			rep.Duplicates, rep.Lost, rep.WrongResponses, rep.WrongOutcomes, rep.Ambiguous, rep.FailedBy)
	}
	// Every call that failed and that resolve found uncommitted never
	// ran; every other call ran exactly once.
	if want := int64(rep.Calls - (rep.Failed - rep.Reconciled)); rep.Executed != want {
		t.Errorf("executed %d, want one execution per committed logical call (%d)", rep.Executed, want)
	}
	if rep.Reconciled != 0 {
		t.Errorf("%d calls returned an error although they had committed", rep.Reconciled)
	}
	// Answered calls sent again replay through the claim's read-back.
	if rep.Resent == 0 || rep.ResendFailures != 0 {
		t.Errorf("%d answered calls sent again, %d not replayed; want some, and 0", rep.Resent, rep.ResendFailures)
	}
	f := rep.Faults
	for name, n := range map[string]int64{
		"on the server":      f.DroppedAfterRun - f.LostAfterHeaders - f.LostAfterResponse,
		"after the headers":  f.LostAfterHeaders,
		"after the response": f.LostAfterResponse,
	} {
		if n < int64(rep.Calls)/20 {
			t.Errorf("only %d answers lost %s; the fault injector did not run there", n, name)
		}
	}
}

// TestDefiniteOutcomes: 2,000 keyed transfers over loopback TCP on every
// database, 30% of the answers lost after the server committed (at three
// places), 5% of the attempts failed before sending, 5% delayed, for both
// owners that retry. The application owner gets every answer; the
// service-config owner gets every answer grpc-go's attempts did not give
// up on, and for the others a definite error (the kit resolves them once
// grpc-go gave up, so none is ambiguous).
func TestDefiniteOutcomes(t *testing.T) {
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			t.Run("application", func(t *testing.T) {
				t.Parallel()
				sc := scenario(t, tg, 2000)
				budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
				if err != nil {
					t.Fatal(err)
				}
				sc.Faults = lossAtThreePlaces(7)
				sc.ClientOptions = []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithMaxAttempts(12),
					keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
				rep := run(t, sc)
				checkDefinite(t, rep)
				if rep.Failed != 0 || rep.Succeeded != rep.Calls {
					t.Errorf("%d of %d calls failed (%v); with this budget every call should get its answer", rep.Failed, rep.Calls, rep.FailedBy)
				}
				if rep.Resolved == 0 {
					t.Error("no call was resolved; lost answers should have been resolved")
				}
			})
			t.Run("service-config", func(t *testing.T) {
				t.Parallel()
				sc := scenario(t, tg, 2000)
				sc.Owner = policy.OwnerServiceConfig
				sc.Faults = lossAtThreePlaces(11)
				sc.ClientOptions = []keyed.ClientOption{grpcint.WithRetrySettings(serviceconfig.RetrySettings{
					MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
					Throttling: &serviceconfig.RetryThrottling{MaxTokens: 1000, TokenRatio: 1},
				}), keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
				rep := run(t, sc)
				checkDefinite(t, rep)
				if rep.Replayed == 0 {
					t.Error("nothing replayed: grpc-go's retries did not replay")
				}
				if rep.Resolved == 0 {
					t.Error("no call was resolved; the kit should resolve what grpc-go gave up on")
				}
				// What fails is what the service config does not retry:
				// an attempt failed in the client before it reached grpc-go
				// (definitely not executed), and, rarely, the lock-wait bound
				// under contention.
				if rep.Failed > int(rep.Faults.FailedBeforeSend)+rep.Calls/100 {
					t.Errorf("%d calls failed (%d failed before send): %v", rep.Failed, rep.Faults.FailedBeforeSend, rep.FailedBy)
				}
			})
		})
	}
}

// TestDefiniteOutcomesClaimAtCommit: the application-owner run of
// TestDefiniteOutcomes, faults and all, with Transfer claimed at commit
// (keyed.WithClaimAtCommit): every call gets its answer, one effect per
// committed call, replays identical.
func TestDefiniteOutcomesClaimAtCommit(t *testing.T) {
	for _, tg := range e2eTargets() {
		t.Run(tg.Name, func(t *testing.T) {
			sc := scenario(t, tg, 2000)
			budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 10, MinRetriesPerSecond: 100})
			if err != nil {
				t.Fatal(err)
			}
			sc.Faults = lossAtThreePlaces(13)
			sc.ServerOptions = []keyed.ServerOption{keyed.WithClaimAtCommit(paymentspb.TransferMethod)}
			sc.ClientOptions = []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithMaxAttempts(12),
				keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
			rep := run(t, sc)
			checkDefinite(t, rep)
			if rep.Failed != 0 || rep.Succeeded != rep.Calls {
				t.Errorf("%d of %d calls failed (%v); with this budget every call should get its answer", rep.Failed, rep.Calls, rep.FailedBy)
			}
		})
	}
}

func run(t *testing.T, sc payments.Scenario) payments.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := sc.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attempts %d, executed %d, replayed %d, resolved %d, failed %d %v, elapsed %s",
		rep.Attempts, rep.Executed, rep.Replayed, rep.Resolved, rep.Failed, rep.FailedBy, rep.Elapsed)
	return rep
}

// TestOutageAmplification: during a total outage, in which the server
// refuses every call without running it (and says so), the budget keeps
// the attempts per logical call close to one, and every call returns a
// definite error.
func TestOutageAmplification(t *testing.T) {
	tg := testdb.Targets()[0]
	sc := scenario(t, tg, 100)
	sc.OutageCalls = 200
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		t.Fatal(err)
	}
	sc.Faults = payments.FaultSettings{DropAfterCommit: 0.3, Seed: 3}
	sc.OutagePause = time.Second
	sc.ClientOptions = []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(),
		keyed.WithBackoff(policy.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond})}
	rep, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("duplicates %d, lost %d, wrong %d, wrong reasons %d, ambiguous %d", rep.Duplicates, rep.Lost, rep.WrongResponses, rep.WrongOutcomes, rep.Ambiguous)
	}
	if a := rep.Amplification(); a > 1.25 {
		t.Errorf("amplification during the outage %.2f, want at most 1.25 (naive retries: up to 5)", a)
	}
	if rep.BudgetRefusals == 0 {
		t.Error("the budget refused nothing during the outage")
	}
	if rep.Definite < rep.OutageCalls {
		t.Errorf("%d definite errors, want at least the %d outage calls", rep.Definite, rep.OutageCalls)
	}
}

// brokenReplay is SQLite with a read-back after a conflict that fails, as
// the InnoDB dialect's LOCK IN SHARE MODE fails on TiDB: every claim of a
// committed key errors instead of replaying.
type brokenReplay struct{ sqlitedialect.Dialect }

func (d brokenReplay) Queries(table string) dialects.Queries {
	q := d.Dialect.Queries(table)
	q.Select = "SELECT no_such_column FROM " + d.QuoteIdent(table) + " WHERE id = ?"
	return q
}

// TestResendCatchesBrokenReplay: a scenario without faults never reaches
// the replay path before its resends; with a read-back that fails, the
// resends find it and the report is not OK.
func TestResendCatchesBrokenReplay(t *testing.T) {
	tg := testdb.Targets()[0]
	sc := scenario(t, tg, 40)
	sc.Dialect = brokenReplay{sqlitedialect.New()}
	sc.Resends = 10
	sc.ClientOptions = []keyed.ClientOption{keyed.WithMaxAttempts(2),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond})}
	rep := run(t, sc)
	if rep.Succeeded != rep.Calls || rep.Duplicates != 0 || rep.Lost != 0 {
		t.Fatalf("the faulty phase without faults: %d of %d succeeded, %d duplicates, %d lost", rep.Succeeded, rep.Calls, rep.Duplicates, rep.Lost)
	}
	if rep.Resent != 10 || rep.ResendFailures < 10 || rep.OK() {
		t.Fatalf("resent %d, %d not replayed, OK %v; want 10, at least 10, false", rep.Resent, rep.ResendFailures, rep.OK())
	}

	// The same on the real dialect replays every resend.
	sc = scenario(t, tg, 40)
	sc.Resends = 10
	rep = run(t, sc)
	if rep.Resent != 10 || rep.ResendFailures != 0 || !rep.OK() {
		t.Fatalf("resent %d, %d not replayed, OK %v; want 10, 0, true", rep.Resent, rep.ResendFailures, rep.OK())
	}
}
