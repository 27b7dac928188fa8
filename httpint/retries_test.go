package httpint_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// TestRetryOwnerAtRunTime: the middleware reads who retried each keyed
// request: the owner's own retries are counted and not logged; a mesh
// retry or a service config's under a client that declares application
// is a second owner, logged once per route and layer; a request that
// declares nothing is judged against WithRetryOwner; resolves and routes
// that are not keyed are not judged.
func TestRetryOwnerAtRunTime(t *testing.T) {
	t.Parallel()
	m, logs := otelread.NewMetrics(), otelread.NewLogs()
	e := sqliteEnv(t, nil, keyed.WithRetryOwner(policy.OwnerNone), keyed.WithMeterProvider(m.Provider), keyed.WithLogger(logs.Logger))
	n := 0
	// send sends a request with header (pairs; an odd last element is
	// the Opledger-Second-Retry-Owner the answer must carry, none
	// without it).
	send := func(method, path string, header ...string) {
		t.Helper()
		n++
		h := map[string]string{}
		for i := 0; i+1 < len(header); i += 2 {
			h[header[i]] = header[i+1]
		}
		want := ""
		if len(header)%2 == 1 {
			want = header[len(header)-1]
		}
		r := e.do(t, req{method: method, path: path, caller: "alice", key: "k" + string(rune('a'+n)), body: "r" + string(rune('a'+n)), header: h})
		if r.status >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
		}
		if got := strings.Join(r.header.Values(keyedcore.HTTPSecondOwner), ","); got != want {
			t.Errorf("%s %s %v: %s %q, want %q", method, path, header, keyedcore.HTTPSecondOwner, got, want)
		}
	}
	points := func() map[string]float64 {
		t.Helper()
		ps, err := m.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, p := range otelread.Select(ps, "opledger.server.retries_by_layer") {
			out[p.Attr("opledger.method")+" "+p.Attr("opledger.retry.layer")+" "+p.Attr("opledger.retry.second_owner")+" "+p.Attr("opledger.owner")] += p.Value
		}
		return out
	}
	owner, envoy, attempt, previous := keyedcore.HTTPRetryOwnerHeader, keyedcore.EnvoyAttemptCountHeader, keyedcore.HTTPAttemptHeader, keyedcore.PreviousAttemptsHeader

	send("POST", "/items", owner, "mesh", envoy, "2")
	send("POST", "/items", owner, "application", attempt, "3")
	send("POST", "/items", owner, "application", attempt, "1", envoy, "1") // every layer's first attempt
	if logs.Count(map[string]string{"msg": "opledger: second retry owner"}) != 0 {
		t.Fatalf("second-owner events with the owners' own retries:\n%s", logs.Text())
	}
	send("POST", "/items", owner, "application", envoy, "2", "mesh")
	send("POST", "/items", owner, "application", envoy, "3", "mesh")
	send("POST", "/items", owner, "application", previous, "1", "service-config")
	send("PUT", "/orders/7", owner, "application", envoy, "2", "mesh")
	send("POST", "/items", envoy, "2", "mesh") // undeclared: the middleware's owner, none
	send("GET", "/items", owner, "application", envoy, "2")
	resolve := e.do(t, req{caller: "alice", key: "kb", header: map[string]string{httpint.ResolveHeader: "1", envoy: "2"}})
	if resolve.status != http.StatusCreated || !resolve.replayed() || resolve.header.Get(keyedcore.HTTPSecondOwner) != "" {
		t.Fatalf("resolve (never judged): %d %s %v", resolve.status, resolve.body, resolve.header)
	}
	want := map[string]float64{
		"POST /items mesh false mesh": 1, "POST /items application false application": 1,
		"POST /items mesh true application": 2, "POST /items service-config true application": 1,
		"PUT /orders/{id} mesh true application": 1, "POST /items mesh true none": 1,
	}
	got := points()
	if len(got) != len(want) {
		t.Fatalf("retries_by_layer %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("retries_by_layer %v, want %v", got, want)
		}
	}
	var events []string
	for _, ev := range logs.Events() {
		if ev["msg"] == "opledger: second retry owner" {
			events = append(events, ev["method"].(string)+" "+ev["layer"].(string)+" owner "+ev["owner"].(string)+" "+ev["header"].(string))
		}
	}
	wantEvents := []string{
		"POST /items mesh owner application x-envoy-attempt-count",
		"POST /items service-config owner application grpc-previous-rpc-attempts",
		"PUT /orders/{id} mesh owner application x-envoy-attempt-count",
	}
	if strings.Join(events, "\n") != strings.Join(wantEvents, "\n") {
		t.Fatalf("second-owner events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(wantEvents, "\n"))
	}
	ps, err := m.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if calls := otelread.Sum(ps, "opledger.server.calls", attribute.String("opledger.method", "POST /items")); calls != 7 {
		t.Errorf("opledger.server.calls for POST /items: %v, want 7", calls)
	}
}

// TestRetryOwnerOption: an owner the kit does not know is a configuration
// error.
func TestRetryOwnerOption(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 2))
	store, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []policy.RetryOwner{0, 5} {
		if _, err := httpint.New(te.DB, store, httpint.CallerFromTrustedHeader(callerHeader), routes, keyed.WithRetryOwner(o)); !errors.Is(err, httpint.ErrInvalidConfig) {
			t.Errorf("WithRetryOwner(%d): %v, want ErrInvalidConfig", o, err)
		}
	}
}
