package payments

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/harness/answers"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/policy"
)

// Scenario describes one run of the demo.
type Scenario struct {
	// DB holds the ledger table (already migrated) and the business table.
	DB *sql.DB
	// Dialect is the database family of DB.
	Dialect dialects.Dialect
	// Pgx, when not nil, serves the keyed calls in pipelined pgx
	// transactions on this pool (PgxTransactions), over either transport:
	// Transfer writes through the pgx.Tx of its claim. Dialect must then
	// be PostgreSQL's, and DB a database/sql handle on the same database
	// (stdlib.OpenDBFromPool(Pgx)) for the reads and the checks.
	// FaultSettings.FailTransaction is not injected there (it fails
	// database/sql transactions).
	Pgx *pgxpool.Pool
	// LedgerTable is the ledger's table (default ledger.DefaultTable).
	LedgerTable string
	// BusinessTable is the transfers table (default DefaultTable); it is
	// created if missing.
	BusinessTable string
	// Owner is the channel's retry owner: OwnerApplication (default) or
	// OwnerServiceConfig (gRPC only).
	Owner policy.RetryOwner
	// Transport is TransportGRPC (default), TransportHTTP (the same
	// transfers, faults and checks over the HTTP route, see HTTPHandler)
	// or TransportConnect (over connect-go: give Wire too).
	Transport string
	// Wire carries the transfers of a Transport that is neither gRPC nor
	// HTTP: package connectpay's Wire for TransportConnect. Over a Wire
	// the application owns the retries, and there is no Chain and no
	// Events.
	Wire Wire
	// HTTPClient configures the HTTP transport's client (TransportHTTP).
	HTTPClient HTTPClientSettings
	// Calls is the number of logical transfers in the faulty phase.
	Calls int
	// Concurrency is how many run at once (default 32).
	Concurrency int
	// Faults are the faults of the faulty phase.
	Faults FaultSettings
	// OutageCalls is the number of logical transfers during the outage
	// phase; 0 skips it.
	OutageCalls int
	// CallTimeout is each logical call's deadline (default 30s).
	CallTimeout time.Duration
	// ClientOptions are added to the kit's client options.
	ClientOptions []keyed.ClientOption
	// ServerOptions are added to the kit's server options.
	ServerOptions []keyed.ServerOption
	// LedgerOptions are added to the ledger's options (after its table).
	LedgerOptions []ledger.Option
	// NewKey returns each logical call's idempotency key (default
	// keyed.NewKey).
	NewKey func() string
	// Caller is the principal the client authenticates as (default
	// "demo"): the run issues it a bearer token (Tokens), and the server
	// takes the caller from the token, never from anything the client
	// names (grpcint.CallerFromPrincipal), so the ledger's entries have
	// the caller "principal:" and Caller.
	Caller string
	// RefPrefix prefixes each transfer's reference (default "call").
	RefPrefix string
	// LockWait bounds how long a claim waits for another transaction
	// (txmiddleware.WithLockWait). Default 2s, and 10s on SQLite, where it
	// is also the wait for the database's single write lock, which the
	// busy handler does not hand out fairly under many writers.
	LockWait time.Duration
	// OutagePause is a quiet time before the outage, letting the retry
	// budget's window move past the faulty phase.
	OutagePause time.Duration
	// Chain, when not nil, puts the fraud check service behind every
	// transfer (a keyed downstream called with the derived key), with
	// faults of its own on that hop, and checks its table too.
	Chain *Chain
	// Events, when not nil, makes every transfer emit TransferCompleted
	// through the outbox (the ledger table's, migrated), relays the outbox
	// to Events once the calls are done, and checks that every committed
	// transfer's event was published and no other.
	Events outbox.Publisher
	// Resends is how many calls answered in the faulty phase are sent
	// again, with their key and request, after the checks (default 100,
	// or every answered call when fewer; negative sends none). Each must
	// come back as a replay through the claim, with the committed answer
	// and no second effect: a lost answer alone may be resolved without
	// ever running the claim's read-back.
	Resends int
	// OnEvent, when not nil, is called with every logical call of both
	// phases as it ends, every 100ms with the faults injected meanwhile,
	// and once with the outage (from several goroutines at once): the
	// run's timeline, for a picture (opledger demo --report).
	OnEvent func(Event)
}

// EventKind says what an Event is.
type EventKind int

// The kinds of Event.
const (
	// EventCall is a logical call that ended.
	EventCall EventKind = iota + 1
	// EventFaults are the faults injected since the previous one.
	EventFaults
	// EventOutage is the outage phase.
	EventOutage
)

// Event is one thing a Scenario's run did, as Scenario.OnEvent receives
// it.
type Event struct {
	Kind EventKind
	// At is when the call started, the faults' period began or the
	// outage began; Took is how long the call took, the period or the
	// outage lasted.
	At   time.Time
	Took time.Duration
	// Err is an EventCall's error, nil for an answer; Definite says
	// whether the client knew its outcome (not CALL_OUTCOME_UNKNOWN).
	Err      error
	Definite bool
	// Resolved and Replayed say where an EventCall's answer came from
	// over gRPC: a resolve request, or a replay of the ledger's stored
	// outcome (both false: the handler's own, or over HTTP).
	Resolved, Replayed bool
	// Faults are an EventFaults' counts.
	Faults FaultCounts
}

// Chain is the fraud check service of a chained Scenario.
type Chain struct {
	// DB holds the fraud service's ledger table (already migrated) and
	// its checks table. On SQLite use another file than the payments
	// service's: a transfer holds its database's write lock while it calls
	// the fraud check.
	DB *sql.DB
	// Dialect is the database family of DB.
	Dialect dialects.Dialect
	// LedgerTable is the fraud service's ledger table (default
	// ledger.DefaultTable).
	LedgerTable string
	// Table is the checks table (default DefaultFraudTable); it is created
	// if missing.
	Table string
	// Faults are the faults on the hop from the payments service to the
	// fraud service: in the payments service's client and in the fraud
	// server.
	Faults FaultSettings
	// ClientOptions are added to the payments service's client of the
	// fraud service (DialFraud).
	ClientOptions []keyed.ClientOption
}

// Report is what a Scenario run observed.
type Report struct {
	Transport      string // TransportGRPC or TransportHTTP
	Owner          policy.RetryOwner
	Calls          int            // logical calls in the faulty phase
	Succeeded      int            // of those, how many returned a response
	Failed         int            // of those, how many returned an error
	Definite       int            // errors, both phases, whose CallInfo says what happened (not ReasonCallOutcomeUnknown)
	Ambiguous      int            // errors, both phases, whose outcome the client could not learn (must be 0)
	Reconciled     int            // failed calls whose outcome a later Resolve found committed
	FailedBy       map[string]int // errors by final status code and reason, both phases
	Attempts       int64          // attempts on the wire, faulty phase
	Executed       int64          // handler runs that committed (server), both phases (before the resends)
	Replayed       int64          // calls answered from the ledger (server), both phases (before the resends)
	Resolved       int64          // calls whose outcome a resolve returned (client), faulty phase
	BudgetRefusals int64          // retries the client's budget refused, both phases
	Duplicates     int            // logical calls with more than one transfer row
	Lost           int            // logical calls answered with success but no (or another) row
	WrongResponses int            // responses that differ from the committed row
	WrongOutcomes  int            // definite errors whose reason disagrees with the business table
	Resent         int            // answered calls sent again with their key after the checks
	ResendReplayed int64          // calls the server answered from the ledger during the resends
	ResendFailures int            // of the resends, not answered by a replay of the committed answer (must be 0)
	OutageCalls    int            // logical calls during the outage
	OutageAttempts int64          // attempts on the wire during the outage
	Faults         FaultCounts
	// The chain (Scenario.Chain): the fraud service's counters, faults and
	// table.
	Chained         bool
	FraudExecuted   int64       // checks whose handler ran and committed (fraud server)
	FraudReplayed   int64       // checks answered from the fraud service's ledger
	FraudFaults     FaultCounts // faults on the payments → fraud hop
	FraudDuplicates int         // logical transfers with more than one check row
	FraudMissing    int         // committed transfers without a check row
	FraudOrphans    int         // checks of transfers that never committed (allowed: at most one each)
	// The outbox (Scenario.Events).
	Evented         bool
	Events          int // distinct TransferCompleted messages published
	EventResends    int // publishes of a message already published (the broker drops them)
	EventDuplicates int // committed transfers with more than one distinct event
	EventsMissing   int // committed transfers without an event
	EventsForFailed int // events of transfers that never committed
	Elapsed         time.Duration
}

// Amplification is attempts per logical call during the outage.
func (r Report) Amplification() float64 {
	if r.OutageCalls == 0 {
		return 0
	}
	return float64(r.OutageAttempts) / float64(r.OutageCalls)
}

// OK reports whether no effect was duplicated or lost, every response
// matched the committed row, every error was definite and told the truth.
func (r Report) OK() bool {
	return r.Duplicates == 0 && r.Lost == 0 && r.WrongResponses == 0 && r.WrongOutcomes == 0 && r.Ambiguous == 0 &&
		r.FraudDuplicates == 0 && r.FraudMissing == 0 && r.EventDuplicates == 0 && r.EventsMissing == 0 && r.EventsForFailed == 0 &&
		r.ResendFailures == 0
}

// Print writes the report as a table. Each row's name says which calls
// it counts: the faulty phase's, the outage's, both phases' (before the
// resends), or the resends'; so the server's replays, for one, are two
// rows, before and during the resends.
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\t\n", k, v) }
	row("transport", r.Transport)
	row("retry owner", r.Owner)
	row("faulty phase: logical calls", r.Calls)
	row("faulty phase: succeeded", r.Succeeded)
	row("faulty phase: failed (of which resolve found committed)", fmt.Sprintf("%d (%d)", r.Failed, r.Reconciled))
	row("faulty phase: attempts", r.Attempts)
	row("faulty phase: resolved by the client", r.Resolved)
	both := "faulty phase: "
	if r.OutageCalls > 0 {
		row("outage: logical calls", r.OutageCalls)
		row("outage: attempts", r.OutageAttempts)
		row("outage: amplification", strconv.FormatFloat(r.Amplification(), 'f', 2, 64)+"x")
		both = "both phases: "
	}
	row(both+"returned a definite failure", r.Definite)
	row(both+"returned ambiguous (must be 0)", r.Ambiguous)
	row(both+"executed by the server", r.Executed)
	row(both+"replayed by the server", r.Replayed)
	row(both+"budget refusals", r.BudgetRefusals)
	row("duplicate effects (must be 0)", r.Duplicates)
	row("lost effects (must be 0)", r.Lost)
	row("wrong responses (must be 0)", r.WrongResponses)
	row("wrong failure reasons (must be 0)", r.WrongOutcomes)
	row("resends: answered calls sent again", r.Resent)
	row("resends: replayed by the server", r.ResendReplayed)
	row("resends: not answered by a replay (must be 0)", r.ResendFailures)
	row("faults: failed before send", r.Faults.FailedBeforeSend)
	row("faults: answers lost after commit", r.Faults.DroppedAfterRun)
	row("faults: delayed", r.Faults.Delayed)
	if r.Chained {
		row("chain: fraud checks executed", r.FraudExecuted)
		row("chain: fraud checks replayed", r.FraudReplayed)
		row("chain: failed transactions after the check", r.Faults.FailedTransactions)
		row("chain: answers lost on the fraud hop", r.FraudFaults.DroppedAfterRun)
		row("chain: duplicate checks (must be 0)", r.FraudDuplicates)
		row("chain: transfers without a check (must be 0)", r.FraudMissing)
		row("chain: checks of transfers that never committed", r.FraudOrphans)
	}
	if r.Evented {
		row("outbox: TransferCompleted events published", r.Events)
		row("outbox: re-sends dropped by id", r.EventResends)
		row("outbox: duplicate events (must be 0)", r.EventDuplicates)
		row("outbox: missing events (must be 0)", r.EventsMissing)
		row("outbox: events of uncommitted transfers (must be 0)", r.EventsForFailed)
	}
	row("elapsed", r.Elapsed.Round(time.Millisecond))
	tw.Flush()
}

type callResult struct {
	key   string
	req   *paymentspb.TransferRequest
	reply *paymentspb.TransferReply
	err   error

	resolved, replayed bool // where the answer came from (gRPC)
}

// Run starts the example server on a loopback TCP port, runs the
// scenario's transfers through the fault injector, then an outage, then
// checks the business table against every answer: one row per logical
// call that committed, none for one that did not, and every response
// equal to its row. Last, it sends answered calls again (see Resends),
// which the server must answer by replaying them.
func (sc Scenario) Run(ctx context.Context) (Report, error) {
	start := time.Now()
	if sc.DB == nil || sc.Dialect == nil {
		return Report{}, errors.New("payments: scenario needs a database and its dialect")
	}
	if sc.LedgerTable == "" {
		sc.LedgerTable = ledger.DefaultTable
	}
	if sc.BusinessTable == "" {
		sc.BusinessTable = DefaultTable
	}
	if sc.Owner == 0 {
		sc.Owner = policy.OwnerApplication
	}
	if sc.Concurrency <= 0 {
		sc.Concurrency = 32
	}
	if sc.LockWait <= 0 {
		sc.LockWait = 2 * time.Second
		if dialectkit.TraitsOf(sc.Dialect).SerialWriters {
			sc.LockWait = 10 * time.Second
		}
	}
	if sc.CallTimeout <= 0 {
		sc.CallTimeout = 30 * time.Second
	}
	if sc.Caller == "" {
		sc.Caller = "demo"
	}
	if sc.RefPrefix == "" {
		sc.RefPrefix = "call"
	}
	if sc.NewKey == nil {
		sc.NewKey = keyed.NewKey
	}
	if err := CreateTable(ctx, sc.DB, sc.Dialect, sc.BusinessTable); err != nil {
		return Report{}, fmt.Errorf("payments: create table: %w", err)
	}
	store, err := ledger.New(sc.Dialect, append([]ledger.Option{ledger.WithTable(sc.LedgerTable)}, sc.LedgerOptions...)...)
	if err != nil {
		return Report{}, err
	}
	txs := keyed.SQL(sc.DB, store)
	if sc.Pgx != nil {
		if !isPostgres(sc.Dialect) {
			return Report{}, errors.New("payments: a scenario on pgx needs the PostgreSQL dialect")
		}
		ps, err := pgxStore(sc.LedgerTable, sc.LedgerOptions)
		if err != nil {
			return Report{}, err
		}
		txs = pgxledger.Transactions(sc.Pgx, ps)
	}
	var (
		svcOpts     []ServiceOption
		chainFaults *Faults
		fraudServer *grpcint.Server
		fraudTable  string
		ob          *outbox.Outbox
	)
	if c := sc.Chain; c != nil {
		stop, fc, err := sc.startFraud(ctx)
		if err != nil {
			return Report{}, err
		}
		defer stop()
		chainFaults, fraudServer, fraudTable = fc.faults, fc.server, fc.table
		svcOpts = append(svcOpts, WithFraudCheck(fc.client))
	}
	if sc.Events != nil {
		ob, err = outbox.New(sc.Dialect, outbox.WithTable(outbox.TableFor(sc.LedgerTable)))
		if err != nil {
			return Report{}, err
		}
		svcOpts = append(svcOpts, WithEvents(ob))
	}
	svc, err := NewService(sc.DB, sc.Dialect, sc.BusinessTable, svcOpts...)
	if err != nil {
		return Report{}, err
	}
	cat, err := Catalog()
	if err != nil {
		return Report{}, err
	}
	faults := NewFaults(sc.Faults)
	tokens := NewTokens()
	token, err := tokens.Issue(sc.Caller)
	if err != nil {
		return Report{}, err
	}
	env := WireEnv{Transactions: txs, Catalog: cat, Service: svc, Faults: faults, Tokens: tokens, Token: token,
		Owner: sc.Owner, LockWait: sc.LockWait, Concurrency: sc.Concurrency}
	switch {
	case sc.Transport == "" || sc.Transport == TransportGRPC:
		sc.Transport = TransportGRPC
	case sc.Chain != nil || sc.Events != nil:
		return Report{}, fmt.Errorf("payments: the chain and the events run over gRPC only, not %s", sc.Transport)
	case sc.Transport == TransportHTTP:
		return sc.runWire(ctx, start, httpWire{settings: sc.HTTPClient}, env)
	case sc.Wire != nil:
		return sc.runWire(ctx, start, sc.Wire, env)
	default:
		return Report{}, fmt.Errorf("payments: transport %q needs its Wire", sc.Transport)
	}
	kitServer, err := grpcint.NewServerFor(txs, cat, grpcint.CallerFromPrincipal(Principal),
		append([]keyed.ServerOption{keyed.WithLockWait(sc.LockWait)}, sc.ServerOptions...)...)
	if err != nil {
		return Report{}, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(faults.UnaryServerInterceptor(), tokens.UnaryServerInterceptor(),
		kitServer.UnaryServerInterceptor(), faults.TxInterceptor(sc.DB, sc.Dialect)), grpc.ChainStreamInterceptor(kitServer.StreamServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	if err := kitServer.CheckRegistered(srv); err != nil {
		return Report{}, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, err
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	defer func() { srv.Stop(); <-served }()

	conn, client, err := Dial(lis.Addr().String(), sc.Owner, sc.ClientOptions,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(BearerToken(token)),
		grpc.WithChainUnaryInterceptor(faults.UnaryClientInterceptor(), answers.Interceptor))
	if err != nil {
		return Report{}, err
	}
	defer conn.Close()
	pc := paymentspb.NewPaymentsClient(conn)

	rep := Report{Transport: sc.Transport, Owner: sc.Owner, Calls: sc.Calls, OutageCalls: sc.OutageCalls}
	counts := func() clientCounts {
		st := client.Stats()
		return clientCounts{st.Attempts, st.Resolved, st.BudgetRefusals}
	}
	classify := func(err error) (string, bool) {
		ci, ok := grpcint.CallInfoOf(err)
		return status.Code(err).String() + " " + grpcint.ReasonOf(err) + " " + ci.Decision, ok && ci.Reason != keyed.CallOutcomeUnknown.Row().Reason
	}
	results, outage, err := sc.phases(ctx, &rep, faults, counts, classify, func(i int, prefix string) callResult {
		req := transferRequest(i, prefix)
		key := sc.NewKey()
		actx, tr := answers.With(grpcint.WithKey(ctx, key))
		cctx, cancel := context.WithTimeout(actx, sc.CallTimeout)
		defer cancel()
		reply, err := pc.Transfer(cctx, req)
		r := callResult{key: key, req: req, reply: reply, err: err}
		r.resolved, r.replayed = tr.Answer()
		return r
	})
	if err != nil {
		return rep, err
	}
	ss := kitServer.Stats()
	rep.Executed, rep.Replayed = ss.Executed, ss.Replayed

	// Check every logical call against the business table. Faults are off,
	// so a failed call can be resolved to its real outcome.
	faults.SetEnabled(false)
	if chainFaults != nil {
		chainFaults.SetEnabled(false)
	}
	resolve := func(r callResult) (*paymentspb.TransferReply, bool, error) {
		var stored paymentspb.TransferReply
		rctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
		defer cancel()
		err := grpcint.Resolve(rctx, conn, paymentspb.TransferMethod, r.key, &paymentspb.TransferRequest{}, &stored)
		switch {
		case err == nil:
			return &stored, true, nil
		case grpcint.ReasonOf(err) == keyed.NotFound.Row().Reason:
			return nil, false, nil
		}
		return nil, false, err
	}
	if err := rep.check(ctx, sc, results, outage, resolve, classify); err != nil {
		return rep, err
	}
	// The chain's and the outbox's effects, and the resends, against the
	// business table as it is now.
	rows, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return rep, err
	}
	all := append(append([]callResult(nil), results...), outage...)
	if sc.Chain != nil {
		fs := fraudServer.Stats()
		rep.Chained, rep.FraudExecuted, rep.FraudReplayed, rep.FraudFaults = true, fs.Executed, fs.Replayed, chainFaults.Counts()
		checks, err := countChecks(ctx, sc.Chain.DB, sc.Chain.Dialect, fraudTable)
		if err != nil {
			return rep, err
		}
		for _, r := range all {
			ref := r.req.GetReference()
			n := checks[ref]
			switch {
			case n > 1:
				rep.FraudDuplicates++
			case n == 0 && rows[ref].n == 1:
				rep.FraudMissing++
			case n == 1 && rows[ref].n == 0:
				rep.FraudOrphans++
			}
		}
	}
	if sc.Events != nil {
		rec := &eventRecorder{next: sc.Events, ids: map[string]string{}}
		relay, err := outbox.NewRelay(sc.DB, ob, rec)
		if err != nil {
			return rep, err
		}
		if err := relay.Drain(ctx); err != nil {
			return rep, fmt.Errorf("payments: relay the outbox: %w", err)
		}
		rep.Evented, rep.EventResends = true, rec.resends
		perRef := map[string]int{}
		for _, ref := range rec.ids {
			perRef[ref]++
		}
		rep.Events = len(rec.ids)
		for _, r := range all {
			ref := r.req.GetReference()
			committed := rows[ref].n == 1
			switch n := perRef[ref]; {
			case n > 1:
				rep.EventDuplicates++
			case n == 0 && committed:
				rep.EventsMissing++
			case n > 0 && !committed:
				rep.EventsForFailed++
			}
		}
	}
	again := func(ctx context.Context, r callResult) (*paymentspb.TransferReply, error) {
		return pc.Transfer(grpcint.WithKey(ctx, r.key), r.req)
	}
	counted := func() (int64, int64) { st := kitServer.Stats(); return st.Executed, st.Replayed }
	if err := sc.resend(ctx, results, rows, &rep, again, counted); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// check compares every logical call (the faulty phase's and the outage's)
// with the business table: resolve asks for a failed call's stored
// outcome (found false: nothing committed), classify names an error and
// says whether it was definite.
func (rep *Report) check(ctx context.Context, sc Scenario, results, outage []callResult,
	resolve func(callResult) (*paymentspb.TransferReply, bool, error), classify func(error) (string, bool)) error {
	rows, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return err
	}
	check := func(rs []callResult, faulty bool) error {
		for _, r := range rs {
			got := rows[r.req.GetReference()]
			if got.n > 1 {
				rep.Duplicates++
				continue
			}
			reply := r.reply
			if r.err != nil {
				if faulty {
					rep.Failed++
				}
				if rep.FailedBy == nil {
					rep.FailedBy = make(map[string]int)
				}
				label, definite := classify(r.err)
				rep.FailedBy[label]++
				if !definite {
					rep.Ambiguous++
				} else {
					rep.Definite++
					// A definite failure of a valid transfer has no
					// effect: nothing committed (Next is Retry), or a final
					// answer that undid its writes.
					if got.n != 0 {
						rep.WrongOutcomes++
					}
				}
				stored, found, rerr := resolve(r)
				switch {
				case rerr != nil:
					return fmt.Errorf("payments: resolve %s: %w", r.req.GetReference(), rerr)
				case !found:
					if got.n != 0 {
						rep.Lost++ // a row that the ledger does not know of
					}
					continue
				}
				if faulty {
					rep.Reconciled++
				}
				reply = stored
			} else if faulty {
				rep.Succeeded++
			}
			if got.n == 0 {
				rep.Lost++
				continue
			}
			want := &paymentspb.TransferReply{TransferId: got.id, FromAccount: r.req.GetFromAccount(), ToAccount: r.req.GetToAccount(),
				AmountCents: r.req.GetAmountCents(), Reference: r.req.GetReference()}
			if !proto.Equal(reply, want) {
				rep.WrongResponses++
			}
		}
		return nil
	}
	if err := check(results, true); err != nil {
		return err
	}
	return check(outage, false)
}

// clientCounts are the client's counters a report needs.
type clientCounts struct{ attempts, resolved, refusals int64 }

// phases runs the faulty phase and then the outage, sc.Concurrency
// logical calls at a time, call making the i-th call of a phase whose
// references start with prefix, and fills in the client's counts and the
// faults of the report.
func (sc Scenario) phases(ctx context.Context, rep *Report, faults *Faults, counts func() clientCounts,
	classify func(error) (string, bool), call func(i int, prefix string) callResult) (results, outage []callResult, err error) {
	if sc.OnEvent != nil {
		stop := sc.faultEvents(faults)
		defer stop()
	}
	run := func(n int, prefix string) []callResult {
		out := make([]callResult, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, sc.Concurrency)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				at := time.Now()
				out[i] = call(i, prefix)
				if sc.OnEvent != nil {
					ev := Event{Kind: EventCall, At: at, Took: time.Since(at), Err: out[i].err,
						Resolved: out[i].resolved, Replayed: out[i].replayed}
					if ev.Err != nil {
						_, ev.Definite = classify(ev.Err)
					}
					sc.OnEvent(ev)
				}
			}()
		}
		wg.Wait()
		return out
	}
	before := counts()
	results = run(sc.Calls, sc.RefPrefix)
	mid := counts()
	rep.Attempts = mid.attempts - before.attempts
	rep.Resolved = mid.resolved - before.resolved
	rep.BudgetRefusals = mid.refusals - before.refusals
	rep.Faults = faults.Counts()
	if sc.OutageCalls > 0 {
		if err := wait.Sleep(ctx, sc.OutagePause); err != nil {
			return results, nil, err
		}
		faults.SetOutage(true)
		at := time.Now()
		o0 := counts()
		outage = run(sc.OutageCalls, sc.RefPrefix+"-outage")
		o1 := counts()
		faults.SetOutage(false)
		if sc.OnEvent != nil {
			sc.OnEvent(Event{Kind: EventOutage, At: at, Took: time.Since(at)})
		}
		rep.OutageAttempts = o1.attempts - o0.attempts
		rep.BudgetRefusals += o1.refusals - o0.refusals
	}
	return results, outage, nil
}

// faultEvents sends sc.OnEvent the faults injected in every 100ms, until
// the function it returns is called (which sends the last ones).
func (sc Scenario) faultEvents(faults *Faults) (stop func()) {
	done, over := make(chan struct{}), make(chan struct{})
	// The baseline is read before the goroutine starts: a fault injected
	// before a late-scheduled goroutine first ran would otherwise never
	// be sent.
	last, at := faults.Counts(), time.Now()
	go func() {
		defer close(over)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var end bool
			select {
			case <-tick.C:
			case <-done:
				end = true
			}
			now, c := time.Now(), faults.Counts()
			if d := c.minus(last); d != (FaultCounts{}) {
				sc.OnEvent(Event{Kind: EventFaults, At: at, Took: now.Sub(at), Faults: d})
			}
			last, at = c, now
			if end {
				return
			}
		}
	}()
	return func() { close(done); <-over }
}

// transferRequest is the i-th transfer of a phase.
func transferRequest(i int, prefix string) *paymentspb.TransferRequest {
	return &paymentspb.TransferRequest{
		FromAccount: "acct-" + strconv.Itoa(i%17), ToAccount: "acct-" + strconv.Itoa(17+i%5),
		AmountCents: int64(100 + i), Reference: prefix + "-" + strconv.Itoa(i),
	}
}

// fraudChain is the running fraud check service of a chained scenario.
type fraudChain struct {
	faults *Faults
	server *grpcint.Server
	client paymentspb.FraudClient
	table  string
}

// startFraud serves the fraud check service on a loopback port and dials
// it the way the payments service does (DialFraud), with the chain's
// faults at both ends of the hop.
func (sc Scenario) startFraud(ctx context.Context) (func(), fraudChain, error) {
	c := sc.Chain
	if c.DB == nil || c.Dialect == nil {
		return nil, fraudChain{}, errors.New("payments: the chain needs the fraud service's database and dialect")
	}
	lt, table := c.LedgerTable, c.Table
	if lt == "" {
		lt = ledger.DefaultTable
	}
	if table == "" {
		table = DefaultFraudTable
	}
	if err := CreateFraudTable(ctx, c.DB, c.Dialect, table); err != nil {
		return nil, fraudChain{}, fmt.Errorf("payments: create the fraud table: %w", err)
	}
	store, err := ledger.New(c.Dialect, ledger.WithTable(lt))
	if err != nil {
		return nil, fraudChain{}, err
	}
	fsvc, err := NewFraudService(c.Dialect, table)
	if err != nil {
		return nil, fraudChain{}, err
	}
	cat, err := Catalog()
	if err != nil {
		return nil, fraudChain{}, err
	}
	// The fraud service authenticates its callers with tokens of its own;
	// the payments service presents the one issued to FraudCaller.
	tokens := NewTokens()
	token, err := tokens.Issue(FraudCaller)
	if err != nil {
		return nil, fraudChain{}, err
	}
	kit, err := grpcint.NewServer(c.DB, store, cat, grpcint.CallerFromPrincipal(Principal), keyed.WithLockWait(sc.LockWait))
	if err != nil {
		return nil, fraudChain{}, err
	}
	faults := NewFaults(c.Faults)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(faults.UnaryServerInterceptor(), tokens.UnaryServerInterceptor(), kit.UnaryServerInterceptor()))
	paymentspb.RegisterFraudServer(srv, fsvc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fraudChain{}, err
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	conn, _, err := DialFraud(lis.Addr().String(), c.ClientOptions,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(BearerToken(token)),
		grpc.WithChainUnaryInterceptor(faults.UnaryClientInterceptor(), answers.Interceptor))
	if err != nil {
		srv.Stop()
		<-served
		return nil, fraudChain{}, err
	}
	stop := func() { conn.Close(); srv.Stop(); <-served }
	return stop, fraudChain{faults: faults, server: kit, client: paymentspb.NewFraudClient(conn), table: table}, nil
}

func countChecks(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) (map[string]int, error) {
	rs, err := db.QueryContext(ctx, "SELECT reference, COUNT(*) FROM "+d.QuoteIdent(table)+" GROUP BY reference")
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := make(map[string]int)
	for rs.Next() {
		var ref string
		var n int
		if err := rs.Scan(&ref, &n); err != nil {
			return nil, err
		}
		out[ref] = n
	}
	return out, rs.Err()
}

// eventRecorder passes the relay's publishes on and records each
// acknowledged message id with its transfer's reference.
type eventRecorder struct {
	next    outbox.Publisher
	mu      sync.Mutex
	ids     map[string]string
	resends int
}

func (e *eventRecorder) Publish(ctx context.Context, env outbox.Envelope) error {
	if err := e.next.Publish(ctx, env); err != nil {
		return err
	}
	var ev paymentspb.TransferCompleted
	if err := proto.Unmarshal(env.Payload, &ev); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.ids[env.ID]; ok {
		e.resends++
	}
	e.ids[env.ID] = ev.GetReference()
	return nil
}

// resend sends answered calls of the faulty phase again, as a client that
// retries a call it already has the answer to, and counts in
// rep.ResendFailures each one not answered by a replay of its committed
// row: an error, another response, a new execution on the server or a
// second row.
//
// call sends one call again (with its key and request); served returns
// the server's counts of executed and replayed calls.
func (sc Scenario) resend(ctx context.Context, results []callResult, rows map[string]rowCount, rep *Report,
	call func(context.Context, callResult) (*paymentspb.TransferReply, error), served func() (executed, replayed int64)) error {
	n := sc.Resends
	if n == 0 {
		n = 100
	}
	var done []callResult
	for _, r := range results {
		if len(done) >= n {
			break
		}
		if r.err == nil && rows[r.req.GetReference()].n == 1 {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		return nil
	}
	executed0, replayed0 := served()
	failed := make([]bool, len(done))
	var wg sync.WaitGroup
	sem := make(chan struct{}, sc.Concurrency)
	for i, r := range done {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
			defer cancel()
			reply, err := call(cctx, r)
			got := rows[r.req.GetReference()]
			want := &paymentspb.TransferReply{TransferId: got.id, FromAccount: r.req.GetFromAccount(), ToAccount: r.req.GetToAccount(),
				AmountCents: r.req.GetAmountCents(), Reference: r.req.GetReference()}
			failed[i] = err != nil || !proto.Equal(reply, want)
		}()
	}
	wg.Wait()
	executed1, replayed1 := served()
	rep.Resent, rep.ResendReplayed = len(done), replayed1-replayed0
	for _, f := range failed {
		if f {
			rep.ResendFailures++
		}
	}
	// Every answer must have come from a replay of the claim, none from a
	// new execution; and no row may have been added.
	if ran := int(executed1 - executed0); ran > 0 {
		rep.ResendFailures += ran
	}
	if short := len(done) - int(replayed1-replayed0); short > 0 {
		rep.ResendFailures += short
	}
	now, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return err
	}
	for _, r := range done {
		if now[r.req.GetReference()].n != 1 {
			rep.ResendFailures++
		}
	}
	return nil
}

type rowCount struct {
	n  int
	id int64
}

func countRows(ctx context.Context, db *sql.DB, d dialects.Dialect, table string) (map[string]rowCount, error) {
	rs, err := db.QueryContext(ctx, "SELECT reference, COUNT(*), MIN(id) FROM "+d.QuoteIdent(table)+" GROUP BY reference")
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := make(map[string]rowCount)
	for rs.Next() {
		var ref string
		var c rowCount
		if err := rs.Scan(&ref, &c.n, &c.id); err != nil {
			return nil, err
		}
		out[ref] = c
	}
	return out, rs.Err()
}
