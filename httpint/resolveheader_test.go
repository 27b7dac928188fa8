package httpint_test

import (
	"strings"
	"testing"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/keyed"
)

// TestResolveHeaderValue: only 1 and true (any case) make a resolve; any
// other value is 400 request-unreadable on a keyed route and on a route
// that is not keyed, without running the handler or claiming the key.
func TestResolveHeaderValue(t *testing.T) {
	e := sqliteEnv(t, nil)
	resolve := func(v string) map[string]string { return map[string]string{httpint.ResolveHeader: v} }
	for _, v := range []string{"0", "", "false", "yes", "1 1"} {
		key := "k-" + v
		p := wantProblem(t, e.do(t, req{caller: "alice", key: key, body: "bad", header: resolve(v)}), keyed.RequestUnreadable.String(), key)
		if !strings.Contains(p.Detail, "1 or true") {
			t.Errorf("value %q: detail %q", v, p.Detail)
		}
		if e.runs.Load() != 0 {
			t.Fatalf("value %q: the handler ran", v)
		}
		wantProblem(t, e.do(t, req{method: "GET", path: "/items", caller: "alice", header: resolve(v)}), keyed.RequestUnreadable.String(), "")
		if e.runs.Load() != 0 {
			t.Fatalf("value %q: the handler of a route that is not keyed ran", v)
		}
	}
	if e.LedgerRows(t) != 0 {
		t.Fatal("a refused request claimed its key")
	}
	// Nothing was claimed: the same key runs the request.
	first := e.do(t, req{caller: "alice", key: "k-0", body: "bad"})
	if first.status != 201 || first.replayed() || e.runs.Load() != 1 {
		t.Fatalf("the key after its refusal: %d, replayed %v, %d runs", first.status, first.replayed(), e.runs.Load())
	}
	for _, v := range []string{"1", "true", "TRUE", "True"} {
		wantProblem(t, e.do(t, req{caller: "alice", key: "k-never", header: resolve(v)}), keyed.NotFound.String(), "k-never")
		got := e.do(t, req{caller: "alice", key: "k-0", header: resolve(v)})
		if got.status != 201 || !got.replayed() || got.body != first.body {
			t.Errorf("value %q: resolve of a committed key: %d, replayed %v, %q", v, got.status, got.replayed(), got.body)
		}
		wantProblem(t, e.do(t, req{method: "GET", path: "/items", caller: "alice", header: resolve(v)}), keyed.NotKeyed.String(), "")
	}
	if e.runs.Load() != 1 {
		t.Fatalf("a resolve ran a handler: %d runs", e.runs.Load())
	}
}

// TestReplayMarkerNames: a replay and a resolve's stored answer carry the
// marker under both names, Idempotent-Replayed (Stripe's) and
// Idempotency-Replayed (gRPC's and connect's); an execution carries
// neither.
func TestReplayMarkerNames(t *testing.T) {
	e := sqliteEnv(t, nil)
	q := req{caller: "alice", key: "k", body: "r"}
	first := e.do(t, q)
	if first.status != 201 || first.header.Get(httpint.ReplayedHeader) != "" || first.header.Get(replayedHeader) != "" {
		t.Fatalf("an execution: %d, %q, %q", first.status, first.header.Get(httpint.ReplayedHeader), first.header.Get(replayedHeader))
	}
	for _, r := range []response{e.do(t, q), e.do(t, req{caller: "alice", key: "k", header: map[string]string{httpint.ResolveHeader: "1"}})} {
		if r.status != 201 || r.header.Get(httpint.ReplayedHeader) != "true" || r.header.Get(replayedHeader) != "true" || r.body != first.body {
			t.Errorf("a stored answer: %d, Idempotent-Replayed %q, Idempotency-Replayed %q", r.status, r.header.Get(httpint.ReplayedHeader), r.header.Get(replayedHeader))
		}
	}
}
