package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// The scenario's transports.
const (
	TransportGRPC = "grpc"
	TransportHTTP = "http"
	// TransportConnect is connect-go's: package connectpay's Wire, given
	// as Scenario.Wire, serves it (the Connect protocol over HTTP/1.1 and
	// the gRPC protocol over h2c).
	TransportConnect = "connect"
)

// httpWire is the scenario over HTTP: the Transfer route behind the
// httpint middleware and the fault injector on a loopback port, called
// through HTTPClient (the application owns the retries).
type httpWire struct{ settings HTTPClientSettings }

type httpConn struct {
	srv    *http.Server
	served chan struct{}
	tr     *http.Transport
	mw     *httpint.Middleware
	client *HTTPClient
}

func (w httpWire) Start(_ context.Context, env WireEnv) (WireConn, error) {
	if env.Owner != policy.OwnerApplication {
		return nil, fmt.Errorf("payments: over HTTP the application owns the retries, not %s", env.Owner)
	}
	mw, err := httpint.NewFor(env.Transactions, httpint.CallerFromPrincipal(Principal), []string{TransferRoute},
		keyed.WithLockWait(env.LockWait))
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &httpConn{mw: mw, served: make(chan struct{}), tr: &http.Transport{MaxIdleConnsPerHost: 2 * env.Concurrency}}
	c.srv = &http.Server{Handler: env.Faults.HTTPMiddleware(env.Tokens.HTTPMiddleware(mw.Handler(env.Service.HTTPHandler()))),
		ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(lis); close(c.served) }()
	c.client = NewHTTPClient("http://"+lis.Addr().String(), env.Token, env.Faults.RoundTripper(c.tr), w.settings)
	return c, nil
}

func (c *httpConn) Transfer(ctx context.Context, key string, req *paymentspb.TransferRequest) (WireAnswer, error) {
	got, err := c.client.Transfer(ctx, key, TransferJSON{FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(),
		AmountCents: req.GetAmountCents(), Reference: req.GetReference()})
	if err != nil {
		return WireAnswer{}, err
	}
	return WireAnswer{Reply: got.reply()}, nil
}

func (c *httpConn) Resolve(ctx context.Context, key string) (*paymentspb.TransferReply, bool, error) {
	got, found, err := c.client.Resolve(ctx, key)
	if err != nil || !found {
		return nil, false, err
	}
	return got.reply(), true, nil
}

func (c *httpConn) Classify(err error) (string, bool) {
	var he *HTTPError
	if !errors.As(err, &he) {
		return err.Error(), false
	}
	return fmt.Sprintf("%d %s %s", he.Status, he.Outcome, he.Decision), he.Outcome != OutcomeUnknown
}

func (c *httpConn) Stats() WireStats {
	cs, ms := c.client.Stats(), c.mw.Stats()
	return WireStats{Attempts: cs.Attempts, Resolved: cs.Resolved, BudgetRefusals: cs.BudgetRefusals, Executed: ms.Executed, Replayed: ms.Replayed}
}

func (c *httpConn) Close() {
	c.srv.Close()
	<-c.served
	c.tr.CloseIdleConnections()
}

func (t TransferJSON) reply() *paymentspb.TransferReply {
	return &paymentspb.TransferReply{TransferId: t.TransferID, FromAccount: t.FromAccount, ToAccount: t.ToAccount,
		AmountCents: t.AmountCents, Reference: t.Reference}
}
