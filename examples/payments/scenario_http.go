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
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
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
func (sc Scenario) runHTTP(ctx context.Context, start time.Time, store *ledger.Store, svc *Service, faults *Faults) (Report, error) {
	if sc.Owner != policy.OwnerApplication {
		return Report{}, fmt.Errorf("payments: over HTTP the application owns the retries, not %s", sc.Owner)
	}
	mw, err := httpint.New(sc.DB, store, httpint.CallerFromTrustedHeader(CallerHeader), []string{TransferRoute},
		httpint.WithLockWait(sc.LockWait))
	if err != nil {
		return Report{}, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Report{}, err
	}
	srv := &http.Server{Handler: faults.HTTPMiddleware(mw.Handler(svc.HTTPHandler())),
		ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	defer func() { srv.Close(); <-served }()
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * sc.Concurrency}
	defer tr.CloseIdleConnections()
	client := NewHTTPClient("http://"+lis.Addr().String(), sc.Caller, faults.RoundTripper(tr), sc.HTTPClient)

	run := func(n int, prefix string) []callResult {
		out := make([]callResult, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, sc.Concurrency)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				t := TransferJSON{FromAccount: "acct-" + strconv.Itoa(i%17), ToAccount: "acct-" + strconv.Itoa(17+i%5),
					AmountCents: int64(100 + i), Reference: prefix + "-" + strconv.Itoa(i)}
				key := rand.Text() // 128 random bits, a fresh key per logical call
				cctx, cancel := context.WithTimeout(ctx, sc.CallTimeout)
				defer cancel()
				got, err := client.Transfer(cctx, key, t)
				out[i] = callResult{key: key, req: t.request(), err: err}
				if err == nil {
					out[i].reply = got.reply()
				}
			}()
		}
		wg.Wait()
		return out
	}

	rep := Report{Transport: TransportHTTP, Owner: sc.Owner, Calls: sc.Calls, OutageCalls: sc.OutageCalls}
	before := client.Stats()
	results := run(sc.Calls, sc.RefPrefix)
	mid := client.Stats()
	rep.Attempts = mid.Attempts - before.Attempts
	rep.Resolved = mid.Resolved - before.Resolved
	rep.BudgetRefusals = mid.BudgetRefusals - before.BudgetRefusals
	ms := mw.Stats()
	rep.Executed, rep.Replayed = ms.Executed, ms.Replayed
	rep.Faults = faults.Counts()

	var outage []callResult
	if sc.OutageCalls > 0 {
		if err := wait.Sleep(ctx, sc.OutagePause); err != nil {
			return rep, err
		}
		faults.SetOutage(true)
		o0 := client.Stats()
		outage = run(sc.OutageCalls, sc.RefPrefix+"-outage")
		o1 := client.Stats()
		faults.SetOutage(false)
		rep.OutageAttempts = o1.Attempts - o0.Attempts
		rep.BudgetRefusals += o1.BudgetRefusals - o0.BudgetRefusals
	}

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
	classify := func(err error) (string, bool) {
		var he *HTTPError
		if !errors.As(err, &he) {
			return err.Error(), false
		}
		return fmt.Sprintf("%d %s %s", he.Status, he.Outcome, he.Decision), he.Outcome != OutcomeUnknown
	}
	if err := rep.check(ctx, sc, results, outage, resolve, classify); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func (t TransferJSON) request() *paymentspb.TransferRequest {
	return &paymentspb.TransferRequest{FromAccount: t.FromAccount, ToAccount: t.ToAccount, AmountCents: t.AmountCents, Reference: t.Reference}
}

func (t TransferJSON) reply() *paymentspb.TransferReply {
	return &paymentspb.TransferReply{TransferId: t.TransferID, FromAccount: t.FromAccount, ToAccount: t.ToAccount,
		AmountCents: t.AmountCents, Reference: t.Reference}
}
