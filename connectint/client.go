package connectint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

type keyCtx struct{}

// WithKey returns a context whose calls through the kit's client
// interceptor carry key as their idempotency key, replacing any key set
// before. Use it to choose the key yourself (to persist it before the
// call, so that [Resolve] can find the outcome after a restart). An
// Idempotency-Key header set on the request does the same. Without either
// the interceptor generates one key per logical call, which the error of
// a keyed call carries (see keyed.CallInfo). The interceptor sets the key's
// header on the request for the call's attempts and restores the header
// the request came with when the call ends; it also puts the key in an
// empty AIP-155 request_id of a keyed procedure's request (see
// Client.Interceptor).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// clientRefuses are the shared client options connectint's client cannot
// honour.
var clientRefuses = map[string]string{
	"WithMeterProvider":  "connectint's client records no telemetry",
	"WithTracerProvider": "connectint's client records no telemetry",
	"WithLogger":         "connectint's client records no telemetry",
}

// Client is the client side of the kit for a connect client (one target):
// it attaches one idempotency key per logical call of a keyed procedure;
// when the application owns retries (connect-go has none of its own) it
// retries according to policy eligibility with a budget and backoff, and
// resolves a keyed call whose outcome is unknown, so that such a call
// returns its result or a definite error. It reads each attempt's
// evidence (whether the request went out, whether the response began)
// from net/http's client trace. A Client is safe for concurrent use.
type Client struct {
	catalog *policy.Catalog
	owner   policy.RetryOwner
	cfg     keyedconf.Client
	loop    *retry.Config
	c       keyedcore.ClientCounters
}

// NewClient returns a Client for a connect client whose retries belong to
// owner: policy.OwnerApplication (the kit retries and resolves),
// policy.OwnerMesh or policy.OwnerNone (one attempt). connect-go has no
// service config, so policy.OwnerServiceConfig is an error. Procedures
// missing from the catalog are treated as non-idempotent and never
// retried. Configuration errors wrap ErrInvalidConfig.
func NewClient(catalog *policy.Catalog, owner policy.RetryOwner, opts ...keyed.ClientOption) (*Client, error) {
	switch {
	case !owner.Valid():
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, policy.ErrInvalidOwner)
	case owner == policy.OwnerServiceConfig:
		return nil, fmt.Errorf("%w: connect-go has no service config to own retries; use policy.OwnerApplication", ErrInvalidConfig)
	case catalog == nil:
		return nil, fmt.Errorf("%w: nil catalog", ErrInvalidConfig)
	}
	c := &Client{catalog: catalog, owner: owner, cfg: keyedconf.NewClient("connectint", nil, clientRefuses)}
	if err := keyedconf.ApplyClient(&c.cfg, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, p := range catalog.Methods() {
		if p.Kind == policy.KindKeyed && p.Shape != policy.ShapeUnary {
			return nil, fmt.Errorf("%w: keyed procedure %s is %s; only unary procedures can be keyed", ErrInvalidConfig, p.FullMethod, p.Shape)
		}
	}
	loop, err := retry.ConfigOf(owner, &c.cfg)
	if err != nil {
		return nil, err
	}
	c.loop = loop
	return c, nil
}

// Owner returns the client's retry owner.
func (c *Client) Owner() policy.RetryOwner { return c.owner }

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() keyed.ClientStats { return c.c.Stats() }

func (c *Client) policyOf(procedure string) policy.MethodPolicy {
	return retry.PolicyOf(c.catalog, procedure)
}

// ClientOptions returns the options that install the client's interceptor
// on a connect client: connect.WithInterceptors(c.Interceptor()). Put it
// last among the client's interceptors, so that it sees every attempt
// closest to the wire.
func (c *Client) ClientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithInterceptors(c.Interceptor())}
}

// Interceptor returns the client interceptor (unary calls; streams pass
// through):
//
//   - policy.OwnerApplication: per logical call it attaches one
//     idempotency key to a keyed procedure, the same on every attempt;
//     after a failed attempt it decides with the kit's error map (for an
//     error with a reason of the kit's) or policy.Eligible (with the
//     evidence net/http's client trace saw); it resolves a keyed call
//     whose outcome is unknown before running it again; it spends the
//     budget on every retry and waits the backoff or the server's
//     pushback, never past the call's deadline.
//   - policy.OwnerMesh and policy.OwnerNone: it attaches the key and
//     sends nothing more.
//
// Every call declares the client's owner (RetryOwnerHeader) and, with
// policy.OwnerApplication, each attempt its number (AttemptHeader), so
// that the kit's server can tell which layer retried it; the request's
// headers are restored when the call ends.
//
// A keyed call returns its result (original or replayed) or an error
// with a definite keyed.CallInfo; only when the deadline (or the resolve
// window) ends before its outcome could be learned does it return
// CALL_OUTCOME_UNKNOWN, with the key. A request carrying
// Idempotency-Resolve (see [Resolve]) passes through.
//
// A keyed procedure whose request message has an AIP-155 request_id (see
// keyedproto.RequestIDField): a request_id the caller set is the call's
// key when the caller chose none; an empty one is filled with the call's
// key (a random UUID when the interceptor generates it) in a copy of the
// message, which the request holds for the call's attempts and resolves
// and gives back to the caller's message when the call ends.
func (c *Client) Interceptor() connect.Interceptor { return clientInterceptor{c} }

type clientInterceptor struct{ c *Client }

func (i clientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	c := i.c
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		if req.Header().Get(ResolveHeader) != "" {
			c.c.Resolves.Add(1)
			c.c.Attempts.Add(1)
			// Resolve sends one request again and again.
			resp, _, err := send(ctx, next, req)
			return resp, err
		}
		c.c.Calls.Add(1)
		defer c.declare(req.Header())()
		p := c.policyOf(req.Spec().Procedure)
		set, _ := ctx.Value(keyCtx{}).(string)
		given := req.Header().Values(KeyHeader)
		if set == "" && len(given) > 0 {
			set = given[len(given)-1]
		}
		key, restore := c.keyFor(ctx, p, set, req)
		defer restore()
		if key != "" {
			req.Header().Set(KeyHeader, key)
			// The key is the call's: a request sent again later is a new
			// logical call unless its caller sets the key.
			defer func() {
				if given != nil {
					req.Header()[http.CanonicalHeaderKey(KeyHeader)] = given
				} else {
					req.Header().Del(KeyHeader)
				}
			}()
		}
		u := &unaryCall{c: c, ctx: ctx, req: req, next: next}
		res := retry.Do(ctx, c.loop, p, key, u)
		if res.Err == nil {
			if res.Success == "replayed" {
				c.c.Replayed.Add(1)
			}
			return u.resp, nil
		}
		if res.Ambiguous() {
			c.c.Ambiguous.Add(1)
		}
		if !res.Attach {
			return nil, res.Err
		}
		return nil, withCallInfo(res.Err, res.Info)
	}
}

// keyFor returns the key of a call of p (see retry.KeyFor), set the key
// the caller chose ("" for none). For a keyed procedure whose request has
// an AIP-155 request_id field (see keyedproto.RequestIDField) the request's
// own non-empty request_id is the key when the caller set none, a new key
// is a UUID (retry.KeyForRequest), and an empty request_id is filled with
// the key: the request's message is, for the call, a copy with the field
// set (keyedproto.WithRequestID), so that the caller's message never
// changes; restore puts the caller's message back in the request when the
// call ends, as the interceptor does with the key's header.
func (c *Client) keyFor(ctx context.Context, p policy.MethodPolicy, set string, req connect.AnyRequest) (key string, restore func()) {
	id, has := keyedproto.RequestID(req.Any())
	if !has || p.Kind != policy.KindKeyed {
		return retry.KeyFor(ctx, p, set, c.cfg.DownstreamKeys), func() {}
	}
	key = retry.KeyForRequest(ctx, p, set, id, c.cfg.DownstreamKeys)
	return key, swapMessage(req, keyedproto.WithRequestID(req.Any(), key))
}

// swapMessage sets the message of req (a *connect.Request[T], the only
// implementation of connect.AnyRequest) to msg, of the same type, and
// returns the function that puts the old one back. It does nothing when
// msg is req's own message or req is not a *connect.Request[T] with a
// settable Msg of msg's type.
func swapMessage(req connect.AnyRequest, msg any) func() {
	v := reflect.ValueOf(req)
	if msg == req.Any() || v.Kind() != reflect.Pointer || v.IsNil() {
		return func() {}
	}
	f := v.Elem().FieldByName("Msg")
	mv := reflect.ValueOf(msg)
	if !f.IsValid() || !f.CanSet() || !mv.Type().AssignableTo(f.Type()) {
		return func() {}
	}
	old := reflect.ValueOf(f.Interface())
	f.Set(mv)
	return func() { f.Set(old) }
}

func (clientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (clientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// unaryCall is one logical unary call through the client interceptor: the
// connect transport of package retry's loop.
type unaryCall struct {
	c    *Client
	ctx  context.Context
	req  connect.AnyRequest
	next connect.UnaryFunc
	resp connect.AnyResponse
	runs int // the runs sent (resolves not counted)
}

// evidence is what net/http's client trace saw of one attempt.
type evidence struct {
	traced, conn, sent, header atomic.Bool
	wrote                      chan struct{} // closed when the request is written (or its write failed)
	once                       sync.Once
}

func newEvidence() *evidence { return &evidence{wrote: make(chan struct{})} }

func (ev *evidence) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn:              func(string) { ev.traced.Store(true) },
		GotConn:              func(httptrace.GotConnInfo) { ev.conn.Store(true) },
		WroteHeaders:         func() { ev.sent.Store(true) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { ev.once.Do(func() { close(ev.wrote) }) },
		GotFirstResponseByte: func() { ev.header.Store(true) },
	}
}

// send sends req once through next, tracing it, and returns once net/http
// is done with its headers (settle), with what the trace saw.
func send(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest) (connect.AnyResponse, *evidence, error) {
	ev := newEvidence()
	resp, err := next(httptrace.WithClientTrace(ctx, ev.trace()), req)
	ev.settle()
	return resp, ev, err
}

// settleBound bounds settle's wait for a write that may end without a
// trace event (net/http's HTTP/2 writer gives up silently when the call's
// context ends before it starts).
const settleBound = 50 * time.Millisecond

// settle returns once net/http is done with the attempt's request header
// map, which connect-go hands to it as is and which the loop changes
// between attempts (the attempt number, the resolve flag) and when the
// call ends (the caller's headers restored). The write may still run when
// the attempt returns (an HTTP/2 stream's writer is a goroutine of its
// own): the headers were written (WroteHeaders), or no connection was had
// (no writer ever held the request), or it waits for the end of the write
// (WroteRequest), at most settleBound.
func (ev *evidence) settle() {
	if ev.sent.Load() || !ev.conn.Load() {
		return
	}
	t := time.NewTimer(settleBound)
	defer t.Stop()
	select {
	case <-ev.wrote:
	case <-t.C:
	}
}

// Attempt sends the call (or a resolve request for it) once.
func (u *unaryCall) Attempt(resolve, rerun bool) retry.Attempt {
	h := u.req.Header()
	if resolve {
		h.Set(ResolveHeader, "1")
		u.c.c.Resolves.Add(1)
	} else {
		u.runs++
		u.c.numbered(h, u.runs)
	}
	u.c.c.Attempts.Add(1)
	resp, ev, err := send(u.ctx, u.next, u.req)
	h.Del(ResolveHeader)
	// A client whose transport does not trace (no connection was asked
	// for) may have sent the request: never read it as not sent.
	sent := ev.sent.Load() || !ev.traced.Load()
	a := retry.Attempt{Err: err, Evidence: policy.Evidence{Sent: sent, HeadersReceived: ev.header.Load()}}
	if err == nil {
		u.resp = resp
		a.Replayed = resp != nil && (isReplayed(resp.Trailer()) || isReplayed(resp.Header()))
		return a
	}
	a.Code = wireCode(u.ctx, err)
	a.Reason = ReasonOf(err)
	a.ReplayedError = replayedError(err)
	var ce *connect.Error
	if errors.As(err, &ce) {
		a.Pushback = ce.Meta().Values(policy.PushbackHeader)
		if len(ce.Meta()) > 0 { // the server's response headers or trailers
			a.Evidence.HeadersReceived = true
		}
	}
	return a
}

// wireCode is the status code of an attempt's error as the retry loop
// reads it: connect-go's code, except for a connection reset or a broken
// pipe while the call's context is still live. connect-go's client names
// those CANCELED (on a server they mean that the client went away), yet
// the caller cancelled nothing: the answer was lost on the way, which is
// UNAVAILABLE. Read as CANCELED, a keyed call would stop with its outcome
// unknown and its deadline left.
func wireCode(ctx context.Context, err error) codes.Code {
	c := grpcCode(connect.CodeOf(err))
	if c == codes.Canceled && ctx.Err() == nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return codes.Unavailable
	}
	return c
}

// Event counts what the loop did.
func (u *unaryCall) Event(e retry.Event) { u.c.c.Event(e) }

// Resolve asks the server for the stored outcome of a keyed call without
// running it, through call (a connect client's CallUnary, or a generated
// client's method): for an application that persisted the key and lost
// the answer, or got CALL_OUTCOME_UNKNOWN. req must be a request of the
// procedure (its content is not compared). It asks again, after a
// backoff (or the server's pushback), while the answer is lost on the way,
// the server's database fails, or another attempt with the key is still
// in flight; it stops when ctx ends, or after 10 tries when ctx has no
// deadline. It returns the stored response; an error with the reason
// OPERATION_NOT_FOUND (NOT_FOUND) when nothing was committed, so running
// the call again with the same key is safe; the stored error of a call
// that failed for good; or the last failure when it had to stop.
func Resolve[Req, Res any](ctx context.Context, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), key string, req *connect.Request[Req]) (*connect.Response[Res], error) {
	if key == "" {
		return nil, errors.New("connectint: resolve: empty key")
	}
	if req == nil || call == nil {
		return nil, errors.New("connectint: resolve: nil request or call")
	}
	req.Header().Set(KeyHeader, key)
	req.Header().Set(ResolveHeader, "1")
	var resp *connect.Response[Res]
	err := retry.Resolve(ctx, func() retry.Attempt {
		r, err := call(ctx, req)
		if err == nil {
			resp = r
			return retry.Attempt{}
		}
		a := retry.Attempt{Err: err, Code: wireCode(ctx, err), Reason: ReasonOf(err), ReplayedError: replayedError(err)}
		var ce *connect.Error
		if errors.As(err, &ce) {
			a.Pushback = ce.Meta().Values(policy.PushbackHeader)
		}
		return a
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
