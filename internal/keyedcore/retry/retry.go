// Package retry is the client side of a keyed call, written once for every
// transport whose client the kit owns: per logical call it decides after
// each failed attempt, from the one classification of package keyed, from
// policy's eligibility (method kind × evidence × status) and from the
// budget, whether to run the call again, to resolve it first or to stop; it
// waits the backoff or the server's pushback, never past the deadline; and
// it ends with a definite reading of the call (an [Info]) on every error of
// a keyed call.
//
// A transport supplies what only it can see ([Transport]): one attempt on
// its wire and the evidence of it (whether the request went out, whether
// headers or a message came back, the server's reason, its pushback, the
// replay marker), and renders the result (grpcint: a status with an
// ErrorInfo; connect: a connect.Error with the same detail). grpcint's
// client interceptor is one such transport; connect-go's, which has no
// retries of its own, is another.
//
// The rule of an answer that says "nothing was committed" (a server reason
// whose committed is no or n/a, or a request that never left the client): it
// speaks for its own attempt only. When an earlier attempt of the call may
// have committed, the call resolves before it reports anything definite.
package retry

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Config is the retry settings of one client (one channel, one target).
type Config struct {
	// Owner is the channel's retry owner. OwnerApplication: the loop
	// retries and resolves; OwnerServiceConfig: the transport retries
	// underneath one attempt, and the loop resolves a keyed call whose
	// outcome is unknown; OwnerMesh, OwnerNone: one attempt, no resolve.
	Owner policy.RetryOwner
	// Budget bounds how often calls run again; resolves do not spend it.
	Budget *policy.Budget
	// FundBySuccess deposits into the budget per successful call instead
	// of per call.
	FundBySuccess bool
	// Backoff is the wait between attempts, resolves included; the
	// server's pushback wins.
	Backoff policy.Backoff
	// MaxAttempts bounds the runs of one call (resolves not counted).
	MaxAttempts int
	// ResolveWindow bounds how long a call without a deadline keeps
	// resolving.
	ResolveWindow time.Duration
}

// Attempt is what a transport saw of one attempt: a run of the call or a
// resolve request for it.
type Attempt struct {
	// Err is the attempt's error; nil for a success.
	Err error
	// Code is the attempt's status code (connect's codes have the same
	// numbers).
	Code codes.Code
	// Reason is the kit server's ErrorInfo reason in Err, "" when it
	// carries none.
	Reason string
	// Replayed reports that a success was a stored answer (the replay
	// marker).
	Replayed bool
	// ReplayedError reports that Err is the server's replay of a stored
	// final error: the replay marker, with Err's code.
	ReplayedError bool
	// Evidence is what the transport saw on the wire: whether the request
	// went out (Sent), whether response headers or a message came back.
	Evidence policy.Evidence
	// Pushback is the server's grpc-retry-pushback-ms values.
	Pushback []string
	// EarlierMayHaveCommitted reports that the transport's own retries
	// underneath this attempt (grpc-go's, with OwnerServiceConfig) made an
	// earlier attempt that may have committed.
	EarlierMayHaveCommitted bool
	// Wire counts the attempts on the wire it took (at least 1 is
	// counted).
	Wire int
}

// reached reports that the request may have reached the server.
func (a Attempt) reached() bool {
	return a.Evidence.Sent || a.Evidence.HeadersReceived || a.Evidence.MessageReceived
}

// Event is something the loop did that a transport counts.
type Event int

const (
	// Retried: the loop is about to run the call again.
	Retried Event = iota + 1
	// Resolved: a resolve returned the call's outcome (a stored answer or
	// a stored final error).
	Resolved
	// BudgetRefused: the budget refused a run.
	BudgetRefused
)

// Transport is one logical call on a transport.
type Transport interface {
	// Attempt sends the call once, or a resolve request for it when
	// resolve is set; rerun reports a run after the first.
	Attempt(resolve, rerun bool) Attempt
	// Event reports what the loop did.
	Event(Event)
}

// Info is the loop's reading of a call that ended with an error: what is
// known of its outcome and what the caller may do.
type Info struct {
	// Outcome is the reading: the server's outcome in the last attempt's
	// error, or one of the client's (keyed.NotSent, keyed.ServerAnswered,
	// keyed.CallOutcomeUnknown), or keyed.NotFound when a resolve proved
	// that nothing was committed.
	Outcome keyed.Outcome
	// Next is what the caller may do (for a method that is not keyed and
	// whose outcome is unknown: retry when it is idempotent, else stop).
	Next keyed.Next
	// Key is the call's idempotency key ("" for a method that is not
	// keyed).
	Key string
	// Attempts counts the attempts made, resolves included.
	Attempts int
	// Resolves counts the resolve requests among them.
	Resolves int
	// Decision says why the loop stopped: a policy.DecisionReason, a
	// server reason, or "budget-exhausted", "max-attempts", "deadline",
	// "pushback-stop", "resolve-window", "resolved", "canceled",
	// "owner-…".
	Decision string
}

// Result is how a call ended.
type Result struct {
	// Err is the error to return (nil for a success): the last attempt's,
	// or, when a resolve proved that nothing was committed, the last run's.
	Err error
	// Info is the reading of an error; Attach says whether the transport
	// adds it to Err (every error of a keyed call, and of a call retried
	// or resolved).
	Info   Info
	Attach bool
	// Success is how a call succeeded: "ok", "replayed" or "resolved".
	Success string
}

// Outcome is how the call ended, in package keyed's classification (the
// opledger.outcome of a client's metrics): keyed.Executed for the
// handler's own answer, keyed.Replayed for a stored one (a replay, or a
// resolve's), and for an error its reading, Info.Outcome.
func (r Result) Outcome() keyed.Outcome {
	switch {
	case r.Err != nil:
		return r.Info.Outcome
	case r.Success == "ok":
		return keyed.Executed
	}
	return keyed.Replayed
}

// ReadingOf is the reading of a failed attempt after which nothing more
// was tried: the server's outcome in its reason, keyed.NotSent when it
// never reached the server, keyed.CallOutcomeUnknown when it may have run
// there, keyed.ServerAnswered otherwise. A call of a method that is not
// keyed, made once, ends with it.
func ReadingOf(a Attempt) keyed.Outcome {
	if r, ok := ServerRow(a.Reason); ok {
		return r.Outcome
	}
	switch {
	case !a.reached():
		return keyed.NotSent
	case MayHaveRun(a.Code):
		return keyed.CallOutcomeUnknown
	}
	return keyed.ServerAnswered
}

// Ambiguous reports whether a keyed call ended without its outcome known.
func (r Result) Ambiguous() bool {
	return r.Err != nil && r.Info.Outcome == keyed.CallOutcomeUnknown && r.Info.Next == keyed.Resolve
}

// Do runs one logical call of a method with policy p and key ("" for a
// method that is not keyed) as cfg's owner says.
func Do(ctx context.Context, cfg *Config, p policy.MethodPolicy, key string, t Transport) Result {
	u := &call{cfg: cfg, p: p, ctx: ctx, key: key, t: t}
	switch cfg.Owner {
	case policy.OwnerApplication:
		return u.retrying()
	case policy.OwnerServiceConfig:
		return u.once(true)
	default:
		return u.once(false)
	}
}

// call is one logical call.
type call struct {
	cfg *Config
	p   policy.MethodPolicy
	ctx context.Context
	key string
	t   Transport

	runs     int // attempts that ran the call (not resolves)
	attempts int // attempts on the wire, resolves included
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
func (u *call) definite() bool {
	return u.p.Kind == policy.KindKeyed && u.p.DurableLedger && u.key != ""
}

func (u *call) attempt(resolve bool) Attempt {
	if resolve {
		u.resolves++
	} else {
		u.runs++
	}
	a := u.t.Attempt(resolve, !resolve && u.runs > 1)
	u.attempts += max(1, a.Wire)
	return a
}

// succeeded ends a call whose last attempt succeeded.
func (u *call) succeeded(resolve bool, a Attempt) Result {
	if u.cfg.FundBySuccess {
		u.cfg.Budget.Deposit()
	}
	switch {
	case resolve:
		u.t.Event(Resolved)
		return Result{Success: "resolved"}
	case a.Replayed:
		return Result{Success: "replayed"}
	}
	return Result{Success: "ok"}
}

// retrying is the loop of a channel whose retries the application owns.
func (u *call) retrying() Result {
	cfg := u.cfg
	if !cfg.FundBySuccess {
		cfg.Budget.Deposit()
	}
	resolving := false
	for {
		a := u.attempt(resolving)
		if a.Err == nil {
			return u.succeeded(resolving, a)
		}
		var (
			n   next
			why string
		)
		if resolving {
			n, why = u.readResolve(a)
		} else {
			n, why = u.readRun(a)
		}
		if n == runAgain && u.noRuns == "" {
			switch {
			case u.runs >= cfg.MaxAttempts:
				u.noRuns = "max-attempts"
			case !cfg.Budget.TryWithdraw():
				u.t.Event(BudgetRefused)
				u.noRuns = "budget-exhausted"
			}
		}
		if n == stop && u.definite() && u.unknown && u.saysNothingCommitted(a) {
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
			return u.finish(a, why)
		}
		if stopWhy := u.pause(n == resolveIt, a.Pushback); stopWhy != "" {
			if !u.lastChance(stopWhy) {
				return u.finish(a, stopWhy)
			}
			n = resolveIt
		}
		resolving = n == resolveIt
		if !resolving {
			u.t.Event(Retried)
		}
	}
}

// once is the loop of a channel whose retries belong to the transport's
// own mechanism (settle: it then resolves a keyed call whose outcome is
// unknown), the mesh or nobody: one attempt, whatever retries happen
// underneath.
func (u *call) once(settle bool) Result {
	a := u.attempt(false)
	if a.Err == nil {
		return u.succeeded(false, a)
	}
	if u.p.Kind != policy.KindKeyed || u.key == "" {
		// Passed on as it is (no Next: there is nothing to do with a key);
		// the reading is for the transport's metrics.
		return Result{Err: a.Err, Info: Info{Outcome: ReadingOf(a), Attempts: u.attempts}}
	}
	n, why := u.readRun(a)
	if u.definite() && a.EarlierMayHaveCommitted && u.saysNothingCommitted(a) {
		// The last attempt's "nothing was committed" is about that attempt
		// alone: one of the transport's earlier attempts underneath may
		// have committed. The call resolves before it answers.
		u.markUnknown()
		n = resolveIt
	}
	u.noRuns = "owner-" + u.cfg.Owner.String()
	if n == stop || !settle || !u.definite() || !u.unknown {
		return u.finish(a, why)
	}
	last := a
	for {
		if stopWhy := u.pause(true, last.Pushback); stopWhy != "" {
			if !u.lastChance(stopWhy) {
				return u.finish(last, stopWhy)
			}
		}
		last = u.attempt(true)
		if last.Err == nil {
			return u.succeeded(true, last)
		}
		if n, why = u.readResolve(last); n != resolveIt {
			if n == runAgain {
				why = u.noRuns // nothing committed; the transport had given up
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
func (u *call) lastChance(stopWhy string) bool {
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

// MayHaveRun reports whether an attempt that was sent and failed with c
// may have taken effect on the server.
func MayHaveRun(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal,
		codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// retryableCode reports whether a refusal with c may go otherwise on
// another attempt: the codes policy.Eligible retries or resolves.
func retryableCode(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal,
		codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

func (u *call) markUnknown() {
	if !u.unknown {
		u.unknown, u.unknownAt = true, time.Now()
	}
}

// ServerRow returns the classification's row of a kit server's reason,
// if reason is one.
func ServerRow(reason string) (keyed.Row, bool) {
	o, ok := keyed.OfReason(reason)
	if !ok {
		return keyed.Row{}, false
	}
	r := o.Row()
	return r, r.Side == keyed.SideServer
}

// readRun reads the failure of a run of the call: the classification for
// an error with a server reason, policy.Eligible otherwise.
func (u *call) readRun(a Attempt) (next, string) {
	u.runErr, u.notFound = a.Err, false
	sent := a.reached()
	u.lastSent = sent
	if r, ok := ServerRow(a.Reason); ok {
		switch r.Next {
		case keyed.Retry:
			if r.Committed == keyed.CommittedUnknown && sent {
				u.markUnknown() // another attempt in flight may commit
			}
			if r.Outcome == keyed.NotExecuted && !retryableCode(a.Code) {
				// Something in front of the kit refused the call with a
				// code another attempt will not change (a bad token's
				// UNAUTHENTICATED): nothing ran, and nothing will.
				return stop, r.Reason
			}
			return runAgain, r.Reason
		case keyed.Resolve:
			u.markUnknown()
			return resolveIt, r.Reason
		}
		return stop, r.Reason
	}
	if cerr := u.ctx.Err(); cerr != nil {
		if sent && MayHaveRun(a.Code) {
			u.markUnknown()
		}
		return stop, ctxDecision(cerr)
	}
	ev := a.Evidence
	ev.HasKey = u.key != ""
	d := policy.Eligible(u.p, ev, a.Code)
	if sent && MayHaveRun(a.Code) && d.Reason != policy.ReasonPrefixDelivered {
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

// saysNothingCommitted reports whether a, the last run, says that this
// run committed nothing: a server reason that says so, or (without one) a
// request that never left the client. Such an answer is about that run
// alone: when an earlier attempt of the call may have committed, the call
// must resolve before it reports anything definite.
func (u *call) saysNothingCommitted(a Attempt) bool {
	if r, ok := ServerRow(a.Reason); ok {
		return r.Committed.Nothing()
	}
	return !u.lastSent
}

// readResolve reads the failure of a resolve request.
func (u *call) readResolve(a Attempt) (next, string) {
	u.notFound = false
	r, kit := ServerRow(a.Reason)
	switch {
	case kit && r.Outcome == keyed.NotFound:
		// Nothing committed: running the call again with the key is safe.
		u.unknown, u.notFound = false, true
		return runAgain, "resolved-not-found"
	case a.ReplayedError:
		// The stored outcome is a recorded final error: the answer.
		u.unknown, u.lastSent = false, true
		u.t.Event(Resolved)
		return stop, "resolved"
	case kit && (r.Outcome == keyed.InProgress || r.Next == keyed.Retry):
		// Still in flight, or the resolve itself failed on the server.
		return resolveIt, r.Reason
	case kit:
		u.unknown, u.lastSent = false, true // the server's answer for the key (e.g. INCOMPLETE)
		return stop, r.Reason
	case u.ctx.Err() != nil:
		return stop, ctxDecision(u.ctx.Err())
	case MayHaveRun(a.Code):
		return resolveIt, "resolve-lost"
	}
	u.unknown, u.lastSent = false, true // the server answered the resolve with a status of its own
	return stop, "resolve-answered"
}

// ResolveAgain reports whether a failed resolve request is worth sending
// again: its answer was lost, the server's database failed, or an attempt
// with the key is still in flight. A stored final error is the answer.
func ResolveAgain(a Attempt) bool {
	if a.ReplayedError {
		return false
	}
	if r, ok := ServerRow(a.Reason); ok {
		return r.Outcome == keyed.InProgress || (r.Next == keyed.Retry && r.Outcome != keyed.NotFound)
	}
	return MayHaveRun(a.Code)
}

// ResolveTries bounds the resolve requests [Resolve] sends when its
// context has no deadline.
const ResolveTries = 10

// Resolve is the loop of an application's resolve request (a transport's
// Resolve function), written once for every transport: it sends the
// request with send and sends it again, after the backoff (policy's
// default: 100 ms doubling to 1 s) or the server's pushback, while
// [ResolveAgain] says the attempt is worth repeating: its answer was
// lost on the way, the server's database failed, or another attempt with
// the key is still in flight. It stops when ctx ends, or after
// [ResolveTries] tries when ctx has no deadline, and returns the last
// attempt's error: nil when the stored response came back, the server's
// OPERATION_NOT_FOUND or stored final error, or the last failure.
func Resolve(ctx context.Context, send func() Attempt) error {
	_, hasDeadline := ctx.Deadline()
	var b policy.Backoff
	step := 1
	for try := 1; ; try++ {
		a := send()
		if a.Err == nil || !ResolveAgain(a) || ctx.Err() != nil || (!hasDeadline && try >= ResolveTries) {
			return a.Err
		}
		if Pause(ctx, b, &step, a.Pushback, nil) != "" {
			return a.Err
		}
	}
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
func (u *call) pause(resolve bool, pushback []string) string {
	return Pause(u.ctx, u.cfg.Backoff, &u.step, pushback, func(d time.Duration) bool {
		_, has := u.ctx.Deadline()
		return !resolve || has || time.Since(u.unknownAt)+d < u.cfg.ResolveWindow
	})
}

// Pause is the one retry wait of a client: it takes the backoff's next
// step (or the server's pushback), checks it against the deadline (and
// allowed, when not nil) and sleeps. It returns "deadline", "canceled",
// "pushback-stop" or "resolve-window" when the call must stop instead, or
// "".
func Pause(ctx context.Context, b policy.Backoff, step *int, pushback []string, allowed func(time.Duration) bool) string {
	d, n, err := b.Next(ctx, max(*step, 1), pushback)
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

// finish returns the last attempt's error with the loop's reading of the
// call: what is known of its outcome and what the caller can do. A call of
// a method that is not keyed and was not retried gets no reading.
func (u *call) finish(last Attempt, decision string) Result {
	err := last.Err
	info := Info{Key: u.key, Attempts: u.attempts, Resolves: u.resolves, Decision: decision}
	keyedCall := u.p.Kind == policy.KindKeyed && u.key != ""
	r, kit := ServerRow(last.Reason)
	switch {
	case u.unknown:
		info.Outcome, info.Next = keyed.CallOutcomeUnknown, keyed.Stop
		switch {
		case keyedCall:
			info.Next = keyed.Resolve
		case u.p.Kind == policy.KindIdempotent || u.p.Kind == policy.KindNoSideEffects:
			info.Next = keyed.Retry
		}
	case u.notFound && u.runErr != nil:
		// A resolve proved that nothing was committed; the run's failure is
		// the error, and calling again with the key is safe.
		err = u.runErr
		info.Outcome, info.Next = keyed.NotFound, keyed.Retry
	case kit:
		info.Outcome, info.Next = r.Outcome, r.Next
	case !u.lastSent:
		info.Outcome, info.Next = keyed.NotSent, keyed.Retry
	default:
		info.Outcome, info.Next = keyed.ServerAnswered, keyed.Stop
	}
	return Result{Err: err, Info: info, Attach: keyedCall || u.attempts > 1}
}

// KeyFor returns the idempotency key of a call of a method with policy p:
// set, the key the caller chose, when not ""; "" for a method that is not
// keyed; with derive, inside a keyed call (a context that carries an
// operation), the key derived from it with the method as the step
// (keyed.DownstreamKey); else a new one.
func KeyFor(ctx context.Context, p policy.MethodPolicy, set string, derive bool) string {
	switch {
	case set != "":
		return set
	case p.Kind != policy.KindKeyed:
		return ""
	}
	return newKey(ctx, p, derive, keyed.NewKey)
}

// newKey is the key of a keyed call whose caller set none: with derive,
// inside a keyed call, the derived one; else fresh().
func newKey(ctx context.Context, p policy.MethodPolicy, derive bool, fresh func() string) string {
	if derive {
		if k, err := keyed.DownstreamKey(ctx, p.FullMethod); err == nil {
			return k
		}
	}
	return fresh()
}

// KeyForRequest is KeyFor for a call whose request message has an AIP-155
// request_id field (internal/keyedcore/keyedproto.RequestIDField), id its value ("" when
// empty): a non-empty id is the call's key when the caller set none, and
// a new key is keyed.NewKey's, a UUID (version 7, in its 36-character
// form: AIP-155 asks for a UUID, and this one carries its birth). A derived
// key (derive) stays keyed.DownstreamKey's.
func KeyForRequest(ctx context.Context, p policy.MethodPolicy, set, id string, derive bool) string {
	switch {
	case set != "":
		return set
	case p.Kind != policy.KindKeyed:
		return ""
	case id != "":
		return id
	}
	return newKey(ctx, p, derive, keyed.NewKey)
}

// ConfigOf is the loop's configuration for a client whose retries belong
// to owner, from keyed's client options (c): a budget with policy's
// defaults when none was given.
func ConfigOf(owner policy.RetryOwner, c *keyedconf.Client) (*Config, error) {
	if c.Budget == nil {
		b, err := policy.NewBudget(policy.BudgetSettings{})
		if err != nil {
			return nil, err
		}
		c.Budget = b
	}
	return &Config{Owner: owner, Budget: c.Budget, FundBySuccess: c.FundBySuccess, Backoff: c.Backoff,
		MaxAttempts: c.MaxAttempts, ResolveWindow: c.ResolveWindow}, nil
}
