package connectint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// loseHeader asks the test server's front interceptor to lose the answer
// after the kit's interceptor committed it (set by lossy, never by the
// kit).
const loseHeader = "X-Test-Lose"

// losses counts the answers lost at each place.
type losses struct{ server, headers, response atomic.Int64 }

// lossy is an http.RoundTripper that loses 30% of the keyed calls'
// answers after the server committed, a third at each of three places: on
// the server before the response is written (it asks the server to), in
// the client once the response headers are in, and in the client after
// the whole response. Its choices come from a seeded generator.
type lossy struct {
	base http.RoundTripper
	mu   sync.Mutex
	rng  *rand.Rand
	n    *losses
}

func (l *lossy) pick() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rng.Float64() >= 0.3 {
		return 0
	}
	return 1 + l.rng.IntN(3)
}

func (l *lossy) RoundTrip(req *http.Request) (*http.Response, error) {
	where := 0
	if req.URL.Path == walletpb.DepositMethod {
		where = l.pick()
	}
	if where == 1 {
		req = req.Clone(req.Context())
		req.Header.Set(loseHeader, "1")
	}
	resp, err := l.base.RoundTrip(req)
	if err != nil || where < 2 {
		return resp, err
	}
	if where == 3 {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if where == 2 {
		l.n.headers.Add(1)
		return nil, errors.New("injected: answer lost after the response headers")
	}
	l.n.response.Add(1)
	return nil, errors.New("injected: answer lost after the whole response")
}

// loseOnServer is the server's front interceptor: it loses the answer of
// a call that asks for it once the kit's interceptor committed it.
func loseOnServer(n *losses) connect.HandlerOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil && req.Header().Get(loseHeader) != "" {
				n.server.Add(1)
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: answer lost on the server after commit"))
			}
			return resp, err
		}
	}))
}

// TestDefiniteOutcomes is docs/grpc.md's end-to-end run for connect: 2,000
// keyed Deposits per protocol (Connect over HTTP/1.1, gRPC over h2c),
// 30% of the answers lost after commit at three places, through the kit's
// client on SQLite and PostgreSQL (pgx), claim first; 500 per protocol on
// MariaDB and claim at commit everywhere. Every call returns
// OK (each committed, with a deadline that leaves room to resolve), with
// exactly one business row whose id is the reply's: 0 duplicates, 0
// losses, 0 ambiguous returns.
func TestDefiniteOutcomes(t *testing.T) {
	calls := 2000
	if testing.Short() {
		calls = 200
	}
	testdb.ForEachParallel(t, 8, func(t *testing.T, te *testdb.Env) {
		if te.Name == "postgres/pq" {
			t.Skip("lib/pq: the end-to-end run is on SQLite, MariaDB and PostgreSQL through pgx")
		}
		for _, atCommit := range []bool{false, true} {
			order := "claim-first"
			if atCommit {
				order = "claim-at-commit"
			}
			n := calls
			if atCommit || te.Name == "mysql" {
				n = min(calls, 500)
			}
			for _, p := range []string{"connect", "grpc"} {
				t.Run(order+"/"+p, func(t *testing.T) { definite(t, te, p, atCommit, n) })
			}
		}
	}, "sqlite", "postgres", "mysql")
}

func definite(t *testing.T, te *testdb.Env, protocol string, atCommit bool, calls int) {
	ctx := context.Background()
	biz := te.Table + "_" + protocol
	if atCommit {
		biz += "_c"
	}
	if err := wallet.CreateTable(ctx, te.DB, te.Dialect, biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wallet.DropTable(ctx, te.DB, te.Dialect, biz) })
	svc, err := wallet.NewService(te.DB, te.Dialect, biz)
	if err != nil {
		t.Fatal(err)
	}
	opts := []keyed.ServerOption{keyed.WithInProgressPushback(5 * time.Millisecond)}
	if atCommit {
		opts = append(opts, keyed.WithClaimAtCommit(walletpb.DepositMethod))
	}
	s, err := connectint.NewServer(te.DB, newStore(t, te), catalog(t), connectint.CallerFromTrustedHeader(callerHeader), opts...)
	if err != nil {
		t.Fatal(err)
	}
	n := &losses{}
	mux := http.NewServeMux()
	mux.Handle(walletpb.DepositMethod, connect.NewUnaryHandler(walletpb.DepositMethod, connectDeposit(svc),
		loseOnServer(n), connect.WithInterceptors(s.Interceptor())))
	url := serveHTTP(t, mux)
	h1, h2 := httpClients(t)
	seed := uint64(len(protocol)) // reproducible per protocol
	lossy1 := &http.Client{Transport: &lossy{base: h1.Transport, rng: rand.New(rand.NewPCG(seed, 1)), n: n}}
	lossy2 := &http.Client{Transport: &lossy{base: h2.Transport, rng: rand.New(rand.NewPCG(seed, 2)), n: n}}
	budget, err := policy.NewBudget(policy.BudgetSettings{Percent: 2})
	if err != nil {
		t.Fatal(err)
	}
	kit, err := connectint.NewClient(catalog(t), policy.OwnerApplication, keyed.WithBudget(budget),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	c := depositClient(url, lossy1, lossy2, protocol, kit.ClientOptions()...)

	const workers = 16
	replies := make([]*walletpb.DepositReply, calls)
	errs := make([]error, calls)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // room to resolve; a hang guard
				resp, err := c.CallUnary(cctx, request("alice", "", fmt.Sprintf("e2e-%d", i), int64(i+1)))
				cancel()
				if err == nil {
					replies[i] = resp.Msg
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()

	rows := map[string][]int64{}
	q, err := te.DB.QueryContext(ctx, "SELECT reference, id FROM "+te.Dialect.QuoteIdent(biz))
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var ref string
		var id int64
		if err := q.Scan(&ref, &id); err != nil {
			t.Fatal(err)
		}
		rows[ref] = append(rows[ref], id)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	var duplicates, lost, ambiguous, failed int
	for i := range calls {
		ref := fmt.Sprintf("e2e-%d", i)
		ids := rows[ref]
		if len(ids) > 1 {
			duplicates++
		}
		if errs[i] != nil {
			failed++
			if ci, _ := connectint.CallInfoOf(errs[i]); ci.Outcome == keyed.CallOutcomeUnknown {
				ambiguous++
			}
			if failed <= 3 {
				t.Errorf("call %d: %v", i, errs[i])
			}
			continue
		}
		if len(ids) != 1 || replies[i].GetDepositId() != ids[0] || replies[i].GetReference() != ref {
			lost++
		}
	}
	total := n.server.Load() + n.headers.Load() + n.response.Load()
	if duplicates != 0 || lost != 0 || ambiguous != 0 || failed != 0 || len(rows) != calls {
		t.Errorf("%d calls: %d duplicates, %d lost, %d ambiguous, %d failed, %d references written; want 0, 0, 0, 0, %d", calls, duplicates, lost, ambiguous, failed, len(rows), calls)
	}
	for where, k := range map[string]int64{"on the server": n.server.Load(), "after the headers": n.headers.Load(), "after the response": n.response.Load()} {
		if k < int64(calls)/20 {
			t.Errorf("only %d answers lost %s", k, where)
		}
	}
	st := kit.Stats()
	if st.Resolved == 0 || st.Ambiguous != 0 {
		t.Errorf("client %+v: want resolved calls, none ambiguous", st)
	}
	t.Logf("%s over %s (at commit %v): %d calls, %d answers lost (server %d, after headers %d, after response %d); client %+v; server %+v",
		protocol, te.Name, atCommit, calls, total, n.server.Load(), n.headers.Load(), n.response.Load(), st, s.Stats())
}
