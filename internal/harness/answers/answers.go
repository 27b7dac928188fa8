// Package answers tells, for one logical call through the kit's gRPC
// client interceptor, where its answer came from: the handler, a replay
// of a stored outcome, or a resolve request. Its interceptor goes below
// the kit's (chained after it: one call per attempt, resolve requests
// included). It is internal: opledger chaos and the example scenarios
// use it to draw their calls by outcome.
package answers

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
)

// Trace is what the interceptor learned of one logical call's attempts.
type Trace struct {
	mu       sync.Mutex
	resolved bool
	replayed bool
}

type traceKey struct{}

// With returns ctx carrying a new Trace for the call made with it.
func With(ctx context.Context) (context.Context, *Trace) {
	t := new(Trace)
	return context.WithValue(ctx, traceKey{}, t), t
}

// Answer reports whether the call's successful attempt was a resolve
// request (resolved) or a replay of a stored outcome (replayed); both
// false for an answer the handler produced, or no successful attempt.
func (t *Trace) Answer() (resolved, replayed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.resolved, t.replayed
}

// Interceptor notes, for the Trace of its context (With), whether a
// successful attempt was a resolve request or a replay (the server's
// grpcint.ReplayedHeader trailer). Without a Trace it only invokes.
func Interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	t, ok := ctx.Value(traceKey{}).(*Trace)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	resolve := len(md.Get(grpcint.ResolveHeader)) > 0
	var trl metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trl))...)
	if err == nil {
		t.mu.Lock()
		t.resolved, t.replayed = resolve, !resolve && len(trl.Get(grpcint.ReplayedHeader)) > 0
		t.mu.Unlock()
	}
	return err
}
