package grpcint

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/policy"
)

// unaryCall is one logical unary call through the client interceptor.
type unaryCall struct {
	c       *Client
	p       policy.MethodPolicy
	ctx     context.Context // carries the key
	key     string
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption

	runs     int // attempts that ran the call (not resolves)
	attempts int // attempts on the wire, resolves and grpc-go's included
	resolves int
	step     int // backoff step
	lastSent bool
	runErr   error // the last failed run's error
	// unknown: a run may have committed and no resolve has settled it
	// since; unknownAt is when that became so.
	unknown   bool
	unknownAt time.Time
	// notFound: the last attempt was a resolve that found nothing
	// committed for the key.
	notFound bool
	// noRuns says why the call may not run again ("" while it may).
	noRuns string
	// lastChances counts the resolves made after the backoff no longer
	// fitted in the deadline (see lastChance).
	lastChances int
	stats       callStats // gRFC A96's counts, recorded when the call ends
}

// next is what to do after a failed attempt.
type next int

const (
	stop      next = iota // return the error
	runAgain              // run the call again (a retry)
	resolveIt             // send a resolve request
)

// definite reports whether the definite-outcome promise applies: a keyed
// method with a key and a durable ledger.
func (u *unaryCall) definite() bool {
	return u.p.Kind == policy.KindKeyed && u.p.DurableLedger && u.key != ""
}

func (u *unaryCall) run() error {
	switch u.c.owner {
	case policy.OwnerApplication:
		return u.retrying()
	case policy.OwnerServiceConfig:
		return u.once(true)
	default:
		return u.once(false)
	}
}

// attempt sends the call (or a resolve request for it) once.
func (u *unaryCall) attempt(resolve bool) (error, *evidence, metadata.MD) {
	ev := &evidence{timing: &u.stats.timing}
	actx := context.WithValue(u.ctx, evidenceKey{}, ev)
	var span trace.Span
	if resolve {
		actx = metadata.AppendToOutgoingContext(actx, ResolveHeader, "1")
		actx, span = u.c.obs.resolving(actx, u.method, u.key)
		u.resolves++
		u.c.c.resolves.Add(1)
	} else {
		u.runs++
	}
	var trl metadata.MD
	err := u.invoker(actx, u.method, u.req, u.reply, u.cc, append(u.opts, grpc.Trailer(&trl))...)
	u.attempts += max(1, int(ev.begins.Load()))
	u.stats.attempted(ev, !resolve && u.runs > 1)
	if resolve {
		u.c.obs.resolved(actx, span, u.method, u.key, err, trl)
	}
	return err, ev, trl
}

// succeeded counts a successful attempt.
func (u *unaryCall) succeeded(resolve bool, trl metadata.MD) error {
	if u.c.cfg.fundBySuccess {
		u.c.cfg.budget.Deposit()
	}
	switch {
	case resolve:
		u.c.c.resolved.Add(1)
		u.stats.result = "resolved"
	case isReplayed(trl):
		u.c.c.replayed.Add(1)
		u.stats.result = "replayed"
	default:
		u.stats.result = "ok"
	}
	return nil
}

// retrying is the interceptor of a channel whose retries the application
// owns.
func (u *unaryCall) retrying() error {
	c := u.c
	if !c.cfg.fundBySuccess {
		c.cfg.budget.Deposit()
	}
	resolving := false
	for {
		err, ev, trl := u.attempt(resolving)
		if err == nil {
			return u.succeeded(resolving, trl)
		}
		var (
			n   next
			why string
		)
		if resolving {
			n, why = u.readResolve(err, trl)
		} else {
			n, why = u.readRun(err, ev)
		}
		if n == runAgain && u.noRuns == "" {
			switch {
			case u.runs >= c.cfg.maxAttempts:
				u.noRuns = "max-attempts"
			case !c.cfg.budget.TryWithdraw():
				c.c.refusals.Add(1)
				c.obs.refused(u.ctx, u.method, u.key)
				u.noRuns = "budget-exhausted"
			}
		}
		if n == stop && u.definite() && u.unknown && u.saysNothingCommitted(err) {
			// A final "nothing was committed" is about this run alone; an
			// earlier run may have committed: resolve before answering.
			n = resolveIt
		}
		if n == runAgain && u.noRuns != "" {
			// No more runs; a keyed call whose outcome is unknown still
			// resolves (a read), so that it returns a definite answer.
			n, why = stop, u.noRuns
			if u.definite() && u.unknown {
				n = resolveIt
			}
		}
		if n == stop {
			return u.finish(err, why)
		}
		if stopWhy := u.pause(n == resolveIt, trl); stopWhy != "" {
			if !u.lastChance(stopWhy) {
				return u.finish(err, stopWhy)
			}
			n = resolveIt
		}
		resolving = n == resolveIt
		if !resolving {
			c.c.retries.Add(1)
		}
	}
}

// once is the interceptor of a channel whose retries belong to grpc-go's
// service config (settle), the mesh or nobody: one call, whatever retries
// happen underneath; then, with settle, resolves for a keyed call whose
// outcome is unknown.
func (u *unaryCall) once(settle bool) error {
	err, ev, trl := u.attempt(false)
	if err == nil {
		return u.succeeded(false, trl)
	}
	if u.p.Kind != policy.KindKeyed || u.key == "" {
		return err
	}
	n, why := u.readRun(err, ev)
	if u.definite() && ev.earlierMayHaveCommitted() && u.saysNothingCommitted(err) {
		// The last attempt's "nothing was committed" is about that attempt
		// alone: one of grpc-go's earlier attempts underneath may have
		// committed. The call resolves before it answers.
		u.markUnknown()
		n = resolveIt
	}
	u.noRuns = "owner-" + u.c.owner.String()
	if n == stop || !settle || !u.definite() || !u.unknown {
		return u.finish(err, why)
	}
	last := err
	for {
		if stopWhy := u.pause(true, trl); stopWhy != "" {
			if !u.lastChance(stopWhy) {
				return u.finish(last, stopWhy)
			}
		}
		last, _, trl = u.attempt(true)
		if last == nil {
			return u.succeeded(true, trl)
		}
		if n, why = u.readResolve(last, trl); n != resolveIt {
			if n == runAgain {
				why = u.noRuns // nothing committed; grpc-go had given up
			}
			return u.finish(last, why)
		}
	}
}

// lastChanceFloor is the least time left of a call's deadline for which
// lastChance still resolves.
const lastChanceFloor = 20 * time.Millisecond

// lastChance is what a call does when it must stop because its next wait
// does not fit in what is left of its deadline: a keyed call whose
// outcome is unknown resolves anyway, in the time left. A resolve is one
// read on the server, and a definite answer is worth more than an
// ambiguous error returned with time to spare. The first such resolve
// goes at once; each later one waits half of what is left, so that a
// call whose resolves keep failing (the database restarting, say) tries a
// few times and returns only once less than lastChanceFloor is left. It
// reports whether to resolve now.
func (u *unaryCall) lastChance(stopWhy string) bool {
	if stopWhy != "deadline" || !u.definite() || !u.unknown || u.ctx.Err() != nil {
		return false
	}
	dl, ok := u.ctx.Deadline()
	if !ok {
		return false
	}
	left := time.Until(dl)
	if left < lastChanceFloor {
		return false
	}
	u.lastChances++
	if u.lastChances > 1 {
		if err := wait.Sleep(u.ctx, left/2); err != nil {
			return false
		}
	}
	return true
}

// mayHaveRun reports whether an attempt that was sent and failed with c
// may have taken effect on the server.
func mayHaveRun(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal,
		codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

func (u *unaryCall) markUnknown() {
	if !u.unknown {
		u.unknown, u.unknownAt = true, time.Now()
	}
}

// readRun reads the failure of a run of the call: the kit's error map for
// a status with one of the server's reasons, policy.Eligible otherwise.
func (u *unaryCall) readRun(err error, ev *evidence) (next, string) {
	u.runErr, u.notFound = err, false
	sent := ev.reached()
	u.lastSent = sent
	code := status.Code(err)
	if m, ok := serverMapping(err); ok {
		switch m.Next {
		case policy.Retry:
			if m.Committed == "unknown" && sent {
				u.markUnknown() // another attempt in flight may commit
			}
			return runAgain, string(m.Reason)
		case policy.ResolveFirst:
			u.markUnknown()
			return resolveIt, string(m.Reason)
		}
		return stop, string(m.Reason)
	}
	if cerr := u.ctx.Err(); cerr != nil {
		if sent && mayHaveRun(code) {
			u.markUnknown()
		}
		return stop, ctxDecision(cerr)
	}
	d := policy.Eligible(u.p, policy.Evidence{
		Sent: ev.sent.Load(), HeadersReceived: ev.header.Load(), MessageReceived: ev.message.Load(), HasKey: u.key != "",
	}, code)
	if sent && mayHaveRun(code) && d.Reason != policy.ReasonPrefixDelivered {
		u.markUnknown()
	}
	switch d.Action {
	case policy.Retry:
		return runAgain, string(d.Reason)
	case policy.ResolveFirst:
		u.markUnknown()
		return resolveIt, string(d.Reason)
	}
	return stop, string(d.Reason)
}

// saysNothingCommitted reports whether err, the failure of the last run,
// says that this run committed nothing: a server reason that says so, or
// (without one) a request that never left the client. Such an answer is
// about that run alone: when an earlier attempt of the call may have
// committed, the call must resolve before it reports anything definite.
func (u *unaryCall) saysNothingCommitted(err error) bool {
	if m, ok := serverMapping(err); ok {
		return nothingCommitted(m)
	}
	return !u.lastSent
}

// readResolve reads the failure of a resolve request.
func (u *unaryCall) readResolve(err error, trl metadata.MD) (next, string) {
	u.notFound = false
	m, kit := serverMapping(err)
	switch {
	case kit && m.Reason == ReasonNotFound:
		// Nothing committed: running the call again with the key is safe.
		u.unknown, u.notFound = false, true
		return runAgain, "resolved-not-found"
	case replayedError(err, trl):
		// The stored outcome is a recorded final error: the answer.
		u.unknown, u.lastSent = false, true
		u.c.c.resolved.Add(1)
		return stop, "resolved"
	case kit && (m.Reason == ReasonInProgress || m.Next == policy.Retry):
		// Still in flight, or the resolve itself failed on the server.
		return resolveIt, string(m.Reason)
	case kit:
		u.unknown, u.lastSent = false, true // the server's answer for the key (e.g. INCOMPLETE)
		return stop, string(m.Reason)
	case u.ctx.Err() != nil:
		return stop, ctxDecision(u.ctx.Err())
	case mayHaveRun(status.Code(err)):
		return resolveIt, "resolve-lost"
	}
	u.unknown, u.lastSent = false, true // the server answered the resolve with a status of its own
	return stop, "resolve-answered"
}

// serverMapping returns the error map's row for the server's reason in
// err, if it carries one.
func serverMapping(err error) (Mapping, bool) {
	m, ok := mapping(ReasonOf(err))
	return m, ok && m.Side == "server"
}

func ctxDecision(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return "deadline"
}

// pause waits before the next attempt: the backoff, or the server's
// pushback, never past the call's deadline (for a resolve without a
// deadline, never past the resolve window). It returns why the call must
// stop instead, or "".
func (u *unaryCall) pause(resolve bool, trl metadata.MD) string {
	return u.c.pause(u.ctx, &u.step, trl.Get(policy.PushbackHeader), func(d time.Duration) bool {
		_, has := u.ctx.Deadline()
		return !resolve || has || time.Since(u.unknownAt)+d < u.c.cfg.resolveWindow
	})
}

// pause is the one retry wait of the client, for unary and streaming
// calls: it takes the backoff step (or the server's pushback), checks it
// against the deadline (and allowed, when not nil) and sleeps. It returns
// "deadline", "canceled", "pushback-stop" or "resolve-window" when the call
// must stop instead, or "".
func (c *Client) pause(ctx context.Context, step *int, pushback []string, allowed func(time.Duration) bool) string {
	d, n, err := c.cfg.backoff.Next(ctx, max(*step, 1), pushback)
	switch {
	case errors.Is(err, policy.ErrPushbackStop):
		return "pushback-stop"
	case err != nil:
		return ctxDecision(err)
	case allowed != nil && !allowed(d):
		return "resolve-window"
	}
	*step = n
	if err := wait.Sleep(ctx, d); err != nil {
		return ctxDecision(err)
	}
	return ""
}

// finish returns err, the last attempt's error, with the client's reading
// of the call: what is known of its outcome and what the caller can do.
// A call of a method that is not keyed and was not retried returns err as
// it is.
func (u *unaryCall) finish(err error, decision string) error {
	ci := CallInfo{Key: u.key, Attempts: u.attempts, Resolves: u.resolves, Decision: decision}
	keyed := u.p.Kind == policy.KindKeyed && u.key != ""
	m, kit := serverMapping(err)
	switch {
	case u.unknown:
		ci.Reason, ci.Next = ReasonCallOutcomeUnknown, policy.DoNotRetry
		switch {
		case keyed:
			ci.Next = policy.ResolveFirst
			u.c.c.ambiguous.Add(1)
		case u.p.Kind == policy.KindIdempotent || u.p.Kind == policy.KindNoSideEffects:
			ci.Next = policy.Retry
		}
	case u.notFound && u.runErr != nil:
		// A resolve proved that nothing was committed; the run's failure is
		// the error, and calling again with the key is safe.
		err = u.runErr
		ci.Reason, ci.Next = ReasonNotFound, policy.Retry
	case kit:
		ci.Reason, ci.Next = m.Reason, m.Next
	case !u.lastSent:
		ci.Reason, ci.Next = ReasonNotSent, policy.Retry
	default:
		ci.Reason, ci.Next = ReasonHandlerError, policy.DoNotRetry
	}
	if !keyed && u.attempts <= 1 {
		return err
	}
	return withCallInfo(err, ci)
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
	return !mayHaveRun(code)
}

// isResolve reports whether the outgoing call is a resolve request made
// by the application (Resolve), which the interceptor passes through.
func isResolve(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(ResolveHeader)) > 0
}
