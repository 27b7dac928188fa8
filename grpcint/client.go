package grpcint

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/policy"
)

// NewKey returns a fresh random idempotency key: 128 bits as 26
// base32 characters.
func NewKey() string { return rand.Text() }

// WithKey returns a context whose outgoing calls carry key as their
// idempotency key, replacing any key already set. Use it to choose the key
// yourself (for example to persist it before the call, so that
// [Resolve] can find the outcome after a restart). Without it the client
// interceptor generates one key per logical call.
func WithKey(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(KeyHeader, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// keyOf returns the outgoing idempotency key of ctx, if one is set.
func keyOf(ctx context.Context) string {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return ""
	}
	if v := md.Get(KeyHeader); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// ClientStats are the counters of a Client, read with Client.Stats.
type ClientStats struct {
	// Calls is the number of logical calls through the interceptor.
	Calls int64
	// Attempts is the number of attempts that reached the transport, as
	// seen by the stats handler: the first attempt, retries and resolves,
	// including grpc-go's own retries on a service-config-owned channel.
	Attempts int64
	// Retries is the number of retries the interceptor made.
	Retries int64
	// Resolves is the number of resolve requests the interceptor sent.
	Resolves int64
	// Resolved is the number of calls whose outcome a resolve returned.
	Resolved int64
	// Replayed is the number of successful calls whose response was a
	// stored outcome (response trailer idempotency-replayed).
	Replayed int64
	// BudgetRefusals is the number of retries or resolves the budget
	// refused.
	BudgetRefusals int64
}

type counters struct {
	calls, attempts, retries, resolves, resolved, replayed, refusals atomic.Int64
}

// ClientOption configures a Client.
type ClientOption func(*Client) error

// WithBudget sets the retry budget shared by the client's calls (one per
// target). Default: policy.NewBudget with its defaults (10% of calls plus
// 5 retries a second over 10 s).
func WithBudget(b *policy.Budget) ClientOption {
	return func(c *Client) error {
		if b == nil {
			return fmt.Errorf("%w: nil budget", ErrInvalidConfig)
		}
		c.budget = b
		return nil
	}
}

// WithBudgetFundedBySuccess deposits into the budget once per successful
// call instead of once per call, so that under total failure retries fall
// to the budget's floor. Pair it with a larger budget percent (0.5).
func WithBudgetFundedBySuccess() ClientOption {
	return func(c *Client) error { c.fundBySuccess = true; return nil }
}

// WithBackoff sets the backoff between attempts. Default: policy.Backoff's
// defaults (100 ms doubling to 1 s, ±20%). Server pushback
// (grpc-retry-pushback-ms) always wins.
func WithBackoff(b policy.Backoff) ClientOption {
	return func(c *Client) error {
		if err := b.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		c.backoff = b
		return nil
	}
}

// WithMaxAttempts bounds the attempts of one logical call, the first one,
// retries and resolves included: 1 to 100; default 5. The call's deadline
// bounds them too.
func WithMaxAttempts(n int) ClientOption {
	return func(c *Client) error {
		if n < 1 || n > 100 {
			return fmt.Errorf("%w: max attempts %d outside [1, 100]", ErrInvalidConfig, n)
		}
		c.maxAttempts = n
		return nil
	}
}

// Client is the client side of the kit for one channel: it attaches one
// idempotency key per logical call of a keyed method and, when the
// application owns retries, retries according to policy eligibility with
// a budget and backoff, resolving keyed calls whose outcome is unknown.
// Its stats handler (installed by DialOptions) gives each attempt real
// evidence: whether the request went out, whether response headers came
// back. A Client is safe for concurrent use; use one per target.
type Client struct {
	catalog          *policy.Catalog
	owner            policy.RetryOwner
	budget           *policy.Budget
	backoff          policy.Backoff
	maxAttempts      int
	fundBySuccess    bool
	serviceConfig    string // user-supplied, checked at construction
	hasServiceConfig bool
	retrySettings    *policy.RetrySettings
	c                counters
}

// NewClient returns a Client for a channel whose retries belong to owner.
// Methods missing from the catalog are treated as non-idempotent and never
// retried. Retries happen in the client only for policy.OwnerApplication.
func NewClient(catalog *policy.Catalog, owner policy.RetryOwner, opts ...ClientOption) (*Client, error) {
	if !owner.Valid() {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, policy.ErrInvalidOwner)
	}
	if catalog == nil {
		return nil, fmt.Errorf("%w: nil catalog", ErrInvalidConfig)
	}
	c := &Client{catalog: catalog, owner: owner, maxAttempts: 5}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	for _, p := range catalog.Methods() {
		if p.Kind == policy.KindKeyed && p.Shape != policy.ShapeUnary {
			return nil, fmt.Errorf("%w: keyed method %s is %s; only unary methods can be keyed", ErrInvalidConfig, p.FullMethod, p.Shape)
		}
	}
	if err := c.checkServiceConfig(); err != nil {
		return nil, err
	}
	if c.owner == policy.OwnerServiceConfig && !c.hasServiceConfig {
		if _, err := c.generatedServiceConfig(); err != nil {
			return nil, err
		}
	}
	if c.budget == nil {
		b, err := policy.NewBudget(policy.BudgetSettings{})
		if err != nil {
			return nil, err
		}
		c.budget = b
	}
	return c, nil
}

// Owner returns the channel's retry owner.
func (c *Client) Owner() policy.RetryOwner { return c.owner }

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Calls: c.c.calls.Load(), Attempts: c.c.attempts.Load(), Retries: c.c.retries.Load(),
		Resolves: c.c.resolves.Load(), Resolved: c.c.resolved.Load(), Replayed: c.c.replayed.Load(),
		BudgetRefusals: c.c.refusals.Load(),
	}
}

func (c *Client) policyOf(method string) policy.MethodPolicy {
	if p, ok := c.catalog.Lookup(method); ok {
		return p
	}
	return policy.MethodPolicy{FullMethod: method, Kind: policy.KindNonIdempotent}
}

// evidence is what the stats handler saw of one attempt.
type evidence struct {
	sent   atomic.Bool
	header atomic.Bool
}

type evidenceKey struct{}

// StatsHandler returns the stats.Handler that records per-attempt
// evidence and counts attempts. DialOptions installs it; install it with
// grpc.WithStatsHandler when building the options by hand.
func (c *Client) StatsHandler() stats.Handler { return (*statsHandler)(c) }

type statsHandler Client

func (h *statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	ev, _ := ctx.Value(evidenceKey{}).(*evidence)
	switch s.(type) {
	case *stats.Begin:
		h.c.attempts.Add(1)
	case *stats.OutPayload:
		if ev != nil {
			ev.sent.Store(true)
		}
	case *stats.InHeader:
		if ev != nil {
			ev.header.Store(true)
		}
	}
}

func (h *statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (h *statsHandler) HandleConn(context.Context, stats.ConnStats) {}

// withKeyFor returns ctx carrying an idempotency key when method is keyed:
// the caller's key if set, else a new one. It returns the key ("" for a
// method that is not keyed and has no key).
func (c *Client) withKeyFor(ctx context.Context, p policy.MethodPolicy) (context.Context, string) {
	if k := keyOf(ctx); k != "" {
		return ctx, k
	}
	if p.Kind != policy.KindKeyed {
		return ctx, ""
	}
	k := NewKey()
	return metadata.AppendToOutgoingContext(ctx, KeyHeader, k), k
}

// KeyInterceptor returns a unary interceptor that only attaches keys (one
// per logical call of a keyed method) and counts calls: the client side
// for a channel whose retries belong to the service config, the mesh or
// nobody. grpc-go's own retries resend the same metadata, so every attempt
// carries the same key.
func (c *Client) KeyInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c.c.calls.Add(1)
		ctx, _ = c.withKeyFor(ctx, c.policyOf(method))
		var trl metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trl))...)
		if err == nil && isReplayed(trl) {
			c.c.replayed.Add(1)
		}
		return err
	}
}

func isReplayed(md metadata.MD) bool {
	v := md.Get(ReplayedHeader)
	return len(v) > 0 && v[0] == "true"
}

// UnaryClientInterceptor returns the retrying interceptor for a channel
// owned by the application (see DialOptions, which pairs it with
// grpc.WithDisableRetry and the stats handler). Per logical call it:
//
//   - attaches one idempotency key to a keyed method, the same on every
//     attempt;
//   - after a failed attempt asks policy.Eligible, with the evidence the
//     stats handler saw for that attempt;
//   - on "resolve first" sends a resolve request with the same key and
//     returns the stored outcome, or retries when nothing was committed;
//   - spends the budget on every retry and resolve, and waits the backoff
//     or the server's pushback, never past the call's deadline;
//   - returns the last error with its code and details, its message
//     saying how many attempts were made (see Attempts).
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return c.invoke(ctx, method, req, reply, cc, invoker, opts)
	}
}

func (c *Client) invoke(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if isResolve(ctx) {
		c.c.resolves.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c.c.calls.Add(1)
	p := c.policyOf(method)
	ctx, key := c.withKeyFor(ctx, p)
	if !c.fundBySuccess {
		c.budget.Deposit()
	}
	resolving := false
	step := 1
	for attempt := 1; ; attempt++ {
		ev := &evidence{}
		actx := context.WithValue(ctx, evidenceKey{}, ev)
		if resolving {
			actx = metadata.AppendToOutgoingContext(actx, ResolveHeader, "1")
			c.c.resolves.Add(1)
		}
		var trl metadata.MD
		err := invoker(actx, method, req, reply, cc, append(opts, grpc.Trailer(&trl))...)
		if err == nil {
			if c.fundBySuccess {
				c.budget.Deposit()
			}
			if resolving {
				c.c.resolved.Add(1)
			} else if isReplayed(trl) {
				c.c.replayed.Add(1)
			}
			return nil
		}
		st := status.Convert(err)
		d := policy.Eligible(p, policy.Evidence{Sent: ev.sent.Load(), PrefixDelivered: ev.header.Load(), HasKey: key != ""}, st.Code())
		if resolving {
			switch {
			case st.Code() == codes.NotFound && ReasonOf(err) == ReasonNotFound:
				// Nothing committed: running it again with the same key is safe.
				resolving = false
			case isReplayed(trl) && d.Action == policy.DoNotRetry:
				// The stored outcome is a recorded final error: it is the answer.
				c.c.resolved.Add(1)
				return withAttempts(err, attempt, "resolved")
			case st.Code() == codes.Aborted:
				// Still in flight: ask again after the pushback.
			case d.Action == policy.DoNotRetry:
				return withAttempts(err, attempt, "resolve failed: "+string(d.Reason))
			}
		} else {
			switch d.Action {
			case policy.DoNotRetry:
				if attempt == 1 {
					return err
				}
				return withAttempts(err, attempt, string(d.Reason))
			case policy.ResolveFirst:
				resolving = true
			}
		}
		if attempt >= c.maxAttempts {
			return withAttempts(err, attempt, "max-attempts")
		}
		if !c.budget.TryWithdraw() {
			c.c.refusals.Add(1)
			return withAttempts(err, attempt, "budget-exhausted")
		}
		wait, next, berr := c.backoff.Next(ctx, step, trl.Get(policy.PushbackHeader))
		if berr != nil {
			why := "deadline"
			if errors.Is(berr, policy.ErrPushbackStop) {
				why = "pushback-stop"
			}
			return withAttempts(err, attempt, why)
		}
		step = next
		if serr := policy.Sleep(ctx, wait); serr != nil {
			return withAttempts(err, attempt, "deadline")
		}
		if !resolving {
			c.c.retries.Add(1)
		}
	}
}

// StreamClientInterceptor returns the streaming interceptor for a channel
// owned by the application. Client-streaming and bidirectional calls are
// never retried. A server-streaming call of an idempotent or
// no-side-effects method is retried only while no response header or
// message has arrived, by reopening the stream and resending the request;
// once anything arrived, a failure is returned as it is.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		c.c.calls.Add(1)
		p := c.policyOf(method)
		if desc.ClientStreams || !desc.ServerStreams || (p.Kind != policy.KindIdempotent && p.Kind != policy.KindNoSideEffects) {
			return streamer(ctx, desc, cc, method, opts...)
		}
		if !c.fundBySuccess {
			c.budget.Deposit()
		}
		rs := &retryStream{c: c, p: p, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts}
		if err := rs.open(); err != nil {
			return nil, err
		}
		return rs, nil
	}
}

// retryStream is a server-streaming call that can be reopened until its
// first response arrives.
type retryStream struct {
	grpc.ClientStream
	c        *Client
	p        policy.MethodPolicy
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	ev       *evidence
	req      any
	sent     bool
	closed   bool
	received bool
	attempts int
	step     int
}

func (s *retryStream) open() error {
	s.ev = &evidence{}
	s.attempts++
	cs, err := s.streamer(context.WithValue(s.ctx, evidenceKey{}, s.ev), s.desc, s.cc, s.method, s.opts...)
	if err != nil {
		return err
	}
	s.ClientStream = cs
	return nil
}

// SendMsg records the request so that it can be resent.
func (s *retryStream) SendMsg(m any) error {
	s.req, s.sent = m, true
	return s.ClientStream.SendMsg(m)
}

// CloseSend records that the request is complete.
func (s *retryStream) CloseSend() error {
	s.closed = true
	return s.ClientStream.CloseSend()
}

// RecvMsg retries a failure that comes before the first message.
func (s *retryStream) RecvMsg(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == nil {
			s.received = true
			return nil
		}
		if err == io.EOF || s.received || !s.sent || !s.closed {
			return err
		}
		st := status.Convert(err)
		d := policy.Eligible(s.p, policy.Evidence{Sent: s.ev.sent.Load(), PrefixDelivered: s.ev.header.Load()}, st.Code())
		if d.Action != policy.Retry {
			return err
		}
		if s.attempts >= s.c.maxAttempts {
			return withAttempts(err, s.attempts, "max-attempts")
		}
		if !s.c.budget.TryWithdraw() {
			s.c.c.refusals.Add(1)
			return withAttempts(err, s.attempts, "budget-exhausted")
		}
		if s.step == 0 {
			s.step = 1
		}
		wait, next, berr := s.c.backoff.Next(s.ctx, s.step, s.Trailer().Get(policy.PushbackHeader))
		if berr != nil {
			return withAttempts(err, s.attempts, "deadline")
		}
		s.step = next
		if policy.Sleep(s.ctx, wait) != nil {
			return withAttempts(err, s.attempts, "deadline")
		}
		s.c.c.retries.Add(1)
		if oerr := s.open(); oerr != nil {
			return oerr
		}
		if serr := s.ClientStream.SendMsg(s.req); serr != nil && serr != io.EOF {
			return serr
		}
		if cerr := s.ClientStream.CloseSend(); cerr != nil {
			return cerr
		}
	}
}
