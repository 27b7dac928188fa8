package grpcint

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
)

// WithKey returns a context whose outgoing calls carry key as their
// idempotency key, replacing any key already set. Use it to choose the key
// yourself (for example to persist it before the call, so that
// [Resolve] can find the outcome after a restart). Without it the client
// interceptor generates one key per logical call, which the error of a
// keyed call carries (see keyed.CallInfo). The client interceptor also puts the
// key in an empty AIP-155 request_id of a keyed method's request (see
// Client.UnaryClientInterceptor).
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

// clientOwn is grpcint's own client settings (WithTarget,
// WithServiceConfigJSON, WithRetrySettings).
type clientOwn struct {
	serviceConfig    string
	hasServiceConfig bool
	retrySettings    *serviceconfig.RetrySettings
	target           string
}

// clientOption returns grpcint's own client option called name.
func clientOption(name string, f func(*clientOwn) error) keyed.ClientOption {
	return keyedconf.OwnClient("grpcint", name, f)
}

// Client is the client side of the kit for one channel: it attaches one
// idempotency key per logical call of a keyed method; when the application
// owns retries, it retries according to policy eligibility with a budget
// and backoff; and for the application and service-config owners it
// resolves a keyed call whose outcome is unknown, so that such a call
// returns its result or a definite error (see docs/grpc.md). Its stats
// handler (installed by DialOptions) gives each attempt real evidence:
// whether the request went out, whether response headers and messages
// came back. A Client is safe for concurrent use; use one per target.
type Client struct {
	catalog *policy.Catalog
	owner   policy.RetryOwner
	cfg     keyedconf.Client
	own     clientOwn
	loop    *retry.Config
	c       keyedcore.ClientCounters
	obs     *clientObs
}

// NewClient returns a Client for a channel whose retries belong to owner.
// Methods missing from the catalog are treated as non-idempotent and never
// retried. Configuration errors wrap ErrInvalidConfig.
func NewClient(catalog *policy.Catalog, owner policy.RetryOwner, opts ...keyed.ClientOption) (*Client, error) {
	if !owner.Valid() {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, policy.ErrInvalidOwner)
	}
	if catalog == nil {
		return nil, fmt.Errorf("%w: nil catalog", ErrInvalidConfig)
	}
	c := &Client{catalog: catalog, owner: owner}
	c.cfg = keyedconf.NewClient("grpcint", &c.own, nil)
	if err := keyedconf.ApplyClient(&c.cfg, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, p := range catalog.Methods() {
		if p.Kind == policy.KindKeyed && p.Shape != policy.ShapeUnary {
			return nil, fmt.Errorf("%w: keyed method %s is %s; only unary methods can be keyed", ErrInvalidConfig, p.FullMethod, p.Shape)
		}
	}
	if err := c.checkServiceConfig(); err != nil {
		return nil, err
	}
	if c.owner == policy.OwnerServiceConfig && !c.own.hasServiceConfig {
		if _, err := c.generatedServiceConfig(); err != nil {
			return nil, err
		}
	}
	loop, err := retry.ConfigOf(owner, &c.cfg)
	if err != nil {
		return nil, err
	}
	c.loop = loop
	c.obs = newClientObs(c)
	return c, nil
}

// Owner returns the channel's retry owner.
func (c *Client) Owner() policy.RetryOwner { return c.owner }

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() keyed.ClientStats { return c.c.Stats() }

func (c *Client) policyOf(method string) policy.MethodPolicy {
	return retry.PolicyOf(c.catalog, method)
}

// withKeyFor returns ctx carrying an idempotency key when method is keyed:
// the caller's key if set, else (keyed.WithDownstreamKeys, inside a keyed call)
// the derived one, else a new one (see retry.KeyFor). For a keyed method
// whose request has an AIP-155 request_id field (see
// keyedproto.RequestIDField) the request's own non-empty request_id is the
// key when the caller set none, a new key is a UUID, and an empty
// request_id is filled with the key on a copy of req (retry.KeyForRequest,
// keyedproto.WithRequestID). It returns the key ("" for a method that is
// not keyed and has no key) and the request to send.
func (c *Client) withKeyFor(ctx context.Context, p policy.MethodPolicy, req any) (context.Context, string, any) {
	set := keyOf(ctx)
	var k string
	if id, has := keyedproto.RequestID(req); has && p.Kind == policy.KindKeyed {
		k = retry.KeyForRequest(ctx, p, set, id, c.cfg.DownstreamKeys)
		req = keyedproto.WithRequestID(req, k)
	} else {
		k = retry.KeyFor(ctx, p, set, c.cfg.DownstreamKeys)
	}
	if k == "" || k == set {
		return ctx, k, req
	}
	return metadata.AppendToOutgoingContext(ctx, KeyHeader, k), k, req
}

// UnaryClientInterceptor returns the channel's unary interceptor, as
// DialOptions installs it:
//
//   - policy.OwnerApplication: the retrying interceptor. Per logical call
//     it attaches one idempotency key to a keyed method, the same on every
//     attempt; after a failed attempt it decides with the kit's error map
//     (for a status with a reason of the kit's) or policy.Eligible (with
//     the evidence the stats handler saw); it resolves a keyed call whose
//     outcome is unknown before running it again; it spends the budget on
//     every retry and waits the backoff or the server's pushback, never
//     past the call's deadline.
//   - policy.OwnerServiceConfig: grpc-go's own retries run underneath;
//     the interceptor attaches the key and, when grpc-go has given up on a
//     keyed call whose outcome is unknown, resolves it within the call's
//     deadline.
//   - policy.OwnerMesh and policy.OwnerNone: it attaches the key and
//     sends nothing more.
//
// Every call declares the channel's owner (RetryOwnerHeader) and, with
// policy.OwnerApplication, each attempt its number (AttemptHeader), so
// that the kit's server can tell which layer retried it.
//
// For the application and service-config owners a keyed call returns its
// result (original or replayed) or an error with a definite keyed.CallInfo;
// only when the deadline (or the resolve window) ends before its outcome
// could be learned does it return ReasonCallOutcomeUnknown, with the key.
//
// A keyed method whose request message has an AIP-155 request_id (see
// keyedproto.RequestIDField): a request_id the caller set is the call's
// key when the caller chose none (WithKey); an empty one is filled with
// the call's key (a random UUID when the interceptor generates it) in a
// copy of the request, so that the caller's message never changes and
// every attempt and resolve sends the same request_id.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if isResolve(ctx) {
			// An application's own resolve request (Resolve): pass it on.
			c.c.Resolves.Add(1)
			key := keyOf(ctx)
			ctx, span := c.obs.resolving(ctx, method, key)
			var trl metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trl))...)
			c.obs.resolved(ctx, span, method, key, err, trl)
			return err
		}
		c.c.Calls.Add(1)
		p := c.policyOf(method)
		ctx = c.declare(ctx, cc)
		ctx, key, req := c.withKeyFor(ctx, p, req)
		call := &unaryCall{c: c, ctx: ctx, key: key, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
		err := call.run(p)
		c.obs.callDone(ctx, cc, method, &call.stats, err)
		return err
	}
}
