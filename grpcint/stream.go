package grpcint

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// StreamClientInterceptor returns the channel's streaming interceptor, as
// DialOptions installs it. For policy.OwnerApplication it retries a
// server-streaming call of an idempotent or no-side-effects method only
// while no response header or message has arrived, by reopening the
// stream and resending the request; once anything arrived, a failure is
// returned as it is. Client-streaming and bidirectional calls are never
// retried, and for the other owners streams pass through (counted).
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		c.c.Calls.Add(1)
		p := c.policyOf(method)
		ctx = c.declare(ctx, cc)
		if c.owner != policy.OwnerApplication || desc.ClientStreams || !desc.ServerStreams ||
			(p.Kind != policy.KindIdempotent && p.Kind != policy.KindNoSideEffects) {
			return streamer(ctx, desc, cc, method, opts...)
		}
		if !c.cfg.FundBySuccess {
			c.cfg.Budget.Deposit()
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
	stats    callStats // gRFC A96's counts, recorded when the stream ends
	recorded bool
}

func (s *retryStream) open() error {
	if s.ev != nil {
		s.stats.attempted(s.ev, true)
	}
	s.ev = &evidence{timing: &s.stats.timing}
	s.attempts++
	cs, err := s.streamer(context.WithValue(s.c.numbered(s.ctx, s.attempts), evidenceKey{}, s.ev), s.desc, s.cc, s.method, s.opts...)
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

// stopped returns err with the client's reading: the stream delivered
// nothing, and it was not retried for the reason why.
func (s *retryStream) stopped(err error, why string) error {
	ci := retry.Info{Outcome: keyed.CallOutcomeUnknown, Next: keyed.Retry, Attempts: s.attempts, Decision: why}
	if !s.ev.reached() {
		ci.Outcome = keyed.NotSent
	}
	return withCallInfo(err, ci)
}

// outcomeOf is how the stream ended (err nil: it delivered what the
// server sent): the client's reading attached to err, or that of its last
// attempt.
func (s *retryStream) outcomeOf(err error) keyed.Outcome {
	if err == nil {
		return keyed.Executed
	}
	if ci, ok := CallInfoOf(err); ok && ci.Outcome != 0 {
		return ci.Outcome
	}
	return retry.ReadingOf(retry.Attempt{Err: err, Code: status.Code(err), Reason: ReasonOf(err),
		Evidence: policy.Evidence{Sent: s.ev.sent.Load(), HeadersReceived: s.ev.header.Load(), MessageReceived: s.ev.message.Load()}})
}

// RecvMsg retries a failure that comes before the first message.
func (s *retryStream) RecvMsg(m any) error {
	err := s.recv(m)
	if err != nil && !s.recorded {
		// The stream has ended: record the call once.
		s.recorded = true
		s.stats.attempted(s.ev, false)
		var callErr error
		if err != io.EOF {
			callErr = err
		}
		s.stats.outcome = s.outcomeOf(callErr)
		s.c.obs.callDone(s.ctx, s.cc, s.method, &s.stats, callErr)
	}
	return err
}

func (s *retryStream) recv(m any) error {
	for {
		err := s.ClientStream.RecvMsg(m)
		if err == nil {
			if !s.received && s.c.cfg.FundBySuccess {
				s.c.cfg.Budget.Deposit()
			}
			s.received = true
			return nil
		}
		if err == io.EOF || s.received || !s.sent || !s.closed {
			return err
		}
		d := policy.Eligible(s.p, policy.Evidence{Sent: s.ev.sent.Load(), HeadersReceived: s.ev.header.Load(), MessageReceived: s.ev.message.Load()}, status.Code(err))
		if d.Action != policy.Retry {
			if s.attempts == 1 {
				return err
			}
			return s.stopped(err, string(d.Reason))
		}
		if s.attempts >= s.c.cfg.MaxAttempts {
			return s.stopped(err, "max-attempts")
		}
		if !s.c.cfg.Budget.TryWithdraw() {
			s.c.c.Refusals.Add(1)
			s.c.obs.refused(s.ctx, s.method, "")
			return s.stopped(err, "budget-exhausted")
		}
		if why := retry.Pause(s.ctx, s.c.cfg.Backoff, &s.step, s.Trailer().Get(policy.PushbackHeader), nil); why != "" {
			return s.stopped(err, why)
		}
		s.c.c.Retries.Add(1)
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
