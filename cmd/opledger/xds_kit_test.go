package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

const xdsCaller = "x-test-caller"

// lossyFront sits in front of the kit's server interceptor: for a
// Transfer whose reference is "loseN-…" it runs the call (the kit claims,
// the handler writes, the transaction commits or replays) and then loses
// the answer of its first N attempts (UNAVAILABLE), as a server that
// committed and went away. It records each attempt's
// grpc-previous-rpc-attempts per reference.
type lossyFront struct {
	mu       sync.Mutex
	attempts map[string][]string
}

func (f *lossyFront) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r, ok := req.(*paymentspb.TransferRequest)
		if !ok {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		prev := ""
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) > 0 {
			prev = v[0]
		}
		f.mu.Lock()
		f.attempts[r.GetReference()] = append(f.attempts[r.GetReference()], prev)
		n := len(f.attempts[r.GetReference()])
		f.mu.Unlock()
		resp, err := handler(ctx, req)
		var lose int
		if rest, ok := strings.CutPrefix(r.GetReference(), "lose"); ok && len(rest) > 0 {
			lose = int(rest[0] - '0')
		}
		if err == nil && n <= lose {
			return nil, status.Errorf(codes.Unavailable, "injected: answer of attempt %d lost after commit", n)
		}
		return resp, err
	}
}

func (f *lossyFront) seen(ref string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.attempts[ref]...)
}

// kitBackend serves the example payments service on tg behind the kit's
// server (grpcint.NewServer on a real ledger), with front in front of it.
func kitBackend(t *testing.T, tg testdb.Target, front grpc.UnaryServerInterceptor, opts ...keyed.ServerOption) (addr string, rows func(ref string) int) {
	t.Helper()
	ctx := context.Background()
	db := tg.Open(t, 8)
	table := testdb.NewTable(t, db, tg.Dialect)
	biz := table + "_transfers"
	if err := payments.CreateTable(ctx, db, tg.Dialect, biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = payments.DropTable(ctx, db, tg.Dialect, biz) })
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(xdsCaller), opts...)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(db, tg.Dialect, biz)
	if err != nil {
		t.Fatal(err)
	}
	addr = xdstest.Backend(t, func(s *grpc.Server) { paymentspb.RegisterPaymentsServer(s, svc) },
		grpc.ChainUnaryInterceptor(front, kit.UnaryServerInterceptor()))
	return addr, func(ref string) int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + tg.Dialect.QuoteIdent(biz) + " WHERE reference = '" + ref + "'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// secondOwners returns retries_by_layer for Transfer as "layer
// second-owner owner" → count.
func secondOwners(t *testing.T, m *otelread.Metrics) map[string]float64 {
	t.Helper()
	ps, err := m.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, p := range otelread.Select(ps, "opledger.server.retries_by_layer", attribute.String("opledger.method", xdsTransfer)) {
		out[p.Attr("opledger.retry.layer")+" "+p.Attr("opledger.retry.second_owner")+" "+p.Attr("opledger.owner")] += p.Value
	}
	return out
}

// checkXDS runs "policy check --xds" on rc (protojson) for the owner and
// returns its report and exit status.
func checkXDS(t *testing.T, ctx context.Context, dir, desc, owner string, rc []byte) (int, xdsReport) {
	t.Helper()
	p := filepath.Join(dir, owner+"-"+strings.ReplaceAll(t.Name(), "/", "-")+".json")
	if err := os.WriteFile(p, rc, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := runPolicy(ctx, []string{"check", "--descriptors", desc, "--xds", p, "--target", "xds:///payments",
		"--owner", owner, "--keyed", xdsTransfer, "--json"}, &out, &errOut)
	var rep xdsReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("policy check: exit %d: %v\n%s%s", code, err, out.String(), errOut.String())
	}
	return code, rep
}

type xdsReport struct {
	Findings []struct{ Kind, Method, Layer string } `json:"findings"`
	Methods  []struct {
		Method string `json:"method"`
		Layers []struct {
			Layer    string `json:"layer"`
			Attempts int    `json:"attempts"`
		} `json:"layers"`
	} `json:"methods"`
}

// xdsAttempts returns the xds layer's attempts for a method.
func (r xdsReport) xdsAttempts(method string) int {
	for _, m := range r.Methods {
		for _, l := range m.Layers {
			if m.Method == method && l.Layer == "xds" {
				return l.Attempts
			}
		}
	}
	return 0
}

// TestXDSKitServer is the proxyless case end to end, on SQLite and
// PostgreSQL: a real xDS control plane (go-control-plane on loopback), a
// grpc-go client dialling xds:///payments with grpc-go's own resolver and
// balancers, and the kit's server on a real ledger, whose answers to the
// first attempts of a transfer are lost after commit (UNAVAILABLE).
//
//   - A route retrying UNAVAILABLE 3 times, and a client that declares the
//     owner application (the kit's interceptor, but not its DialOptions,
//     which would switch the policy off): grpc-go makes the 4 attempts the
//     control plane says, the ledger replays 3 of them (one business row),
//     the server reports the 3 retries of the xDS layer as a second owner
//     (mesh, against application; logged once), and "policy check --xds"
//     on the same RouteConfiguration reports the same second owner and the
//     same 4 attempts.
//   - The owner mesh with the RouteConfiguration GenerateXDS writes (policy
//     generate --mesh xds), served by the control plane, and the kit's
//     client with WithTarget: "policy check" finds nothing in either the
//     generated or the served configuration, grpc-go retries the lost
//     answer once, the server counts it as the owner's (no event), and
//     there is one business row.
func TestXDSKitServer(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.Targets() {
		if tg.Name != "sqlite" && tg.Name != "postgres/pq" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // hang guard
			defer cancel()
			m, logs := otelread.NewMetrics(), otelread.NewLogs()
			front := &lossyFront{attempts: map[string][]string{}}
			addr, rows := kitBackend(t, tg, front.interceptor(), keyed.WithMeterProvider(m.Provider), keyed.WithLogger(logs.Logger))
			cp := xdstest.Start(t)
			dir := t.TempDir()
			desc := writeProtoFile(t, dir, paymentspb.File_payments_proto, "Payments")
			xdsApplicationOwner(t, ctx, cp, addr, dir, desc, front, rows, m, logs)
			xdsMeshOwner(t, ctx, cp, addr, dir, desc, front, rows, m, logs)
			if n := cp.NACKs(); len(n) != 0 {
				t.Fatalf("the client rejected resources: %q", n)
			}
		})
	}
}

func transferCtx(ctx context.Context) context.Context {
	return grpcint.WithKey(metadata.AppendToOutgoingContext(ctx, xdsCaller, "alice"), keyed.NewKey())
}

func xdsApplicationOwner(t *testing.T, ctx context.Context, cp *xdstest.ControlPlane, addr, dir, desc string, front *lossyFront,
	rows func(string) int, m *otelread.Metrics, logs *otelread.Logs) {
	t.Helper()
	svc := xdstest.Service{Name: "payments", Endpoints: []string{addr}, Routes: []*routev3.Route{{
		Name:   "all",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{RetryPolicy: xdstest.RetryPolicy(3, "unavailable")}},
	}}}
	if err := cp.Set(ctx, svc); err != nil {
		t.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := grpcint.NewClient(cat, policy.OwnerApplication)
	if err != nil {
		t.Fatal(err)
	}
	pc := paymentspb.NewPaymentsClient(cp.Dial(t, "payments", grpc.WithChainUnaryInterceptor(kit.UnaryClientInterceptor())))
	if _, err := pc.Transfer(transferCtx(ctx), &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: 5, Reference: "lose3-app"},
		grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Transfer: %v (NACKs %q)", err, cp.NACKs())
	}
	if got, want := front.seen("lose3-app"), []string{"", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("grpc-previous-rpc-attempts per attempt %q, want %q", got, want)
	}
	if n := rows("lose3-app"); n != 1 {
		t.Fatalf("%d business rows for one transfer retried 3 times", n)
	}
	if got := secondOwners(t, m); len(got) != 1 || got["mesh true application"] != 3 {
		t.Fatalf("retries_by_layer %v, want the xDS layer's 3 retries as a second owner (mesh, against application)", got)
	}
	if n := logs.Count(map[string]string{"msg": "opledger: second retry owner", "layer": "mesh", "owner": "application",
		"header": "grpc-previous-rpc-attempts", "method": xdsTransfer}); n != 1 {
		t.Fatalf("%d second-owner events, want 1:\n%s", n, logs.Text())
	}

	js, err := protojson.Marshal(svc.RouteConfiguration())
	if err != nil {
		t.Fatal(err)
	}
	code, rep := checkXDS(t, ctx, dir, desc, "application", js)
	var second []string
	for _, f := range rep.Findings {
		if f.Kind == "second-owner" {
			second = append(second, f.Method+" @"+f.Layer)
		}
	}
	if code != 1 || !slices.Contains(second, xdsTransfer+" @xds") || rep.xdsAttempts(xdsTransfer) != len(front.seen("lose3-app")) {
		t.Fatalf("policy check: exit %d, second owners %q, xds attempts %d; want the xDS layer's 4 attempts as a second owner of %s",
			code, second, rep.xdsAttempts(xdsTransfer), xdsTransfer)
	}
}

func xdsMeshOwner(t *testing.T, ctx context.Context, cp *xdstest.ControlPlane, addr, dir, desc string, front *lossyFront,
	rows func(string) int, m *otelread.Metrics, logs *otelread.Logs) {
	t.Helper()
	svc := xdstest.Service{Name: "payments", Endpoints: []string{addr}}
	var out, errOut bytes.Buffer
	if code := runPolicy(ctx, []string{"generate", "--mesh", "xds", "--descriptors", desc, "--keyed", xdsTransfer,
		"--host", svc.Name, "--cluster", svc.ClusterName()}, &out, &errOut); code != 0 {
		t.Fatalf("policy generate --mesh xds: exit %d: %s", code, errOut.String())
	}
	generated := out.Bytes()
	if code, rep := checkXDS(t, ctx, dir, desc, "mesh", generated); code != 0 || len(rep.Findings) != 0 || rep.xdsAttempts(xdsTransfer) != 2 {
		t.Fatalf("policy check of the generated configuration: exit %d, findings %+v, xds attempts %d", code, rep.Findings, rep.xdsAttempts(xdsTransfer))
	}
	var rc routev3.RouteConfiguration
	if err := protojson.Unmarshal(generated, &rc); err != nil {
		t.Fatalf("the generated RouteConfiguration: %v\n%s", err, generated)
	}
	svc.Routes = rc.GetVirtualHosts()[0].GetRoutes()
	if err := cp.Set(ctx, svc); err != nil {
		t.Fatal(err)
	}
	served, err := protojson.Marshal(svc.RouteConfiguration())
	if err != nil {
		t.Fatal(err)
	}
	if code, rep := checkXDS(t, ctx, dir, desc, "mesh", served); code != 0 || len(rep.Findings) != 0 {
		t.Fatalf("policy check of the served configuration: exit %d, findings %+v", code, rep.Findings)
	}

	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := grpcint.NewClient(cat, policy.OwnerMesh, grpcint.WithTarget("xds:///payments"))
	if err != nil {
		t.Fatal(err)
	}
	dopts, err := kit.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	pc := paymentspb.NewPaymentsClient(cp.Dial(t, "payments", dopts...))
	if _, err := pc.Transfer(transferCtx(ctx), &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: 7, Reference: "lose1-mesh"},
		grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Transfer: %v (NACKs %q)", err, cp.NACKs())
	}
	if got, want := front.seen("lose1-mesh"), []string{"", "1"}; !slices.Equal(got, want) {
		t.Fatalf("grpc-previous-rpc-attempts per attempt %q, want %q (the generated policy: one retry)", got, want)
	}
	if n := rows("lose1-mesh"); n != 1 {
		t.Fatalf("%d business rows for one transfer retried once", n)
	}
	if got := secondOwners(t, m); len(got) != 2 || got["mesh false mesh"] != 1 {
		t.Fatalf("retries_by_layer %v, want the control plane's retry counted as the owner mesh's", got)
	}
	if n := logs.Count(map[string]string{"msg": "opledger: second retry owner"}); n != 1 {
		t.Fatalf("%d second-owner events, want only the application phase's:\n%s", n, logs.Text())
	}
}
