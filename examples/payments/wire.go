package payments

import (
	"context"
	"time"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Wire is a transport the scenario runs over through Scenario.Wire: the
// HTTP one (TransportHTTP) and package connectpay's for connect-go
// (TransportConnect), which links connect-go so that this package and its
// gRPC-only users need not. The scenario's own gRPC transport is not a
// Wire.
type Wire interface {
	// Start serves env's service on a loopback port behind the kit's
	// server, with env's authentication and server-side faults in front
	// of it, and returns the client side: the kit's client, with env's
	// client-side faults in each attempt. The WireConn's Close stops both.
	Start(ctx context.Context, env WireEnv) (WireConn, error)
}

// WireEnv is what a Scenario hands its Wire.
type WireEnv struct {
	// Transactions are the keyed calls' transactions: database/sql's, or
	// pgx's (Scenario.Pgx).
	Transactions keyed.Transactions
	// Catalog is the method catalog (Catalog's).
	Catalog *policy.Catalog
	// Service is the Payments service to serve.
	Service *Service
	// Faults inject the scenario's faults at both ends.
	Faults *Faults
	// Tokens authenticate the calls; Token is the client's.
	Tokens *Tokens
	Token  string
	// Owner is the retry owner of the client's channel.
	Owner policy.RetryOwner
	// LockWait is the server's lock-wait bound (Scenario.LockWait).
	LockWait time.Duration
	// Concurrency is how many calls are in flight at once.
	Concurrency int
}

// WireConn is a started Wire.
type WireConn interface {
	// Transfer makes one logical transfer with key through the kit's
	// client.
	Transfer(ctx context.Context, key string, req *paymentspb.TransferRequest) (WireAnswer, error)
	// Resolve asks for the stored outcome of key without running the
	// call (faults are off by then): found is false when nothing was
	// committed.
	Resolve(ctx context.Context, key string) (reply *paymentspb.TransferReply, found bool, err error)
	// Classify names an error of Transfer, as Report.FailedBy counts it,
	// and reports whether it was definite: the client learned the call's
	// outcome.
	Classify(err error) (label string, definite bool)
	// Stats returns the counters of the client and the server so far.
	Stats() WireStats
	// Close stops the server and releases the client.
	Close()
}

// WireAnswer is a successful Transfer through a Wire.
type WireAnswer struct {
	Reply *paymentspb.TransferReply
	// Resolved and Replayed say where the answer came from, when the
	// transport can tell (see Event).
	Resolved, Replayed bool
}

// WireStats are a Wire's counters.
type WireStats struct {
	// Attempts (resolves included), Resolved and BudgetRefusals are the
	// kit client's.
	Attempts, Resolved, BudgetRefusals int64
	// Executed and Replayed are the kit server's.
	Executed, Replayed int64
}

// runWire is Run over w: the phases, the checks against the business
// table and the resends, through the WireConn it starts.
func (sc Scenario) runWire(ctx context.Context, start time.Time, w Wire, env WireEnv) (Report, error) {
	conn, err := w.Start(ctx, env)
	if err != nil {
		return Report{}, err
	}
	defer conn.Close()
	rep := Report{Transport: sc.Transport, Owner: sc.Owner, Calls: sc.Calls, OutageCalls: sc.OutageCalls}
	counts := func() clientCounts {
		st := conn.Stats()
		return clientCounts{st.Attempts, st.Resolved, st.BudgetRefusals}
	}
	results, outage, err := sc.phases(ctx, &rep, env.Faults, counts, conn.Classify, func(i int, prefix string) callResult {
		req := transferRequest(i, prefix)
		key := sc.NewKey()
		cctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
		defer cancel()
		a, err := conn.Transfer(cctx, key, req)
		return callResult{key: key, req: req, reply: a.Reply, err: err, resolved: a.Resolved, replayed: a.Replayed}
	})
	if err != nil {
		return rep, err
	}
	st := conn.Stats()
	rep.Executed, rep.Replayed = st.Executed, st.Replayed

	env.Faults.SetEnabled(false)
	resolve := func(r callResult) (*paymentspb.TransferReply, bool, error) {
		rctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
		defer cancel()
		return conn.Resolve(rctx, r.key)
	}
	if err := rep.check(ctx, sc, results, outage, resolve, conn.Classify); err != nil {
		return rep, err
	}
	rows, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return rep, err
	}
	again := func(ctx context.Context, r callResult) (*paymentspb.TransferReply, error) {
		a, err := conn.Transfer(ctx, r.key, r.req)
		return a.Reply, err
	}
	counted := func() (int64, int64) { st := conn.Stats(); return st.Executed, st.Replayed }
	if err := sc.resend(ctx, results, rows, &rep, again, counted); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}
