package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/policy"
)

// kitInstruments runs the kit's parts on SQLite with an OpenTelemetry SDK
// meter provider (see kitRun) and returns the names the Prometheus
// exporter writes for the instruments they created (promName) and the
// labels of the points they recorded: each attribute key with its dots
// as underscores, and le, the buckets' label.
func kitInstruments(t *testing.T) (metrics, labels map[string]bool) {
	t.Helper()
	created, points := kitRun(t)
	metrics, labels = map[string]bool{}, map[string]bool{"le": true}
	for _, inst := range created {
		names, err := promName(inst)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			metrics[n] = true
		}
	}
	for _, sm := range points.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, set := range pointAttrs(m.Data) {
				for _, kv := range set.ToSlice() {
					labels[promLabel.Replace(string(kv.Key))] = true
				}
			}
		}
	}
	return metrics, labels
}

// promLabel is the exporter's translation of an OpenTelemetry name: dots
// (and dashes) become underscores.
var promLabel = strings.NewReplacer(".", "_", "-", "_")

// promUnits are the units the exporter turns into a suffix; a unit in
// braces (an annotation: {call}, {retry}) adds none.
var promUnits = map[string]string{"s": "_seconds", "ms": "_milliseconds", "By": "_bytes"}

// promName returns the names the Prometheus exporter writes for inst: its
// name with underscores, the unit's suffix, then _total for a counter and
// _bucket, _sum and _count for a histogram (a gauge and an up-down
// counter add nothing). A unit it does not know fails, rather than guess.
func promName(inst sdkmetric.Instrument) ([]string, error) {
	name := promLabel.Replace(inst.Name)
	switch u := inst.Unit; {
	case u == "" || strings.HasPrefix(u, "{") && strings.HasSuffix(u, "}"):
	case promUnits[u] != "":
		name += promUnits[u]
	default:
		return nil, fmt.Errorf("%s: unit %q has no Prometheus suffix here: add the exporter's to promUnits", inst.Name, u)
	}
	switch inst.Kind {
	case sdkmetric.InstrumentKindCounter, sdkmetric.InstrumentKindObservableCounter:
		return []string{name + "_total"}, nil
	case sdkmetric.InstrumentKindHistogram:
		return []string{name + "_bucket", name + "_sum", name + "_count"}, nil
	}
	return []string{name}, nil
}

// pointAttrs returns the attribute sets of a metric's points.
func pointAttrs(data metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

// kitRun builds the kit's servers (grpcint's, serving the example
// payments service; httpint's and connectint's), a grpcint client, an
// outbox relay and ledgers on SQLite, all with one SDK meter provider whose
// view notes every instrument as it is created (they all are, at
// construction), and exercises them: an executed Transfer, the same key
// with another request (a refusal with its reason), a Transfer whose
// first attempt is refused before it runs (the client's retry, seen by
// the server's retries_by_layer) and a claim on a table that does not
// exist (a database error's error.type and db.response.status_code). It
// returns the instruments created and the points collected.
func kitRun(t *testing.T) ([]sdkmetric.Instrument, metricdata.ResourceMetrics) {
	t.Helper()
	ctx := context.Background()
	var (
		mu      sync.Mutex
		created []sdkmetric.Instrument
	)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(func(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
		mu.Lock()
		defer mu.Unlock()
		created = append(created, i)
		return sdkmetric.Stream{}, false
	}))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tg := testdb.Targets()[0]
	db := tg.Open(t, 4)
	table := testdb.NewTable(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	kitOthers(t, db, tg.Dialect, store, table, mp)
	pc := kitPayments(t, db, tg, store, mp)
	key := keyed.NewKey()
	send := func(ref, key string, cents int64) error {
		ctx := grpcint.WithKey(metadata.AppendToOutgoingContext(ctx, xdsCaller, "alice"), key)
		_, err := pc.Transfer(ctx, &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: cents, Reference: ref})
		return err
	}
	if err := send("once", key, 5); err != nil {
		t.Fatalf("Transfer: %v", err)
	}
	if err := send("reused", key, 6); grpcint.ReasonOf(err) != keyed.KeyReused.Row().Reason {
		t.Fatalf("the key with another request: %v, want %s", err, keyed.KeyReused.Row().Reason)
	}
	if err := send("retry", keyed.NewKey(), 7); err != nil {
		t.Fatalf("Transfer retried: %v", err)
	}
	missing, err := ledger.New(tg.Dialect, ledger.WithTable(table+"_missing"), ledger.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	id := testdb.ID(t, "alice", paymentspb.TransferMethod, keyed.NewKey())
	if err := testdb.InTx(ctx, db, func(tx *sql.Tx) error {
		_, err := missing.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("x"))})
		return err
	}); err == nil {
		t.Fatal("a claim on a table that does not exist succeeded")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]sdkmetric.Instrument(nil), created...), rm
}

// kitPayments serves the example payments service behind grpcint's server
// on store, with a front that refuses the first attempt of the reference
// "retry" before it runs, and returns a client through grpcint's client
// (the application owns its retries), all measured into mp.
func kitPayments(t *testing.T, db *sql.DB, tg testdb.Target, store ledger.Ledger, mp metric.MeterProvider) paymentspb.PaymentsClient {
	t.Helper()
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(xdsCaller), keyed.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	biz := fmt.Sprintf("opledger_dash_transfers_%d", time.Now().UnixNano()%1_000_000_000)
	if err := payments.CreateTable(context.Background(), db, tg.Dialect, biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
	svc, err := payments.NewService(db, tg.Dialect, biz)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Bool
	front := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*paymentspb.TransferRequest); ok && r.GetReference() == "retry" && refused.CompareAndSwap(false, true) {
			return nil, grpcint.NotExecuted(codes.Unavailable, "injected: not now")
		}
		return handler(ctx, req)
	}
	addr := xdstest.Backend(t, func(s *grpc.Server) { paymentspb.RegisterPaymentsServer(s, svc) },
		grpc.ChainUnaryInterceptor(front, kit.UnaryServerInterceptor()))
	client, err := grpcint.NewClient(cat, policy.OwnerApplication, keyed.WithMeterProvider(mp),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	dopts, err := client.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return paymentspb.NewPaymentsClient(conn)
}

// kitOthers builds the parts whose instruments the calls above do not
// reach: httpint's and connectint's servers and an outbox relay, measured
// into mp. Their instruments are created at construction.
func kitOthers(t *testing.T, db *sql.DB, d dialects.Dialect, store ledger.Ledger, table string, mp metric.MeterProvider) {
	t.Helper()
	caller := func(*http.Request) (string, bool) { return "alice", true }
	if _, err := httpint.New(db, store, caller, []string{"POST /transfers"}, keyed.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connectint.NewServer(db, store, cat, connectint.CallerFromTrustedHeader(xdsCaller), keyed.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(d, outbox.WithTable(outbox.TableFor(table)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.NewRelay(db, ob, nopPublisher{}, outbox.WithMeterProvider(mp)); err != nil {
		t.Fatal(err)
	}
}

// nopPublisher acknowledges every message.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, outbox.Envelope) error { return nil }

var (
	promMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	promIdent    = regexp.MustCompile(`\b(?:opledger|grpc)_[a-z0-9_]+\b`)
	promTemplate = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

// promNames returns the metrics and the labels a PromQL expression names.
func promNames(expr string) (metrics, labels []string) {
	for _, m := range promMatchers.FindAllStringSubmatch(expr, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[1], -1) {
			labels = append(labels, l[1])
		}
	}
	for _, m := range promGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	rest := promGrouping.ReplaceAllString(promMatchers.ReplaceAllString(expr, ""), "")
	metrics = promIdent.FindAllString(rest, -1)
	return metrics, labels
}

// dashboardExprs returns every PromQL expression of the alert rules and
// the Grafana dashboard, and the labels their legends and annotations
// name.
func dashboardExprs(t *testing.T, root string) (exprs map[string][]string, templLabels []string) {
	t.Helper()
	exprs = map[string][]string{}
	rules, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/opledger-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, line := range strings.Split(string(rules), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "expr:"):
			exprs["opledger-rules.yml"] = append(exprs["opledger-rules.yml"], strings.TrimSpace(strings.TrimPrefix(l, "expr:")))
		case strings.HasPrefix(l, "- alert:"):
			alerts++
		}
		for _, m := range regexp.MustCompile(`\$labels\.([a-z0-9_]+)`).FindAllStringSubmatch(l, -1) {
			templLabels = append(templLabels, m[1])
		}
	}
	if alerts == 0 || alerts != len(exprs["opledger-rules.yml"]) {
		t.Errorf("opledger-rules.yml: %d alerts, %d expressions", alerts, len(exprs["opledger-rules.yml"]))
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy/grafana/opledger.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("opledger.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs["opledger.json: "+p.Title] = append(exprs["opledger.json: "+p.Title], tg.Expr)
			for _, m := range promTemplate.FindAllString(tg.LegendFormat, -1) {
				templLabels = append(templLabels, strings.Trim(m, "{} "))
			}
		}
	}
	return exprs, templLabels
}

// TestDashboardsUseKitMetrics: every metric and label the Prometheus alert
// rules (deploy/prometheus/opledger-rules.yml) and the Grafana dashboard
// (deploy/grafana/opledger.json) name is one the kit emits: the
// instruments its servers, client, relay and ledger create when they run
// with an SDK meter provider, named as the Prometheus exporter names
// them, and the attributes of the points they record (kitInstruments).
// The queries docs/operations.md names are in them. With promtool
// installed (Debian's prometheus package), promtool check rules accepts
// the rules.
func TestDashboardsUseKitMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	metrics, labels := kitInstruments(t)
	t.Logf("the kit emits %v\nwith labels %v", keys(metrics), keys(labels))
	exprs, templ := dashboardExprs(t, root)
	used := map[string]bool{}
	for where, list := range exprs {
		for _, e := range list {
			ms, ls := promNames(e)
			if len(ms) == 0 {
				t.Errorf("%s: %q names no kit metric", where, e)
			}
			for _, m := range ms {
				used[m] = true
				if !metrics[m] {
					t.Errorf("%s: metric %s is none the kit registers (%q)", where, m, e)
				}
			}
			for _, l := range ls {
				if !labels[l] {
					t.Errorf("%s: label %s is no attribute of the kit's (%q)", where, l, e)
				}
			}
		}
	}
	for _, l := range templ {
		if !labels[l] {
			t.Errorf("a legend or annotation names label %s, no attribute of the kit's", l)
		}
	}
	// The list: each is in the rules or the dashboard.
	for _, want := range []string{"opledger_server_retries_by_layer_total", "opledger_outbox_dead_total", "opledger_outbox_failed_batches_total",
		"opledger_outbox_published_total", "opledger_ledger_claims_total", "opledger_server_calls_total", "grpc_client_call_retries_sum"} {
		if !used[want] {
			t.Errorf("no rule or panel uses %s", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (apt-get install prometheus): the rules' syntax is not checked")
		return
	}
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(root, "deploy/prometheus/opledger-rules.yml")).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
