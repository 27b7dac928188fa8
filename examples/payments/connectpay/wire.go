package connectpay

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
)

// Wire runs payments.Scenario over connect-go (Scenario.Transport
// payments.TransportConnect, Scenario.Wire a Wire): the Payments service
// behind connectint's server interceptor, with ServerFaults and
// Authenticate in front of it, on one loopback port that speaks HTTP/1.1
// and h2c; and a Client whose logical calls (and resolves) alternate
// between the Connect protocol over HTTP/1.1 and the gRPC protocol over
// h2c, each attempt through the scenario's client-side faults. A call
// made on one protocol and sent again on the other replays: both reach
// one ledger identity.
type Wire struct {
	// ServerOptions are added to the kit server's options (after the
	// scenario's lock wait).
	ServerOptions []keyed.ServerOption
	// ClientOptions are the kit client's options.
	ClientOptions []keyed.ClientOption
	// Protocols are the protocols the calls alternate between (default
	// Protocols: both).
	Protocols []Protocol
}

// Start serves env's service and dials it; see Wire.
func (w Wire) Start(_ context.Context, env payments.WireEnv) (payments.WireConn, error) {
	kit, err := connectint.NewServerFor(env.Transactions, env.Catalog, connectint.CallerFromPrincipal(payments.Principal),
		append([]keyed.ServerOption{keyed.WithLockWait(env.LockWait)}, w.ServerOptions...)...)
	if err != nil {
		return nil, err
	}
	path, h := NewHandler(env.Service, connect.WithInterceptors(ServerFaults(env.Faults), Authenticate(env.Tokens), kit.Interceptor()))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &conn{server: kit, srv: NewHTTPServer(mux), served: make(chan struct{}), protocols: w.Protocols}
	if len(c.protocols) == 0 {
		c.protocols = Protocols
	}
	go func() { _ = c.srv.Serve(lis); close(c.served) }()
	c.client, err = NewClient(ClientConfig{BaseURL: "http://" + lis.Addr().String(), Token: env.Token, Owner: env.Owner,
		KitOptions: w.ClientOptions, RoundTripper: env.Faults.RoundTripper, MaxIdleConnsPerHost: 2 * env.Concurrency})
	if err != nil {
		c.srv.Close()
		<-c.served
		return nil, err
	}
	return c, nil
}

// conn is a started Wire.
type conn struct {
	server    *connectint.Server
	srv       *http.Server
	served    chan struct{}
	client    *Client
	protocols []Protocol
	next      atomic.Uint64
}

// protocol returns the protocol of the next call.
func (c *conn) protocol() Protocol {
	return c.protocols[(c.next.Add(1)-1)%uint64(len(c.protocols))]
}

func (c *conn) Transfer(ctx context.Context, key string, req *paymentspb.TransferRequest) (payments.WireAnswer, error) {
	return c.client.Transfer(ctx, c.protocol(), key, req)
}

func (c *conn) Resolve(ctx context.Context, key string) (*paymentspb.TransferReply, bool, error) {
	return c.client.Resolve(ctx, c.protocol(), key)
}

func (c *conn) Classify(err error) (string, bool) { return Classify(err) }

func (c *conn) Stats() payments.WireStats {
	cs, ss := c.client.Kit().Stats(), c.server.Stats()
	return payments.WireStats{Attempts: cs.Attempts, Resolved: cs.Resolved, BudgetRefusals: cs.BudgetRefusals,
		Executed: ss.Executed, Replayed: ss.Replayed}
}

func (c *conn) Close() {
	c.srv.Close()
	<-c.served
	c.client.Close()
}
