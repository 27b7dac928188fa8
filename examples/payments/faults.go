package payments

import (
	"context"
	"database/sql"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/txmiddleware"
)

// FaultSettings are the probabilities of each injected fault, in [0, 1].
// The three losses each let the server run and commit the call and then
// lose its answer, at a different place.
type FaultSettings struct {
	// FailBeforeSend fails an attempt in the client before it is sent
	// (UNAVAILABLE; the stats handler sees no payload go out).
	FailBeforeSend float64
	// DropAfterCommit loses the answer on the server, before the response
	// is written: the call ran and committed, and the client gets
	// UNAVAILABLE, as from a proxy that lost the response.
	DropAfterCommit float64
	// LoseAfterHeaders loses the answer in the client after the response
	// headers arrived and before the message: the attempt is cancelled once
	// its headers are in, and fails with UNAVAILABLE, as a connection cut
	// between the two.
	LoseAfterHeaders float64
	// LoseAfterResponse loses the answer in the client after the whole
	// response arrived: it is thrown away and the attempt fails with
	// UNAVAILABLE, as a client that lost it before the application saw it.
	LoseAfterResponse float64
	// Delay holds a request in the server for DelayFor before running it.
	Delay float64
	// DelayFor is how long a delayed request waits; default 20ms.
	DelayFor time.Duration
	// FailTransaction fails the service's transaction after its handler
	// ran (and, in the chain, after the fraud check committed), before
	// COMMIT: on a database with dialectkit.Sessions its connection is
	// killed; elsewhere (SQLite) the handler returns a serialization
	// failure. Either way the kit runs the transaction again. It needs
	// TxInterceptor chained after the kit's server interceptor.
	FailTransaction float64
	// Seed makes the fault sequence reproducible; 0 picks a random seed.
	Seed uint64
}

// FaultCounts are how many faults were injected.
type FaultCounts struct {
	// FailedBeforeSend counts attempts failed in the client.
	FailedBeforeSend int64
	// DroppedAfterRun counts answers lost after the server ran the call,
	// at any of the three places.
	DroppedAfterRun int64
	// LostAfterHeaders and LostAfterResponse count the client-side ones
	// among them.
	LostAfterHeaders, LostAfterResponse int64
	// Delayed counts requests held before running.
	Delayed int64
	// FailedTransactions counts transactions failed by TxInterceptor.
	FailedTransactions int64
	// RefusedInOutage counts calls refused during the outage.
	RefusedInOutage int64
	// ResponsesReturned counts responses (or errors) passed on unchanged.
	ResponsesReturned int64
}

// Faults injects failures into both ends of a channel: a client
// interceptor (chained inside the kit's retrying interceptor, so each
// attempt passes through it) and a server interceptor (chained before
// the kit's server interceptor, so it sees the committed outcome). It is
// safe for concurrent use.
type Faults struct {
	set     FaultSettings
	enabled atomic.Bool
	outage  atomic.Bool
	mu      sync.Mutex
	rng     *rand.Rand

	failed, dropped, afterHeaders, afterResponse, delayed, refused, returned, txFailed atomic.Int64
}

// NewFaults returns an enabled injector.
func NewFaults(s FaultSettings) *Faults {
	if s.DelayFor <= 0 {
		s.DelayFor = 20 * time.Millisecond
	}
	seed := s.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	f := &Faults{set: s, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	f.enabled.Store(true)
	return f
}

// SetEnabled turns fault injection on or off (the outage too).
func (f *Faults) SetEnabled(on bool) { f.enabled.Store(on) }

// SetOutage starts or ends a total outage: while it lasts the server
// refuses every call with UNAVAILABLE without running it.
func (f *Faults) SetOutage(on bool) { f.outage.Store(on) }

// Counts returns how many faults were injected so far.
func (f *Faults) Counts() FaultCounts {
	return FaultCounts{FailedBeforeSend: f.failed.Load(), DroppedAfterRun: f.dropped.Load() + f.afterHeaders.Load() + f.afterResponse.Load(),
		LostAfterHeaders: f.afterHeaders.Load(), LostAfterResponse: f.afterResponse.Load(), Delayed: f.delayed.Load(),
		RefusedInOutage: f.refused.Load(), ResponsesReturned: f.returned.Load(), FailedTransactions: f.txFailed.Load()}
}

// minus returns c less o, count by count.
func (c FaultCounts) minus(o FaultCounts) FaultCounts {
	return FaultCounts{FailedBeforeSend: c.FailedBeforeSend - o.FailedBeforeSend, DroppedAfterRun: c.DroppedAfterRun - o.DroppedAfterRun,
		LostAfterHeaders: c.LostAfterHeaders - o.LostAfterHeaders, LostAfterResponse: c.LostAfterResponse - o.LostAfterResponse,
		Delayed: c.Delayed - o.Delayed, FailedTransactions: c.FailedTransactions - o.FailedTransactions,
		RefusedInOutage: c.RefusedInOutage - o.RefusedInOutage, ResponsesReturned: c.ResponsesReturned - o.ResponsesReturned}
}

func (f *Faults) roll(p float64) bool {
	if p <= 0 || !f.enabled.Load() {
		return false
	}
	f.mu.Lock()
	x := f.rng.Float64()
	f.mu.Unlock()
	return x < p
}

// UnaryClientInterceptor fails attempts before they are sent (not
// during an outage, so that every attempt of the outage reaches the
// server and is counted) and loses answers after the response headers or
// after the whole response. Chain it inside the kit's interceptor, so that
// each attempt passes through it.
func (f *Faults) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if f.outage.Load() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if f.roll(f.set.FailBeforeSend) {
			f.failed.Add(1)
			return status.Error(codes.Unavailable, "injected: failed before send")
		}
		if f.roll(f.set.LoseAfterHeaders) {
			return f.loseAfterHeaders(ctx, method, req, cc, opts)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && f.roll(f.set.LoseAfterResponse) {
			f.afterResponse.Add(1)
			return status.Error(codes.Unavailable, "injected: response lost after it arrived")
		}
		return err
	}
}

// loseAfterHeaders makes the unary call as a stream, waits for the
// response headers and cancels the attempt before reading the message.
// The caller's grpc.Header and grpc.Trailer options are left out: the
// cancelled stream would fill them after this returns, and a lost answer
// has no trailer. When the server answers without headers (an error is
// trailers only), that answer is returned as it is.
func (f *Faults) loseAfterHeaders(ctx context.Context, method string, req any, cc *grpc.ClientConn, opts []grpc.CallOption) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sopts []grpc.CallOption
	for _, o := range opts {
		switch o.(type) {
		case grpc.TrailerCallOption, grpc.HeaderCallOption:
		default:
			sopts = append(sopts, o)
		}
	}
	cs, err := cc.NewStream(sctx, &grpc.StreamDesc{StreamName: method}, method, sopts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	md, err := cs.Header()
	if err != nil {
		return err
	}
	if md == nil {
		// No headers: the server answered with an error alone (trailers
		// only), which RecvMsg returns.
		if err := cs.RecvMsg(&emptypb.Empty{}); err != io.EOF {
			return err
		}
		return status.Error(codes.Internal, "payments: stream ended without headers or status")
	}
	cancel()
	f.afterHeaders.Add(1)
	return status.Error(codes.Unavailable, "injected: connection lost after the response headers")
}

// UnaryServerInterceptor refuses calls during an outage without running
// them (telling the client so with grpcint.NotExecuted, as a load
// shedder does), delays some and drops the answers of others after they
// ran.
func (f *Faults) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if f.RefuseInOutage() {
			return nil, grpcint.NotExecuted(codes.Unavailable, "injected: outage; the call was not run")
		}
		if err := f.Delay(ctx); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		resp, err := handler(ctx, req)
		if f.LoseAnswer() {
			return nil, status.Error(codes.Unavailable, "injected: response lost after the server ran the call")
		}
		return resp, err
	}
}

// RefuseInOutage, Delay and LoseAnswer are the server side of the faults
// for a transport of your own, in this order around each call (as
// UnaryServerInterceptor does for gRPC and HTTPMiddleware for HTTP, and
// package connectpay's interceptor for connect-go). RefuseInOutage
// reports (and counts) a call to refuse without running it: the outage
// is on.
func (f *Faults) RefuseInOutage() bool {
	if f.enabled.Load() && f.outage.Load() {
		f.refused.Add(1)
		return true
	}
	return false
}

// Delay holds some calls for FaultSettings.DelayFor before they run; it
// returns ctx's error when ctx ends first.
func (f *Faults) Delay(ctx context.Context) error {
	if !f.roll(f.set.Delay) {
		return nil
	}
	f.delayed.Add(1)
	t := time.NewTimer(f.set.DelayFor)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LoseAnswer reports, once a call ran (and committed), whether its
// answer is lost on the server (FaultSettings.DropAfterCommit): the
// transport then answers as a proxy that lost the response would. Each
// call counts as a loss or as an answer returned.
func (f *Faults) LoseAnswer() bool {
	if f.roll(f.set.DropAfterCommit) {
		f.dropped.Add(1)
		return true
	}
	f.returned.Add(1)
	return false
}

// TxInterceptor fails the transaction of a keyed call after its handler
// ran, as FaultSettings.FailTransaction says: chain it after the kit's
// server interceptor, so that it runs inside the call's transaction. db
// is the pool of that transaction, d its dialect.
func (f *Faults) TxInterceptor(db *sql.DB, d dialects.Dialect) grpc.UnaryServerInterceptor {
	sessions, canKill := d.(dialectkit.Sessions)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		tx, ok := txmiddleware.TxFromContext(ctx)
		if err != nil || !ok || !f.roll(f.set.FailTransaction) {
			return resp, err
		}
		f.txFailed.Add(1)
		if !canKill {
			return nil, serializationFailure{}
		}
		id, err := sessions.SessionID(ctx, tx)
		if err != nil {
			return nil, err
		}
		if err := sessions.Kill(ctx, db, id); err != nil {
			return nil, err
		}
		// The connection is gone once the database says so: a statement on
		// it fails.
		for range 200 {
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				return nil, err
			}
			if err := wait.Sleep(ctx, 5*time.Millisecond); err != nil {
				return nil, err
			}
		}
		return nil, serializationFailure{}
	}
}

// serializationFailure is SQLite's SQLITE_BUSY_SNAPSHOT as a result code
// (what the sqlite dialect classifies as a serialization failure).
type serializationFailure struct{}

func (serializationFailure) Error() string { return "injected: serialization failure before COMMIT" }
func (serializationFailure) Code() int     { return 517 }

// SQLState is PostgreSQL's serialization_failure.
func (serializationFailure) SQLState() string { return "40001" }
