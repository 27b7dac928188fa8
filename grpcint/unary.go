package grpcint

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/policy"
)

// unaryCall is one logical unary call through the client interceptor: the
// gRPC transport of package retry's loop. It sends the attempts and reads
// them with the stats handler's evidence; the loop decides.
type unaryCall struct {
	c       *Client
	ctx     context.Context // carries the key
	key     string
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption
	stats   callStats // gRFC A96's counts, recorded when the call ends
	runs    int       // the runs sent (resolves not counted)
}

// Attempt sends the call (or a resolve request for it) once.
func (u *unaryCall) Attempt(resolve, rerun bool) retry.Attempt {
	ev := &evidence{timing: &u.stats.timing}
	actx := context.WithValue(u.ctx, evidenceKey{}, ev)
	var span trace.Span
	if resolve {
		actx = metadata.AppendToOutgoingContext(actx, ResolveHeader, "1")
		actx, span = u.c.obs.resolving(actx, u.method, u.key)
		u.c.c.Resolves.Add(1)
	} else {
		u.runs++
		actx = u.c.numbered(actx, u.runs)
	}
	var trl metadata.MD
	err := u.invoker(actx, u.method, u.req, u.reply, u.cc, append(u.opts, grpc.Trailer(&trl))...)
	u.stats.attempted(ev, rerun)
	if resolve {
		u.c.obs.resolved(actx, span, u.method, u.key, err, trl)
	}
	return retry.Attempt{
		Err: err, Code: status.Code(err), Reason: ReasonOf(err),
		Replayed: err == nil && isReplayed(trl), ReplayedError: err != nil && replayedError(err, trl),
		Evidence:                policy.Evidence{Sent: ev.sent.Load(), HeadersReceived: ev.header.Load(), MessageReceived: ev.message.Load()},
		Pushback:                trl.Get(policy.PushbackHeader),
		EarlierMayHaveCommitted: ev.earlierMayHaveCommitted(),
		Wire:                    int(ev.begins.Load()),
	}
}

// Event counts what the loop did.
func (u *unaryCall) Event(e retry.Event) {
	u.c.c.Event(e)
	if e == retry.BudgetRefused {
		u.c.obs.refused(u.ctx, u.method, u.key)
	}
}

// run runs the call with the loop and renders its result.
func (u *unaryCall) run(p policy.MethodPolicy) error {
	res := retry.Do(u.ctx, u.c.loop, p, u.key, u)
	u.stats.outcome = res.Outcome()
	if res.Err == nil {
		if res.Success == "replayed" {
			u.c.c.Replayed.Add(1)
		}
		return nil
	}
	if res.Ambiguous() {
		u.c.c.Ambiguous.Add(1)
	}
	if !res.Attach {
		return res.Err
	}
	return withCallInfo(res.Err, res.Info)
}

func isReplayed(md metadata.MD) bool {
	v := md.Get(ReplayedHeader)
	return len(v) > 0 && v[0] == "true"
}

// replayedError reports whether err is the server's replay of a stored
// error: the trailer says so, with err's code. A replayed trailer with
// another code is a replayed answer that was lost below the interceptor
// (without the code, from a server that does not send it, a "may have
// run" code is taken for that).
func replayedError(err error, trl metadata.MD) bool {
	if !isReplayed(trl) {
		return false
	}
	code := status.Code(err)
	if v := trl.Get(ReplayedCodeHeader); len(v) > 0 {
		return v[0] == strconv.FormatUint(uint64(code), 10)
	}
	return !retry.MayHaveRun(code)
}

// isResolve reports whether the outgoing call is a resolve request made
// by the application (Resolve), which the interceptor passes through.
func isResolve(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(ResolveHeader)) > 0
}
