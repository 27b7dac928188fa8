package payments

import (
	"context"
	"crypto/rand"
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
)

// runHTTP is Run over HTTP: the Transfer route behind the httpint
// middleware and the fault injector on a loopback port, called through
// HTTPClient (the application owns the retries), then the same checks.
//
// tokens authenticates the requests, token is the client's.
func (sc Scenario) runHTTP(ctx context.Context, start time.Time, txs keyed.Transactions, svc *Service, faults *Faults, tokens *Tokens, token string) (Report, error) {
	if sc.Owner != policy.OwnerApplication {
		return Report{}, fmt.Errorf("payments: over HTTP the application owns the retries, not %s", sc.Owner)
	}
	mw, err := httpint.NewFor(txs, httpint.CallerFromPrincipal(Principal), []string{TransferRoute},
		httpint.WithLockWait(sc.LockWait))
	if err != nil {
		return Report{}, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, err
	}
	srv := &http.Server{Handler: faults.HTTPMiddleware(tokens.HTTPMiddleware(mw.Handler(svc.HTTPHandler()))),
		ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	defer func() { srv.Close(); <-served }()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * sc.Concurrency}
	defer tr.CloseIdleConnections()
	client := NewHTTPClient("http://"+lis.Addr().String(), token, faults.RoundTripper(tr), sc.HTTPClient)

	rep := Report{Transport: TransportHTTP, Owner: sc.Owner, Calls: sc.Calls, OutageCalls: sc.OutageCalls}
	counts := func() clientCounts {
		st := client.Stats()
		return clientCounts{st.Attempts, st.Resolved, st.BudgetRefusals}
	}
	classify := func(err error) (string, bool) {
		var he *HTTPError
		if !errors.As(err, &he) {
			return err.Error(), false
		}
		return fmt.Sprintf("%d %s %s", he.Status, he.Outcome, he.Decision), he.Outcome != OutcomeUnknown
	}
	results, outage, err := sc.phases(ctx, &rep, faults, counts, classify, func(i int, prefix string) callResult {
		req := transferRequest(i, prefix)
		key := rand.Text() // 128 random bits, a fresh key per logical call
		cctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
		defer cancel()
		got, err := client.Transfer(cctx, key, TransferJSON{FromAccount: req.GetFromAccount(), ToAccount: req.GetToAccount(),
			AmountCents: req.GetAmountCents(), Reference: req.GetReference()})
		r := callResult{key: key, req: req, err: err}
		if err == nil {
			r.reply = got.reply()
		}
		return r
	})
	if err != nil {
		return rep, err
	}
	ms := mw.Stats()
	rep.Executed, rep.Replayed = ms.Executed, ms.Replayed

	faults.SetEnabled(false)
	resolve := func(r callResult) (*paymentspb.TransferReply, bool, error) {
		rctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
		defer cancel()
		got, found, err := client.Resolve(rctx, r.key)
		if err != nil || !found {
			return nil, false, err
		}
		return got.reply(), true, nil
	}
	if err := rep.check(ctx, sc, results, outage, resolve, classify); err != nil {
		return rep, err
	}
	rows, err := countRows(ctx, sc.DB, sc.Dialect, sc.BusinessTable)
	if err != nil {
		return rep, err
	}
	again := func(ctx context.Context, r callResult) (*paymentspb.TransferReply, error) {
		got, err := client.Transfer(ctx, r.key, TransferJSON{FromAccount: r.req.GetFromAccount(), ToAccount: r.req.GetToAccount(),
			AmountCents: r.req.GetAmountCents(), Reference: r.req.GetReference()})
		if err != nil {
			return nil, err
		}
		return got.reply(), nil
	}
	counted := func() (int64, int64) { st := mw.Stats(); return st.Executed, st.Replayed }
	if err := sc.resend(ctx, results, rows, &rep, again, counted); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func (t TransferJSON) reply() *paymentspb.TransferReply {
	return &paymentspb.TransferReply{TransferId: t.TransferID, FromAccount: t.FromAccount, ToAccount: t.ToAccount,
		AmountCents: t.AmountCents, Reference: t.Reference}
}
