package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/connectpay"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/policy"
)

func init() {
	extraCommands["demo"] = command{"run the example payments service through injected faults and an outage; count duplicate and lost effects", runDemo}
}

// demoTransports name the demo's transports in its first line.
var demoTransports = map[string]string{payments.TransportGRPC: "gRPC", payments.TransportHTTP: "HTTP",
	payments.TransportConnect: "connect-go (the Connect protocol over HTTP/1.1 and the gRPC protocol over h2c, alternating)"}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", stderr)
	dsn := fs.String("dsn", "", "database for the ledger and the example's table (default $OPLEDGER_DSN, else a SQLite file in a temporary directory)")
	calls := fs.Int("calls", 1000, "logical transfers in the faulty phase")
	loss := fs.Float64("loss", 0.3, "probability that an answer is lost after the server committed (a third each: on the server, after the response headers, after the whole response)")
	outage := fs.Int("outage-calls", 200, "logical transfers during the total outage (0 skips it)")
	concurrency := fs.Int("concurrency", 32, "transfers in flight at once")
	ownerName := fs.String("owner", "application", "retry owner of the client's channel: application or service-config (grpc-go's own retries; gRPC only)")
	transport := fs.String("transport", payments.TransportGRPC, "grpc (the gRPC Transfer through grpcint), http (POST /transfers through httpint) or connect (the Transfer procedure through connectint: the Connect protocol over HTTP/1.1 and the gRPC protocol over h2c, alternating)")
	chain := fs.Bool("chain", false, "every transfer calls the ledger-backed fraud check service (faults on that hop too, 10% of the transfers' transactions failed after the check) and emits TransferCompleted through the outbox (gRPC only)")
	to := fs.String("to", "", "with --chain: publish the events to NATS JetStream (nats://host:port, or a comma-separated list of servers; stream OPLEDGER_DEMO) instead of an in-memory broker")
	report := fs.String("report", "", "write a picture of the run to this SVG file")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return fail(stderr, "demo", unexpectedArg(fs))
	case *calls < 1 || *calls > 1_000_000:
		return fail(stderr, "demo", errors.New("--calls must be 1 to 1000000"))
	case !(*loss >= 0 && *loss < 1):
		return fail(stderr, "demo", errors.New("--loss must be in [0, 1)"))
	case *outage < 0 || *outage > 1_000_000:
		return fail(stderr, "demo", errors.New("--outage-calls must be 0 to 1000000"))
	case *concurrency < 1 || *concurrency > 1024:
		return fail(stderr, "demo", errors.New("--concurrency must be 1 to 1024"))
	}
	var owner policy.RetryOwner
	err := owner.UnmarshalText([]byte(*ownerName))
	if err != nil {
		return fail(stderr, "demo", err)
	}
	if owner != policy.OwnerApplication && owner != policy.OwnerServiceConfig {
		return fail(stderr, "demo", fmt.Errorf("--owner %s: the demo retries through application or service-config", owner))
	}
	switch *transport {
	case payments.TransportGRPC:
	case payments.TransportHTTP, payments.TransportConnect:
		if owner != policy.OwnerApplication {
			return fail(stderr, "demo", fmt.Errorf("--owner %s: over %s the application owns the retries", owner, *transport))
		}
		if *chain {
			return fail(stderr, "demo", errors.New("--chain runs over gRPC only"))
		}
	default:
		return fail(stderr, "demo", fmt.Errorf("--transport %q: want grpc, http or connect", *transport))
	}
	var servers *natsServers
	if *to != "" {
		if !*chain {
			return fail(stderr, "demo", errors.New("--to needs --chain"))
		}
		ns, err := parseNATSServers(*to)
		if err != nil {
			return fail(stderr, "demo", err)
		}
		servers = &ns
	}
	dir, err := os.MkdirTemp("", "opledger-demo-")
	if err != nil {
		return fail(stderr, "demo", err)
	}
	defer os.RemoveAll(dir)
	d := *dsn
	if d == "" {
		d = os.Getenv("OPLEDGER_DSN")
	}
	if d == "" {
		d = "sqlite:" + filepath.Join(dir, "demo.db")
	}
	db, t, err := openDB(ctx, d)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	defer db.Close()
	m, err := migrations.New(db, t.dialect, migrations.WithTable(ledger.DefaultTable))
	if err != nil {
		return fail(stderr, "demo", err)
	}
	if _, err := m.Up(ctx); err != nil {
		return fail(stderr, "demo", err)
	}
	// The business table is the demo's own, fresh for every run.
	run := time.Now().UnixNano() % 1_000_000_000
	table := fmt.Sprintf("opledger_demo_transfers_%d", run)
	defer payments.DropTable(context.WithoutCancel(ctx), db, t.dialect, table)

	// A budget funded by successes with a short window: generous while
	// most calls succeed, down to its floor once everything fails.
	budget, err := policy.NewBudget(policy.BudgetSettings{TTL: 2 * time.Second, Percent: 1, MinRetriesPerSecond: 5})
	if err != nil {
		return fail(stderr, "demo", err)
	}
	sc := payments.Scenario{
		DB: db, Dialect: t.dialect, LedgerTable: ledger.DefaultTable, BusinessTable: table,
		Owner: owner, Transport: *transport, Calls: *calls, Concurrency: *concurrency, OutageCalls: *outage,
		Faults: payments.FaultSettings{FailBeforeSend: 0.05, Delay: 0.05,
			DropAfterCommit: *loss / 3, LoseAfterHeaders: *loss / 3, LoseAfterResponse: *loss / 3},
		ClientOptions: []keyed.ClientOption{
			keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(), keyed.WithMaxAttempts(8),
			keyed.WithBackoff(policy.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}),
		},
		HTTPClient: payments.HTTPClientSettings{Budget: budget, MaxAttempts: 8,
			Backoff: policy.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}},
		OutagePause: 2 * time.Second,
	}
	// The kit's own metrics, collected by an SDK meter provider with a
	// manual reader and printed after the report.
	kitMetrics := otelread.NewMetrics()
	sc.LedgerOptions = append(sc.LedgerOptions, ledger.WithMeterProvider(kitMetrics.Provider))
	sc.ServerOptions = append(sc.ServerOptions, keyed.WithMeterProvider(kitMetrics.Provider))
	sc.ClientOptions = append(sc.ClientOptions, keyed.WithMeterProvider(kitMetrics.Provider))
	if *transport == payments.TransportConnect {
		sc.Wire = connectpay.Wire{
			ServerOptions: []keyed.ServerOption{keyed.WithMeterProvider(kitMetrics.Provider)},
			ClientOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(),
				keyed.WithMaxAttempts(8), keyed.WithBackoff(policy.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond})},
		}
	}
	fmt.Fprintf(stdout, "opledger demo: %d transfers on %s, loopback %s, retries owned by %s; %.0f%% of answers lost after commit (on the server, after the headers, after the response), 5%% failed before send, 5%% delayed; then %d transfers in a total outage\n",
		*calls, t.display, demoTransports[*transport], owner, *loss*100, *outage)
	if *chain {
		stop, err := setUpChain(ctx, &sc, d, dir, t, run, *to, servers, *loss)
		if err != nil {
			return fail(stderr, "demo", err)
		}
		defer stop()
		fmt.Fprintf(stdout, "chain: every transfer calls the fraud check service (its own ledger; the same faults on that hop) with the key derived from the transfer; 10%% of the transfers' transactions fail after the check committed; every transfer emits TransferCompleted through the outbox, relayed to %s\n", eventsTarget(servers))
	}
	fmt.Fprintln(stdout)
	var rec *demoRecorder
	if *report != "" {
		rec = newDemoRecorder()
		sc.OnEvent = rec.add
	}
	rep, err := sc.Run(ctx)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	rep.Print(stdout)
	if rec != nil {
		where := t.display
		if *dsn == "" {
			where = "SQLite (a temporary file)"
		}
		if err := rec.write(*report, "opledger demo on "+where, fmt.Sprintf("%d transfers over %s, retries owned by %s, %.0f%% of answers lost after commit, then %d in a total outage",
			*calls, *transport, owner, *loss*100, *outage), rep); err != nil {
			return fail(stderr, "demo", err)
		}
		fmt.Fprintf(stderr, "opledger demo: wrote %s\n", *report)
	}
	points, err := kitMetrics.Collect(ctx)
	if err != nil {
		return fail(stderr, "demo", err)
	}
	printKitMetrics(stdout, points)
	if !rep.OK() {
		fmt.Fprintln(stdout, "\nFAIL: a duplicate or lost effect (a transfer, a fraud check or an event), a wrong response, a wrong failure reason or an ambiguous answer")
		return 1
	}
	fmt.Fprintln(stdout, "\nOK: every logical call took effect at most once, every answered call exactly once, and every error was definite and true")
	return 0
}
