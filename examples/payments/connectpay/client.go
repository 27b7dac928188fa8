package connectpay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Protocol is a wire protocol of connect-go's that the example's client
// speaks.
type Protocol string

const (
	// ProtocolConnect is the Connect protocol over HTTP/1.1.
	ProtocolConnect Protocol = "connect"
	// ProtocolGRPC is the gRPC protocol over h2c (HTTP/2 without TLS).
	ProtocolGRPC Protocol = "grpc"
)

// Protocols are the protocols a Client speaks, in the order Wire
// alternates them.
var Protocols = []Protocol{ProtocolConnect, ProtocolGRPC}

// ClientConfig configures NewClient.
type ClientConfig struct {
	// BaseURL is the server's ("http://127.0.0.1:8080").
	BaseURL string
	// Token is the bearer token the client presents on every request.
	Token string
	// Owner is the retry owner of the client (default
	// policy.OwnerApplication; connect-go has no service config).
	Owner policy.RetryOwner
	// KitOptions are the kit client's options: budget, backoff, attempts.
	KitOptions []keyed.ClientOption
	// RoundTripper, when not nil, wraps each protocol's HTTP transport:
	// every attempt, resolve requests included, goes through what it
	// returns (the scenario's client-side faults, a spread over
	// replicas).
	RoundTripper func(http.RoundTripper) http.RoundTripper
	// MaxIdleConnsPerHost is the HTTP/1.1 transport's (default 64).
	MaxIdleConnsPerHost int
}

// Client is the example's client over connect-go: a Transfer client on
// each Protocol, both behind one kit client interceptor (one budget, one
// set of counters) that owns their retries. It is safe for concurrent
// use.
type Client struct {
	kit     *connectint.Client
	t1, t2  *http.Transport
	clients map[Protocol]*connect.Client[paymentspb.TransferRequest, paymentspb.TransferReply]
}

// NewClient returns the client of the Payments service at cfg.BaseURL.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("connectpay: the client needs the server's base URL")
	}
	if cfg.Owner == 0 {
		cfg.Owner = policy.OwnerApplication
	}
	if cfg.MaxIdleConnsPerHost <= 0 {
		cfg.MaxIdleConnsPerHost = 64
	}
	cat, err := payments.Catalog()
	if err != nil {
		return nil, err
	}
	kit, err := connectint.NewClient(cat, cfg.Owner, cfg.KitOptions...)
	if err != nil {
		return nil, err
	}
	c := &Client{kit: kit, clients: map[Protocol]*connect.Client[paymentspb.TransferRequest, paymentspb.TransferReply]{}}
	c.t1 = &http.Transport{DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost}
	c.t2 = &http.Transport{DialContext: (&net.Dialer{}).DialContext}
	c.t2.Protocols = new(http.Protocols)
	c.t2.Protocols.SetUnencryptedHTTP2(true)
	wrap := func(t *http.Transport) *http.Client {
		if cfg.RoundTripper == nil {
			return &http.Client{Transport: t}
		}
		return &http.Client{Transport: cfg.RoundTripper(t)}
	}
	// The token outermost, the kit's interceptor next, and below it, on
	// each attempt, where the answer came from.
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(cfg.Token), kit.Interceptor(), traceInterceptor())}
	c.clients[ProtocolConnect] = connect.NewClient[paymentspb.TransferRequest, paymentspb.TransferReply](wrap(c.t1),
		cfg.BaseURL+paymentspb.TransferMethod, opts...)
	c.clients[ProtocolGRPC] = connect.NewClient[paymentspb.TransferRequest, paymentspb.TransferReply](wrap(c.t2),
		cfg.BaseURL+paymentspb.TransferMethod, append(opts, connect.WithGRPC())...)
	return c, nil
}

// Kit returns the kit's client: its counters (Stats).
func (c *Client) Kit() *connectint.Client { return c.kit }

func (c *Client) transferClient(p Protocol) (*connect.Client[paymentspb.TransferRequest, paymentspb.TransferReply], error) {
	tc, ok := c.clients[p]
	if !ok {
		return nil, fmt.Errorf("connectpay: unknown protocol %q", p)
	}
	return tc, nil
}

// Transfer makes one logical Transfer over p with key ("" for one the
// kit's client makes up) through the kit's client interceptor.
func (c *Client) Transfer(ctx context.Context, p Protocol, key string, req *paymentspb.TransferRequest) (payments.WireAnswer, error) {
	tc, err := c.transferClient(p)
	if err != nil {
		return payments.WireAnswer{}, err
	}
	if key != "" {
		ctx = connectint.WithKey(ctx, key)
	}
	tr := &trace{}
	resp, err := tc.CallUnary(context.WithValue(ctx, traceKey{}, tr), connect.NewRequest(req))
	if err != nil {
		return payments.WireAnswer{}, err
	}
	resolved, replayed := tr.answer()
	return payments.WireAnswer{Reply: resp.Msg, Resolved: resolved, Replayed: replayed}, nil
}

// Resolve asks the server over p for the stored outcome of key
// (connectint.Resolve): the stored reply, found false when nothing was
// committed (OPERATION_NOT_FOUND), or the error: a stored final error,
// or the last failure.
func (c *Client) Resolve(ctx context.Context, p Protocol, key string) (*paymentspb.TransferReply, bool, error) {
	tc, err := c.transferClient(p)
	if err != nil {
		return nil, false, err
	}
	resp, err := connectint.Resolve(ctx, tc.CallUnary, key, connect.NewRequest(&paymentspb.TransferRequest{}))
	switch {
	case err == nil:
		return resp.Msg, true, nil
	case connectint.ReasonOf(err) == keyed.NotFound.Row().Reason:
		return nil, false, nil
	}
	return nil, false, err
}

// Classify names an error of Transfer (code, the kit's reason and why the
// client stopped) and reports whether it is definite: the client learned
// the call's outcome.
func Classify(err error) (string, bool) {
	ci, ok := connectint.CallInfoOf(err)
	return connect.CodeOf(err).String() + " " + ci.Reason + " " + ci.Decision, ok && ci.Outcome != keyed.CallOutcomeUnknown
}

// Close releases the client's idle connections.
func (c *Client) Close() {
	c.t1.CloseIdleConnections()
	c.t2.CloseIdleConnections()
}

// bearer sets "Authorization: Bearer <token>" on every request.
func bearer(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	})
}

// trace is where one logical call's answer came from, as the interceptor
// below the kit's saw its attempts.
type trace struct {
	mu                 sync.Mutex
	resolved, replayed bool
}

type traceKey struct{}

func (t *trace) answer() (resolved, replayed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.resolved, t.replayed
}

// traceInterceptor notes, for the trace in the call's context, whether
// its successful attempt was a resolve request or a replay (the server's
// replay marker).
func traceInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			t, ok := ctx.Value(traceKey{}).(*trace)
			if !ok || !req.Spec().IsClient {
				return next(ctx, req)
			}
			resolve := req.Header().Get(connectint.ResolveHeader) != ""
			resp, err := next(ctx, req)
			if err == nil {
				marked := resp.Trailer().Get(connectint.ReplayedHeader) == "true" || resp.Header().Get(connectint.ReplayedHeader) == "true"
				t.mu.Lock()
				t.resolved, t.replayed = resolve, !resolve && marked
				t.mu.Unlock()
			}
			return resp, err
		}
	})
}
