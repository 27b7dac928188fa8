package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/outcomes"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

func kv(k, v string) attribute.KeyValue { return attribute.String(k, v) }

// depositMethod is A96's grpc.method of Deposit: the full method without
// its slash.
var depositMethod = strings.TrimPrefix(walletpb.DepositMethod, "/")

// TestObservedCalls runs, on every database, a herd of 16 raw calls with
// one key, a key reuse, a call without a key, a call whose answer is lost
// (the client resolves it), a call that fails before it is sent (the
// client retries it), a resolve of a key never used, a retry the budget
// refuses and grpc-go's own retry on a service-config channel, with the
// server, its runner, the ledger and the clients recording into the SDK.
// The counters equal what the callers saw, the spans nest under the
// callers', and no raw key appears in any log line, attribute or span.
func TestObservedCalls(t *testing.T) {
	t.Parallel()
	testdb.ForEachTarget(t, 8, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		m, sp, logs := otelread.NewMetrics(), otelread.NewSpans(), otelread.NewLogs()
		db := tg.Open(t, 8)
		table, biz := newTables(t, db, tg.Dialect)
		store, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithMeterProvider(m.Provider), ledger.WithTracerProvider(sp.Provider))
		if err != nil {
			t.Fatal(err)
		}
		// In front of the kit's interceptor: the caller's span, as a gRPC
		// tracing interceptor would start it, and one UNAVAILABLE refusal
		// for the reference "sc-retry" (for grpc-go's own retry).
		var scRefused atomic.Bool
		front := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			ctx, span := sp.Provider.Tracer("test").Start(ctx, "rpc-server")
			defer span.End()
			if r, ok := req.(*walletpb.DepositRequest); ok && r.GetReference() == "sc-retry" && scRefused.CompareAndSwap(false, true) {
				return nil, grpcint.NotExecuted(codes.Unavailable, "not now")
			}
			return handler(ctx, req)
		}
		e := serveLedger(t, db, store, biz, front, keyed.WithLockWait(2*time.Second),
			keyed.WithMeterProvider(m.Provider), keyed.WithTracerProvider(sp.Provider), keyed.WithLogger(logs.Logger))
		var keys []string
		newKey := func() string { k := keyed.NewKey(); keys = append(keys, k); return k }

		// The herd, through a raw connection.
		herdKey := newKey()
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var trl metadata.MD
				_, err := e.pc.Deposit(as(ctx, "alice-secret", herdKey), deposit("herd", 100), grpc.Trailer(&trl))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && len(trl.Get(grpcint.ReplayedHeader)) > 0:
					seen["replayed"]++
				case err == nil:
					seen["executed"]++
				default:
					seen["refused "+grpcint.ReasonOf(err)]++
				}
			}()
		}
		wg.Wait()
		if seen["executed"] != 1 {
			t.Fatalf("herd: %v", seen)
		}
		// A key reuse and a call without a key.
		_, err = e.pc.Deposit(as(ctx, "alice-secret", herdKey), deposit("herd", 999))
		wantStatus(t, err, codes.FailedPrecondition, keyed.KeyReused.Row().Reason)
		seen["refused "+keyed.KeyReused.Row().Reason]++
		_, err = e.pc.Deposit(as(ctx, "alice-secret", ""), deposit("nokey", 1))
		wantStatus(t, err, codes.InvalidArgument, keyed.KeyMissing.Row().Reason)
		seen["refused "+keyed.KeyMissing.Row().Reason]++

		// A kit client whose transport loses the first answer of "lost"
		// and fails the first attempt of "unsent" before sending it.
		var lostOnce, unsentOnce atomic.Bool
		lossy := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r, _ := req.(*walletpb.DepositRequest)
			if r.GetReference() == "unsent" && unsentOnce.CompareAndSwap(false, true) {
				return status.Error(codes.Unavailable, "injected: not sent")
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil && r.GetReference() == "lost" && lostOnce.CompareAndSwap(false, true) {
				return status.Error(codes.Unavailable, "injected: answer lost")
			}
			return err
		}
		client, pc := lossyClient(t, e.addr, policy.OwnerApplication, lossy,
			keyed.WithBackoff(policy.Backoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond}),
			keyed.WithMeterProvider(m.Provider), keyed.WithTracerProvider(sp.Provider), keyed.WithLogger(logs.Logger))
		cctx, caller := sp.Provider.Tracer("test").Start(ctx, "caller")
		if _, err := pc.Deposit(as(cctx, "alice-secret", newKey()), deposit("lost", 5)); err != nil {
			t.Fatalf("lost answer: %v", err)
		}
		caller.End()
		if _, err := pc.Deposit(as(ctx, "alice-secret", newKey()), deposit("unsent", 6)); err != nil {
			t.Fatalf("unsent: %v", err)
		}
		// A resolve of a key that was never used: nothing committed.
		never := newKey()
		var reply walletpb.DepositReply
		err = grpcint.Resolve(as(ctx, "alice-secret", ""), clientConn(t, client, e.addr), walletpb.DepositMethod, never, deposit("x", 1), &reply)
		wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)

		// A budget with nothing in it refuses the retry of "unsent".
		empty, err := policy.NewBudget(policy.BudgetSettings{NoPercent: true, NoMinRetries: true})
		if err != nil {
			t.Fatal(err)
		}
		unsentOnce.Store(false)
		_, pcEmpty := lossyClient(t, e.addr, policy.OwnerApplication, lossy, keyed.WithBudget(empty),
			keyed.WithMeterProvider(m.Provider), keyed.WithLogger(logs.Logger))
		if _, err := pcEmpty.Deposit(as(ctx, "alice-secret", newKey()), deposit("unsent", 7)); grpcint.ReasonOf(err) != keyed.NotSent.Row().Reason {
			t.Fatalf("budget refusal: %v", err)
		}

		// grpc-go's own retry on a channel whose retries it owns.
		_, pcSC := lossyClient(t, e.addr, policy.OwnerServiceConfig, nil, keyed.WithMeterProvider(m.Provider))
		if _, err := pcSC.Deposit(as(ctx, "alice-secret", newKey()), deposit("sc-retry", 8)); err != nil {
			t.Fatalf("service-config retry: %v", err)
		}

		points, err := m.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		get := func(name string, match ...attribute.KeyValue) float64 { return otelread.Sum(points, name, match...) }
		// One vocabulary: the server's, the client's and the runner's
		// outcomes are names of keyed.Outcomes() (the runner's own failed
		// aside).
		for _, p := range points {
			o := p.Attr("opledger.outcome")
			if o == "" || strings.HasPrefix(p.Name, "opledger.ledger.") {
				continue
			}
			if _, ok := keyed.Named(o); !ok && !(o == outcomes.Failed && strings.HasPrefix(p.Name, "opledger.tx.")) {
				t.Errorf("%s carries the outcome %q, no name of keyed.Outcomes()", p.Name, o)
			}
		}
		// Server: the herd and the refusals as the callers saw them; the
		// kit client's four calls executed.
		for what, n := range seen {
			kind, reason, _ := strings.Cut(what, " ")
			match := []attribute.KeyValue{kv("opledger.method", walletpb.DepositMethod), kv("opledger.outcome.kind", kind)}
			if o, ok := keyed.OfReason(reason); ok {
				match = append(match, kv("opledger.outcome", o.String())) // the outcome's name beside its kind
			}
			if reason != "" {
				match = append(match, kv("opledger.reason", reason))
			}
			if got := get("opledger.server.calls", match...); what != "executed" && got != float64(n) {
				t.Errorf("opledger.server.calls %v = %v, callers saw %d (%v)", match, got, n, seen)
			}
		}
		if got := get("opledger.server.calls", kv("opledger.outcome", "executed")); got != 1+3 {
			t.Errorf("executed = %v, want 4 (the herd's, lost, unsent, sc-retry)", got)
		}
		if got := get("opledger.server.resolves", kv("opledger.outcome", "replayed"), kv("opledger.outcome.kind", "replayed")); got != 1 {
			t.Errorf("server resolves replayed = %v, want 1", got)
		}
		if got := get("opledger.server.resolves", kv("opledger.outcome", "operation-not-found"), kv("opledger.outcome.kind", "not-found"),
			kv("opledger.reason", keyed.NotFound.Row().Reason)); got != 1 {
			t.Errorf("server resolves operation-not-found = %v, want 1", got)
		}
		// Client: one vocabulary with the server's.
		if got := get("opledger.client.resolves", kv("opledger.outcome", "replayed"), kv("opledger.owner", "application")); got != 1 {
			t.Errorf("client resolves replayed = %v, want 1", got)
		}
		if got := get("opledger.client.resolves", kv("opledger.outcome", "operation-not-found")); got != 1 {
			t.Errorf("client resolves operation-not-found = %v, want 1", got)
		}
		// lost (its answer resolved), unsent, the empty budget's unsent
		// call; sc-retry on the channel grpc-go owns.
		for outcome, want := range map[string]float64{"replayed": 1, "executed": 1, "request-not-sent": 1} {
			if got := get("opledger.client.calls", kv("opledger.outcome", outcome), kv("opledger.owner", "application")); got != want {
				t.Errorf("client calls %s = %v, want %v", outcome, got, want)
			}
		}
		if got := get("opledger.client.calls", kv("opledger.outcome", "executed"), kv("opledger.owner", "service-config")); got != 1 {
			t.Errorf("client calls executed on the service-config channel = %v, want 1", got)
		}
		if got := get("opledger.client.budget.refusals", kv("opledger.method", walletpb.DepositMethod)); got != 1 {
			t.Errorf("budget refusals = %v, want 1", got)
		}
		// A96: "unsent" was retried once by the kit, "sc-retry" once by
		// grpc-go; "lost" had a resolve, which is no retry.
		// One method key: opledger.method, the full method, on every
		// instrument that names one; A96's histograms also carry A96's
		// grpc.method (without the slash), and nothing else does.
		for _, p := range points {
			gm, om := p.Attr("grpc.method"), p.Attr("opledger.method")
			switch {
			case p.Attr("rpc.method") != "":
				t.Errorf("%s carries rpc.method", p)
			case strings.HasPrefix(p.Name, "grpc.client.call.") && (gm == "" || om != "/"+gm):
				t.Errorf("%s: want grpc.method and opledger.method of one method", p)
			case !strings.HasPrefix(p.Name, "grpc.client.call.") && gm != "":
				t.Errorf("%s carries grpc.method", p)
			case p.Name != "opledger.client.budget.balance" && p.Name != "opledger.ledger.complete.duration" && om == "":
				t.Errorf("%s carries no opledger.method", p)
			}
		}
		retries := otelread.Select(points, "grpc.client.call.retries", kv("grpc.method", depositMethod), kv("opledger.method", walletpb.DepositMethod))
		if got := get("grpc.client.call.retries"); got != 2 || otelread.HistSum(points, "grpc.client.call.retries") != 2 ||
			len(retries) == 0 || retries[0].Attr("grpc.target") == "" {
			t.Errorf("grpc.client.call.retries: %v, want two calls with one retry each, with grpc.target", retries)
		}
		if got := get("grpc.client.call.retry_delay"); got != 4 {
			t.Errorf("grpc.client.call.retry_delay has %v calls, want 4 (lost, unsent twice, sc-retry)", got)
		}
		if d := otelread.HistSum(points, "grpc.client.call.retry_delay"); d < 0.02 {
			t.Errorf("retry delay %v s, want at least the backoff before the resolve (20 ms)", d)
		}
		balance := otelread.Select(points, "opledger.client.budget.balance", kv("opledger.owner", "application"))
		if len(balance) == 0 {
			t.Errorf("no budget balance gauge")
		}
		for _, p := range balance {
			if p.Value < 0 {
				t.Errorf("balance %v", p)
			}
		}

		// Spans: the server's keyed call under the caller's server span,
		// the runner's under it, the claim under that; the client's
		// resolve under the caller's span.
		spans := sp.Ended()
		ids := map[string]map[[8]byte]bool{}
		for _, s := range spans {
			if ids[s.Name] == nil {
				ids[s.Name] = map[[8]byte]bool{}
			}
			ids[s.Name][s.SpanContext.SpanID()] = true
		}
		under := func(child, parent string) int {
			n := 0
			for _, s := range spans {
				if s.Name == child && ids[parent][s.Parent.SpanID()] {
					n++
				}
			}
			return n
		}
		for _, s := range spans {
			if !strings.HasPrefix(s.Name, "opledger.") {
				continue
			}
			m := ""
			for _, a := range s.Attributes {
				switch a.Key {
				case "grpc.method", "rpc.method":
					t.Errorf("span %s carries %s", s.Name, a.Key)
				case "opledger.method":
					m = a.Value.AsString()
				}
			}
			if m != walletpb.DepositMethod && s.Name != "opledger.complete" {
				t.Errorf("span %s: opledger.method %q, want %s", s.Name, m, walletpb.DepositMethod)
			}
		}
		for _, c := range [][2]string{{"opledger.keyed_call", "rpc-server"}, {"opledger.tx", "opledger.keyed_call"},
			{"opledger.claim", "opledger.tx"}, {"opledger.resolve", "caller"}, {"opledger.resolve", "rpc-server"}} {
			if under(c[0], c[1]) == 0 {
				t.Errorf("no %s span under a %s span", c[0], c[1])
			}
		}

		// Logs: one event per refusal, resolve and budget exhaustion.
		for _, want := range []map[string]string{
			{"msg": "opledger: claim refused", "outcome": "idempotency-key-reused", "method": walletpb.DepositMethod},
			{"msg": "opledger: keyed call refused", "outcome": "idempotency-key-missing", "reason": keyed.KeyMissing.Row().Reason},
			{"msg": "opledger: resolve", "outcome": "replayed", "owner": "application"},
			{"msg": "opledger: resolve", "outcome": "operation-not-found", "owner": "application"},
			{"msg": "opledger: retry budget exhausted", "decision": "budget-exhausted", "method": walletpb.DepositMethod},
		} {
			if n := logs.Count(want); n != 1 {
				t.Errorf("%d events %v, want 1", n, want)
			}
		}
		// The server's and the client's events of one resolve name its
		// outcome alike.
		if n := logs.Count(map[string]string{"msg": "opledger: resolve", "outcome": "replayed"}); n != 2 {
			t.Errorf("%d resolve events with the outcome replayed, want 2 (the server's and the client's)", n)
		}
		all := logs.Text()
		for _, p := range points {
			all += p.String()
		}
		for _, s := range spans {
			for _, a := range s.Attributes {
				all += string(a.Key) + "=" + a.Value.Emit() + " "
			}
		}
		for _, k := range append(keys, "alice-secret") {
			if strings.Contains(all, k) {
				t.Errorf("%q appears in the logs, metrics or spans", k)
			}
		}
		if t.Failed() {
			t.Logf("log:\n%s", logs.Text())
			for _, p := range points {
				t.Log(p)
			}
		}
	})
}

// lossyClient is a kit client for owner whose channel runs inner (when
// not nil) between the kit's interceptor and the transport.
func lossyClient(t *testing.T, addr string, owner policy.RetryOwner, inner grpc.UnaryClientInterceptor, opts ...keyed.ClientOption) (*grpcint.Client, walletpb.WalletClient) {
	t.Helper()
	c := newKitClient(t, owner, opts...)
	return c, walletpb.NewWalletClient(dialKit(t, c, addr, inner))
}

func clientConn(t *testing.T, c *grpcint.Client, addr string) *grpc.ClientConn {
	t.Helper()
	return dialKit(t, c, addr, nil)
}

func newKitClient(t *testing.T, owner policy.RetryOwner, opts ...keyed.ClientOption) *grpcint.Client {
	t.Helper()
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	c, err := grpcint.NewClient(cat, owner, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dialKit dials addr with c's dial options and inner, when not nil,
// after the kit's interceptor.
func dialKit(t *testing.T, c *grpcint.Client, addr string, inner grpc.UnaryClientInterceptor) *grpc.ClientConn {
	t.Helper()
	dopts, err := c.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	if inner != nil {
		dopts = append(dopts, grpc.WithChainUnaryInterceptor(inner))
	}
	conn, err := grpc.NewClient(addr, append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestServerTelemetryOptionsNotTwice: the server gives its runners its
// own telemetry, so the same options in WithTxOptions are a
// configuration error, as for the lock-wait bound.
func TestServerTelemetryOptionsNotTwice(t *testing.T) {
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(sqlite.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []txmiddleware.Option{txmiddleware.WithLogger(nil), txmiddleware.WithMeterProvider(otelread.NewMetrics().Provider),
		txmiddleware.WithTracerProvider(otelread.NewSpans().Provider)} {
		_, err := grpcint.NewServer(new(sql.DB), store, cat, grpcint.CallerFromTrustedHeader("x"), keyed.WithTxOptions(o))
		if !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), "given twice") {
			t.Errorf("%v, want ErrInvalidConfig for an option given twice", err)
		}
	}
}
