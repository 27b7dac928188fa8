package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/connectpay"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/answers"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// The run's transports (Settings.Transport, the command's --transport):
// the replicas serve, and the client calls, through grpc-go (grpcint) or
// connect-go (connectint).
const (
	GRPC    = payments.TransportGRPC
	Connect = payments.TransportConnect
)

// runClient is the run's client of the replicas, behind the kit's
// client: one budget, calls spread over the replicas' proxies.
type runClient interface {
	// transfer makes one logical call with key.
	transfer(ctx context.Context, i int, key string, req *paymentspb.TransferRequest) (payments.WireAnswer, error)
	// classify names a call's error (code, the kit's reason, why the
	// client stopped) and reports whether it was definite.
	classify(err error) (label string, definite bool)
	// resolve asks for key's stored outcome: found false when nothing was
	// committed (or a final error was recorded), an error when no answer
	// came (the outcome stays unknown).
	resolve(ctx context.Context, key string) (*paymentspb.TransferReply, bool, error)
	// stats are the kit client's counters.
	stats() (attempts, replayed, resolved int64)
	close()
}

// clientBudget is the run client's retry budget, on either transport.
func clientBudget() (*policy.Budget, error) {
	return policy.NewBudget(policy.BudgetSettings{TTL: 2 * time.Second, Percent: 10, MinRetriesPerSecond: 50})
}

// clientBackoff is the run client's backoff, on either transport.
var clientBackoff = policy.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}

// unanswered reports whether a resolve that failed with c got no answer
// (the outcome stays unknown), rather than a stored final error.
func unanswered(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// grpcClient is grpc-go's: round_robin over the replicas' proxies.
type grpcClient struct {
	client *grpcint.Client
	conn   *grpc.ClientConn
	pc     paymentspb.PaymentsClient
}

// newGRPCClient is the kit's grpc-go client of the replicas at addrs,
// with token as its bearer credential.
func newGRPCClient(owner policy.RetryOwner, addrs []string, token string) (runClient, error) {
	budget, err := clientBudget()
	if err != nil {
		return nil, err
	}
	cat, err := payments.Catalog()
	if err != nil {
		return nil, err
	}
	client, err := grpcint.NewClient(cat, owner, keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(),
		keyed.WithMaxAttempts(10), keyed.WithBackoff(clientBackoff))
	if err != nil {
		return nil, err
	}
	dopts, err := client.DialOptions()
	if err != nil {
		return nil, err
	}
	sc, err := roundRobinConfig(client)
	if err != nil {
		return nil, err
	}
	res := manual.NewBuilderWithScheme("opledger-chaos")
	state := resolver.State{}
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	res.InitialState(state)
	conn, err := grpc.NewClient(res.Scheme()+":///replicas", append(dopts, grpc.WithResolvers(res), grpc.WithChainUnaryInterceptor(answers.Interceptor),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(payments.BearerToken(token)), grpc.WithDefaultServiceConfig(sc),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}))...)
	if err != nil {
		return nil, err
	}
	return &grpcClient{client: client, conn: conn, pc: paymentspb.NewPaymentsClient(conn)}, nil
}

// roundRobinConfig returns the channel's service config with grpc-go's
// round_robin balancer: the kit's own (the retry policy of a
// service-config-owned channel) with loadBalancingConfig added.
func roundRobinConfig(c *grpcint.Client) (string, error) {
	js, err := c.ServiceConfigJSON()
	if err != nil {
		return "", err
	}
	cfg := map[string]any{}
	if js != "" {
		if err := json.Unmarshal([]byte(js), &cfg); err != nil {
			return "", err
		}
	}
	cfg["loadBalancingConfig"] = []any{map[string]any{"round_robin": map[string]any{}}}
	b, err := json.Marshal(cfg)
	return string(b), err
}

func (g *grpcClient) transfer(ctx context.Context, _ int, key string, req *paymentspb.TransferRequest) (payments.WireAnswer, error) {
	actx, tr := answers.With(grpcint.WithKey(ctx, key))
	reply, err := g.pc.Transfer(actx, req)
	a := payments.WireAnswer{Reply: reply}
	a.Resolved, a.Replayed = tr.Answer()
	return a, err
}

func (g *grpcClient) classify(err error) (string, bool) {
	ci, ok := grpcint.CallInfoOf(err)
	return grpcLabel(err), ok && ci.Reason != keyed.CallOutcomeUnknown.Row().Reason
}

// grpcLabel names a gRPC call's error: its code, the kit's reason and
// why the client stopped.
func grpcLabel(err error) string {
	ci, _ := grpcint.CallInfoOf(err)
	return strings.TrimSpace(status.Code(err).String() + " " + string(ci.Reason) + " " + ci.Decision)
}

func (g *grpcClient) resolve(ctx context.Context, key string) (*paymentspb.TransferReply, bool, error) {
	var stored paymentspb.TransferReply
	err := grpcint.Resolve(ctx, g.conn, paymentspb.TransferMethod, key, &paymentspb.TransferRequest{}, &stored)
	switch {
	case err == nil:
		return &stored, true, nil
	case grpcint.ReasonOf(err) == keyed.NotFound.Row().Reason:
		return nil, false, nil
	case unanswered(status.Code(err)):
		return nil, false, err
	}
	return nil, false, nil // a recorded final error: nothing committed
}

func (g *grpcClient) stats() (attempts, replayed, resolved int64) {
	st := g.client.Stats()
	return st.Attempts, st.Replayed, st.Resolved
}

func (g *grpcClient) close() { g.conn.Close() }

// connectClient is connect-go's: the logical calls alternate between
// the Connect protocol over HTTP/1.1 and the gRPC protocol over h2c, and
// every attempt (resolves included) goes to the next replica's proxy in
// turn.
type connectClient struct {
	client   *connectpay.Client
	resolves atomic.Uint64
}

// newConnectClient is the kit's connect-go client of the replicas at
// addrs, with token as its bearer credential.
func newConnectClient(owner policy.RetryOwner, addrs []string, token string) (runClient, error) {
	budget, err := clientBudget()
	if err != nil {
		return nil, err
	}
	client, err := connectpay.NewClient(connectpay.ClientConfig{BaseURL: "http://replicas", Token: token, Owner: owner,
		KitOptions: []keyed.ClientOption{keyed.WithBudget(budget), keyed.WithBudgetFundedBySuccess(),
			keyed.WithMaxAttempts(10), keyed.WithBackoff(clientBackoff)},
		RoundTripper: func(next http.RoundTripper) http.RoundTripper { return &roundRobin{next: next, addrs: addrs} }})
	if err != nil {
		return nil, err
	}
	return &connectClient{client: client}, nil
}

func (c *connectClient) transfer(ctx context.Context, i int, key string, req *paymentspb.TransferRequest) (payments.WireAnswer, error) {
	return c.client.Transfer(ctx, connectpay.Protocols[i%len(connectpay.Protocols)], key, req)
}

func (c *connectClient) classify(err error) (string, bool) {
	label, definite := connectpay.Classify(err)
	return strings.TrimSpace(label), definite
}

func (c *connectClient) resolve(ctx context.Context, key string) (*paymentspb.TransferReply, bool, error) {
	p := connectpay.Protocols[c.resolves.Add(1)%uint64(len(connectpay.Protocols))]
	reply, found, err := c.client.Resolve(ctx, p, key)
	if err != nil && !unanswered(codes.Code(connect.CodeOf(err))) {
		return nil, false, nil // a recorded final error: nothing committed
	}
	return reply, found, err
}

func (c *connectClient) stats() (attempts, replayed, resolved int64) {
	st := c.client.Kit().Stats()
	return st.Attempts, st.Replayed, st.Resolved
}

func (c *connectClient) close() { c.client.Close() }

// roundRobin sends each request to the next of addrs in turn: a client
// spreading its attempts over the replicas (what grpc-go's round_robin
// does for the gRPC client).
type roundRobin struct {
	next  http.RoundTripper
	addrs []string
	n     atomic.Uint64
}

func (rr *roundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(rr.addrs) == 0 {
		return nil, fmt.Errorf("opledger chaos: no replica to send %s to", r.URL.Path)
	}
	addr := rr.addrs[(rr.n.Add(1)-1)%uint64(len(rr.addrs))]
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = addr, addr
	return rr.next.RoundTrip(r)
}
