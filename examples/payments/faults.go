package payments

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FaultSettings are the probabilities of each injected fault, in [0, 1].
type FaultSettings struct {
	// FailBeforeSend fails an attempt in the client before it is sent
	// (UNAVAILABLE; the stats handler sees no payload go out).
	FailBeforeSend float64
	// DropAfterCommit lets the server run and commit the call, then replaces
	// its response with UNAVAILABLE, as a connection lost on the way back.
	DropAfterCommit float64
	// Delay holds a request in the server for DelayFor before running it.
	Delay float64
	// DelayFor is how long a delayed request waits; default 20ms.
	DelayFor time.Duration
	// Seed makes the fault sequence reproducible; 0 picks a random seed.
	Seed uint64
}

// FaultCounts are how many faults were injected.
type FaultCounts struct {
	// FailedBeforeSend counts attempts failed in the client.
	FailedBeforeSend int64
	// DroppedAfterRun counts responses replaced by UNAVAILABLE after the
	// server ran the call.
	DroppedAfterRun int64
	// Delayed counts requests held before running.
	Delayed int64
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

	failed, dropped, delayed, refused, returned atomic.Int64
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
	return FaultCounts{FailedBeforeSend: f.failed.Load(), DroppedAfterRun: f.dropped.Load(), Delayed: f.delayed.Load(),
		RefusedInOutage: f.refused.Load(), ResponsesReturned: f.returned.Load()}
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
// server and is counted).
func (f *Faults) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !f.outage.Load() && f.roll(f.set.FailBeforeSend) {
			f.failed.Add(1)
			return status.Error(codes.Unavailable, "injected: failed before send")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// UnaryServerInterceptor refuses calls during an outage, delays some and
// drops the responses of others after they ran.
func (f *Faults) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if f.enabled.Load() && f.outage.Load() {
			f.refused.Add(1)
			return nil, status.Error(codes.Unavailable, "injected: outage")
		}
		if f.roll(f.set.Delay) {
			f.delayed.Add(1)
			t := time.NewTimer(f.set.DelayFor)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		resp, err := handler(ctx, req)
		if f.roll(f.set.DropAfterCommit) {
			f.dropped.Add(1)
			return nil, status.Error(codes.Unavailable, "injected: response lost after the server ran the call")
		}
		f.returned.Add(1)
		return resp, err
	}
}
