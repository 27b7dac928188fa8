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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// CallerHeader is the metadata header the example trusts as the caller's
// identity, standing in for an authenticating gateway. A real service
// uses mTLS (grpcint.CallerFromPeerCertificate) or its own auth.
const CallerHeader = "x-example-caller"

// Scenario describes one run of the demo.
type Scenario struct {
	// DB holds the ledger table (already migrated) and the business table.
	DB *sql.DB
	// Dialect is the database family of DB.
	Dialect dialects.Dialect
	// LedgerTable is the ledger's table (default ledger.DefaultTable).
	LedgerTable string
	// BusinessTable is the transfers table (default DefaultTable); it is
	// created if missing.
	BusinessTable string
	// Owner is the channel's retry owner: OwnerApplication (default) or
	// OwnerServiceConfig.
	Owner policy.RetryOwner
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
	ClientOptions []grpcint.ClientOption
	// ServerOptions are added to the kit's server options.
	ServerOptions []grpcint.ServerOption
	// LedgerOptions are added to the ledger's options (after its table).
	LedgerOptions []ledger.Option
	// NewKey returns each logical call's idempotency key (default
	// grpcint.NewKey).
	NewKey func() string
	// Caller is the caller identity the client presents (default "demo").
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
}

// Report is what a Scenario run observed.
type Report struct {
	Owner          policy.RetryOwner
	Calls          int            // logical calls in the faulty phase
	Succeeded      int            // of those, how many returned a response
	Failed         int            // of those, how many returned an error
	Definite       int            // errors, both phases, whose CallInfo says what happened (not ReasonCallOutcomeUnknown)
	Ambiguous      int            // errors, both phases, whose outcome the client could not learn (must be 0)
	Reconciled     int            // failed calls whose outcome a later Resolve found committed
	FailedBy       map[string]int // errors by final status code and reason, both phases
	Attempts       int64          // attempts on the wire, faulty phase
	Executed       int64          // handler runs that committed (server)
	Replayed       int64          // calls answered from the ledger (server)
	Resolved       int64          // calls whose outcome a resolve returned (client)
	BudgetRefusals int64          // retries the client's budget refused
	Duplicates     int            // logical calls with more than one transfer row
	Lost           int            // logical calls answered with success but no (or another) row
	WrongResponses int            // responses that differ from the committed row
	WrongOutcomes  int            // definite errors whose reason disagrees with the business table
	OutageCalls    int            // logical calls during the outage
	OutageAttempts int64          // attempts on the wire during the outage
	Faults         FaultCounts
	Elapsed        time.Duration
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
	return r.Duplicates == 0 && r.Lost == 0 && r.WrongResponses == 0 && r.WrongOutcomes == 0 && r.Ambiguous == 0
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\t\n", k, v) }
	row("retry owner", r.Owner)
	row("logical calls", r.Calls)
	row("succeeded", r.Succeeded)
	row("failed (of which resolve found committed)", fmt.Sprintf("%d (%d)", r.Failed, r.Reconciled))
	row("returned a definite failure", r.Definite)
	row("returned ambiguous (must be 0)", r.Ambiguous)
	row("attempts", r.Attempts)
	row("executed", r.Executed)
	row("replayed", r.Replayed)
	row("resolved", r.Resolved)
	row("duplicate effects (must be 0)", r.Duplicates)
	row("lost effects (must be 0)", r.Lost)
	row("wrong responses (must be 0)", r.WrongResponses)
	row("wrong failure reasons (must be 0)", r.WrongOutcomes)
	row("budget refusals", r.BudgetRefusals)
	row("faults: failed before send", r.Faults.FailedBeforeSend)
	row("faults: answers lost after commit", r.Faults.DroppedAfterRun)
	row("faults: delayed", r.Faults.Delayed)
	if r.OutageCalls > 0 {
		row("outage: logical calls", r.OutageCalls)
		row("outage: attempts", r.OutageAttempts)
		row("outage: amplification", strconv.FormatFloat(r.Amplification(), 'f', 2, 64)+"x")
	}
	row("elapsed", r.Elapsed.Round(time.Millisecond))
	tw.Flush()
}

type callResult struct {
	key   string
	req   *paymentspb.TransferRequest
	reply *paymentspb.TransferReply
	err   error
}

// Run starts the example server on a loopback TCP port, runs the
// scenario's transfers through the fault injector, then an outage, then
// checks the business table against every answer: one row per logical
// call that committed, none for one that did not, and every response
// equal to its row.
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
		if dialects.TraitsOf(sc.Dialect).SerialWriters {
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
		sc.NewKey = grpcint.NewKey
	}
	if err := CreateTable(ctx, sc.DB, sc.Dialect, sc.BusinessTable); err != nil {
		return Report{}, fmt.Errorf("payments: create table: %w", err)
	}
	store, err := ledger.New(sc.Dialect, append([]ledger.Option{ledger.WithTable(sc.LedgerTable)}, sc.LedgerOptions...)...)
	if err != nil {
		return Report{}, err
	}
	svc, err := NewService(sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return Report{}, err
	}
	cat, err := Catalog()
	if err != nil {
		return Report{}, err
	}
	faults := NewFaults(sc.Faults)
	kitServer, err := grpcint.NewServer(sc.DB, store, cat, grpcint.CallerFromTrustedHeader(CallerHeader),
		append([]grpcint.ServerOption{grpcint.WithLockWait(sc.LockWait)}, sc.ServerOptions...)...)
	if err != nil {
		return Report{}, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(faults.UnaryServerInterceptor(), kitServer.UnaryServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, err
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	defer func() { srv.Stop(); <-served }()

	conn, client, err := Dial(lis.Addr().String(), sc.Owner, sc.ClientOptions,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(faults.UnaryClientInterceptor()))
	if err != nil {
		return Report{}, err
	}
	defer conn.Close()
	pc := paymentspb.NewPaymentsClient(conn)
	callerCtx := metadata.AppendToOutgoingContext(ctx, CallerHeader, sc.Caller)

	run := func(n int, prefix string) []callResult {
		out := make([]callResult, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, sc.Concurrency)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				req := &paymentspb.TransferRequest{
					FromAccount: "acct-" + strconv.Itoa(i%17), ToAccount: "acct-" + strconv.Itoa(17+i%5),
					AmountCents: int64(100 + i), Reference: prefix + "-" + strconv.Itoa(i),
				}
				key := sc.NewKey()
				cctx, cancel := context.WithTimeout(grpcint.WithKey(callerCtx, key), sc.CallTimeout)
				defer cancel()
				reply, err := pc.Transfer(cctx, req)
				out[i] = callResult{key: key, req: req, reply: reply, err: err}
			}()
		}
		wg.Wait()
		return out
	}

	rep := Report{Owner: sc.Owner, Calls: sc.Calls, OutageCalls: sc.OutageCalls}
	before := client.Stats()
	results := run(sc.Calls, sc.RefPrefix)
	mid := client.Stats()
	rep.Attempts = mid.Attempts - before.Attempts
	rep.Resolved = mid.Resolved - before.Resolved
	rep.BudgetRefusals = mid.BudgetRefusals - before.BudgetRefusals
	ss := kitServer.Stats()
	rep.Executed, rep.Replayed = ss.Executed, ss.Replayed
	rep.Faults = faults.Counts()

	var outage []callResult
	if sc.OutageCalls > 0 {
		if err := wait.Sleep(ctx, sc.OutagePause); err != nil {
			return rep, err
		}
		faults.SetOutage(true)
		o0 := client.Stats()
		outage = run(sc.OutageCalls, sc.RefPrefix+"-outage")
		o1 := client.Stats()
		faults.SetOutage(false)
		rep.OutageAttempts = o1.Attempts - o0.Attempts
		rep.BudgetRefusals += o1.BudgetRefusals - o0.BudgetRefusals
	}

	// Check every logical call against the business table. Faults are off,
	// so a failed call can be resolved to its real outcome.
	faults.SetEnabled(false)
	rows, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return rep, err
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
				ci, ok := grpcint.CallInfoOf(r.err)
				rep.FailedBy[status.Code(r.err).String()+" "+string(grpcint.ReasonOf(r.err))+" "+ci.Decision]++
				switch {
				case !ok || ci.Reason == grpcint.ReasonCallOutcomeUnknown:
					rep.Ambiguous++
				default:
					rep.Definite++
					// A definite failure of a valid transfer has no
					// effect: nothing committed (Next is Retry), or a final
					// answer that undid its writes.
					if got.n != 0 {
						rep.WrongOutcomes++
					}
				}
				var stored paymentspb.TransferReply
				rctx, cancel := context.WithTimeout(callerCtx, sc.CallTimeout)
				rerr := grpcint.Resolve(rctx, conn, paymentspb.TransferMethod, r.key, &paymentspb.TransferRequest{}, &stored)
				cancel()
				switch {
				case rerr == nil:
					if faulty {
						rep.Reconciled++
					}
					reply = &stored
				case grpcint.ReasonOf(rerr) == grpcint.ReasonNotFound:
					if got.n != 0 {
						rep.Lost++ // a row that the ledger does not know of
					}
					continue
				default:
					return fmt.Errorf("payments: resolve %s: %w", r.req.GetReference(), rerr)
				}
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
		return rep, err
	}
	if err := check(outage, false); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
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
