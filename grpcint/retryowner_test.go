package grpcint_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// retriesServiceConfig retries UNAVAILABLE on every Wallet method: what
// a service config of a channel's own (or one from its resolver) does.
const retriesServiceConfig = `{"methodConfig":[{"name":[{"service":"opledger.testkit.wallet.v1.Wallet"}],` +
	`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

const retriesByLayer = "opledger.server.retries_by_layer"

// failFirstFront fails the first attempt of every Deposit whose
// reference starts with "fail-first", before the kit's interceptor, as a
// server that was briefly unavailable.
func failFirstFront() grpc.UnaryServerInterceptor {
	var failed sync.Map
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*walletpb.DepositRequest); ok && strings.HasPrefix(r.GetReference(), "fail-first") {
			if _, seen := failed.LoadOrStore(r.GetReference(), true); !seen {
				return nil, grpcint.NotExecuted(codes.Unavailable, "injected: not now")
			}
		}
		return handler(ctx, req)
	}
}

// retryPoints returns retries_by_layer's points as "layer second owner" →
// value, for Deposit.
func retryPoints(t *testing.T, m *otelread.Metrics) map[string]float64 {
	t.Helper()
	points, err := m.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, p := range otelread.Select(points, retriesByLayer, attribute.String("opledger.method", walletpb.DepositMethod)) {
		out[p.Attr("opledger.retry.layer")+" "+p.Attr("opledger.retry.second_owner")+" "+p.Attr("opledger.owner")] += p.Value
	}
	return out
}

func wantPoints(t *testing.T, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("retries_by_layer %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("retries_by_layer %v, want %v", got, want)
		}
	}
}

// TestRetryOwnerAtRunTime: the server reads who retried each call and
// reports a layer that is not the channel's owner. With the owner
// correctly declared (grpc-go's service config, the mesh, the kit's own
// loop) it counts the retries as the owner's and logs nothing; grpc-go's
// retries under a client that declares application, and a mesh's attempt
// count under it, are second owners, logged once per method and layer; a
// call whose client declares nothing is judged against WithRetryOwner.
func TestRetryOwnerAtRunTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	tg := testdb.Targets()[0]
	m, logs := otelread.NewMetrics(), otelread.NewLogs()
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	e := serveLedger(t, db, store, biz, failFirstFront(), keyed.WithRetryOwner(policy.OwnerServiceConfig),
		keyed.WithMeterProvider(m.Provider), keyed.WithLogger(logs.Logger))
	envoy := func(ctx context.Context, n string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, keyedcore.EnvoyAttemptCountHeader, n)
	}
	// call makes a call and checks the answer's trailer naming the
	// second owners (want: its value, "" for none).
	call := func(pc walletpb.WalletClient, ctx context.Context, ref string, want ...string) {
		t.Helper()
		var tr metadata.MD
		if _, err := pc.Deposit(as(ctx, "alice", keyed.NewKey()), deposit(ref, 1), grpc.Trailer(&tr)); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if got := strings.Join(tr.Get(keyedcore.SecondOwnerHeader), ","); got != strings.Join(want, ",") {
			t.Errorf("%s: trailer %s %q, want %q", ref, keyedcore.SecondOwnerHeader, got, want)
		}
	}

	// Owners correctly declared: counted, never a second owner.
	_, sc := ownerClient(t, e.addr, policy.OwnerServiceConfig)
	call(sc, ctx, "fail-first-sc") // grpc-go retries as the generated service config says
	_, mesh := ownerClient(t, e.addr, policy.OwnerMesh)
	call(mesh, envoy(ctx, "2"), "mesh")
	_, app := ownerClient(t, e.addr, policy.OwnerApplication, keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
	call(app, ctx, "fail-first-app") // the kit's own loop retries
	call(app, envoy(ctx, "1"), "first")
	wantPoints(t, retryPoints(t, m), map[string]float64{
		"service-config false service-config": 1, "mesh false mesh": 1, "application false application": 1})
	if n := logs.Count(map[string]string{"msg": "opledger: second retry owner"}); n != 0 {
		t.Fatalf("%d second-owner events with every owner declared:\n%s", n, logs.Text())
	}

	// grpc-go's retries under a client that declares application (a
	// channel built with the kit's interceptor but not its DialOptions).
	kit := newKitClient(t, policy.OwnerApplication)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(kit.UnaryClientInterceptor()), grpc.WithDefaultServiceConfig(retriesServiceConfig))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	twice := walletpb.NewWalletClient(conn)
	call(twice, ctx, "fail-first-1", "service-config")
	call(twice, ctx, "fail-first-2", "service-config")
	// A mesh retry under the owner application, and under no declaration
	// (a client that is not the kit's: the server's owner, service-config).
	call(app, envoy(ctx, "2"), "envoy", "mesh")
	call(e.pc, envoy(ctx, "3"), "undeclared", "mesh")
	// A refusal (no key) names the second owner in its trailer too.
	var tr metadata.MD
	rctx := metadata.AppendToOutgoingContext(as(ctx, "alice", ""), keyedcore.RetryOwnerHeader, "application", keyedcore.EnvoyAttemptCountHeader, "2")
	if _, err := e.pc.Deposit(rctx, deposit("no-key", 1), grpc.Trailer(&tr)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no key: %v", err)
	}
	if got := strings.Join(tr.Get(keyedcore.SecondOwnerHeader), ","); got != "mesh" {
		t.Errorf("a refusal's trailer %s %q, want mesh", keyedcore.SecondOwnerHeader, got)
	}
	wantPoints(t, retryPoints(t, m), map[string]float64{
		"service-config false service-config": 1, "mesh false mesh": 1, "application false application": 1,
		"service-config true application": 2, "mesh true application": 2, "mesh true service-config": 1})

	// One event per method and layer: the second grpc-go retry and the
	// undeclared mesh retry are counted, not logged again.
	events := logs.Events()
	var got []string
	for _, ev := range events {
		if ev["msg"] == "opledger: second retry owner" {
			got = append(got, ev["level"].(string)+" "+ev["method"].(string)+" "+ev["layer"].(string)+" owner "+ev["owner"].(string)+
				" from "+ev["owner_from"].(string)+" "+ev["header"].(string))
		}
	}
	want := []string{
		"WARN " + walletpb.DepositMethod + " service-config owner application from declared grpc-previous-rpc-attempts",
		"WARN " + walletpb.DepositMethod + " mesh owner application from declared x-envoy-attempt-count",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("second-owner events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := e.rows(t, "fail-first-1") + e.rows(t, "fail-first-sc") + e.rows(t, "fail-first-app"); n != 3 {
		t.Fatalf("%d business rows for 3 calls", n)
	}
}

// TestRetryOwnerDeclared: the client interceptor declares the channel's
// owner on every call, ";xds" on an xds:/// target, and numbers the
// attempts of its own loop.
func TestRetryOwnerDeclared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		owner   policy.RetryOwner
		target  string
		want    string
		attempt []string
	}{
		{policy.OwnerApplication, "dns:///payments:443", "application", []string{"1"}},
		{policy.OwnerServiceConfig, "payments:443", "service-config", nil},
		{policy.OwnerMesh, "xds:///payments", "mesh;xds", nil},
		{policy.OwnerNone, "XDS:///payments", "none;xds", nil},
	} {
		c := newKitClient(t, tc.owner)
		cc, err := grpc.NewClient(tc.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		var md metadata.MD
		invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			md, _ = metadata.FromOutgoingContext(ctx)
			return nil
		}
		if err := c.UnaryClientInterceptor()(ctx, walletpb.GetDepositMethod, &walletpb.GetDepositRequest{}, &walletpb.DepositReply{}, cc, invoker); err != nil {
			t.Fatal(err)
		}
		cc.Close()
		if got := md.Get(keyedcore.RetryOwnerHeader); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s on %s: declared %q, want %q", tc.owner, tc.target, got, tc.want)
		}
		if got := md.Get(keyedcore.AttemptHeader); strings.Join(got, ",") != strings.Join(tc.attempt, ",") {
			t.Errorf("%s: attempt header %q, want %q", tc.owner, got, tc.attempt)
		}
	}
}
