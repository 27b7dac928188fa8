package httpint_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/harness/otelread"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// The window's headers, as docs/http.md names them.
const (
	firstSentHeader = "Idempotency-Key-First-Sent"
	lifetimeHeader  = "Idempotency-Key-Lifetime"
)

func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// testLateRetry: a late retry (a key born before the ledger's window) is
// answered 422 idempotency-key-expired without running the handler or
// storing anything, with the key's lifetime; a resolve of it answers the
// same, never 404.
func testLateRetry(t *testing.T, tg testdb.Target) {
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	e := newEnv(t, te, nil, keyed.WithLockWait(300*time.Millisecond))
	lifetime := seconds(24*time.Hour - time.Minute)
	for _, c := range []struct {
		name   string
		key    string
		header map[string]string
	}{
		{"UUIDv7", keybirth.New(time.Now().Add(-48 * time.Hour)), map[string]string{}},
		{"first-sent", "late-random-key", map[string]string{firstSentHeader: keybirth.FormatFirstSent(time.Now().Add(-48 * time.Hour))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, req{caller: "alice", key: c.key, body: "late", header: c.header})
			wantProblem(t, r, keyed.KeyExpired.String(), c.key)
			if r.status != 422 || r.header.Get(lifetimeHeader) != lifetime {
				t.Errorf("status %d, %s %q; want 422, %s", r.status, lifetimeHeader, r.header.Get(lifetimeHeader), lifetime)
			}
			c.header[httpint.ResolveHeader] = "1"
			r = e.do(t, req{caller: "alice", key: c.key, body: "late", header: c.header})
			wantProblem(t, r, keyed.KeyExpired.String(), c.key)
			delete(c.header, httpint.ResolveHeader)
			if e.runs.Load() != 0 || e.BizRows(t, "late") != 0 || e.LedgerRows(t) != 0 {
				t.Fatalf("a late retry ran or stored: %d runs, %d rows, %d entries", e.runs.Load(), e.BizRows(t, "late"), e.LedgerRows(t))
			}
		})
	}
}

// TestLateRetry: testLateRetry on SQLite and PostgreSQL.
func TestLateRetry(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Family() == "mysql" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) { testLateRetry(t, tg) })
	}
}

// TestWindowHeaders: the first-sent header is the key's birth and part of
// its identity (a resolve must send the request's); malformed or sent
// twice, the key is invalid (400); a key born in the future past the skew
// is invalid; every answer that reached the ledger carries the key's
// lifetime, a refusal before it none.
func TestWindowHeaders(t *testing.T) {
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	e := newEnv(t, te, nil)
	// The ledger's window is stated by httpint.New: here the default's.
	lifetime := seconds(24*time.Hour - time.Minute)
	sent := keybirth.FormatFirstSent(time.Now().Add(-time.Minute))
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	r := e.do(t, req{caller: "alice", key: "k", body: "w", header: with(firstSentHeader, sent)})
	if r.status != 201 || r.header.Get(lifetimeHeader) != lifetime {
		t.Fatalf("call: %d, lifetime %q", r.status, r.header.Get(lifetimeHeader))
	}
	r = e.do(t, req{caller: "alice", key: "k", body: "w", header: with(firstSentHeader, sent)})
	if !r.replayed() || r.header.Get(lifetimeHeader) != lifetime {
		t.Fatalf("retry: %d, replayed %v, lifetime %q", r.status, r.replayed(), r.header.Get(lifetimeHeader))
	}
	r = e.do(t, req{caller: "alice", key: "k", header: with(firstSentHeader, sent, httpint.ResolveHeader, "1")})
	if !r.replayed() {
		t.Fatalf("resolve with the request's first-sent: %d, want the stored response", r.status)
	}
	r = e.do(t, req{caller: "alice", key: "k", header: with(firstSentHeader, keybirth.FormatFirstSent(time.Now().Add(-time.Hour)), httpint.ResolveHeader, "1")})
	wantProblem(t, r, keyed.NotFound.String(), "k")
	if r.header.Get(lifetimeHeader) != lifetime {
		t.Errorf("not found: lifetime %q", r.header.Get(lifetimeHeader))
	}
	r = e.do(t, req{caller: "alice", key: "k2", body: "w", header: with(firstSentHeader, "yesterday")})
	if p := wantProblem(t, r, keyed.KeyInvalid.String(), "k2"); !strings.Contains(p.Detail, firstSentHeader) || r.header.Get(lifetimeHeader) != "" {
		t.Errorf("malformed first-sent: %+v, lifetime %q", p, r.header.Get(lifetimeHeader))
	}
	hr := e.rawRequest(t, "alice", "w")
	v, _ := httpint.FormatKey("k3")
	hr.Header.Set(httpint.KeyHeader, v)
	hr.Header.Add(firstSentHeader, sent)
	hr.Header.Add(firstSentHeader, sent)
	wantProblem(t, e.doRaw(t, hr), keyed.KeyInvalid.String(), "k3")
	future := keybirth.New(time.Now().Add(time.Hour))
	wantProblem(t, e.do(t, req{caller: "alice", key: future, body: "w"}), keyed.KeyInvalid.String(), future)
	if e.runs.Load() != 1 {
		t.Errorf("%d runs, want 1", e.runs.Load())
	}
}

// TestWindowLedgerRetention: the lifetime follows the ledger's retention
// and skew (ledger.WithRetention, ledger.WithClockSkew), and a key born
// before it is refused.
func TestWindowLedgerRetention(t *testing.T) {
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	store, err := ledger.New(te.Dialect, ledger.WithTable(te.Table), ledger.WithRetention(time.Hour), ledger.WithClockSkew(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, te, func(*ledger.Store) ledger.Ledger { return store })
	lifetime := seconds(time.Hour - 10*time.Second)
	r := e.do(t, req{caller: "alice", key: keyed.NewKey(), body: "w"})
	if r.status != 201 || r.header.Get(lifetimeHeader) != lifetime {
		t.Fatalf("call: %d, lifetime %q; want %s", r.status, r.header.Get(lifetimeHeader), lifetime)
	}
	late := keybirth.New(time.Now().Add(-2 * time.Hour))
	r = e.do(t, req{caller: "alice", key: late, body: "w"})
	wantProblem(t, r, keyed.KeyExpired.String(), late)
	if r.header.Get(lifetimeHeader) != lifetime || e.LedgerRows(t) != 1 {
		t.Errorf("lifetime %q, %d entries", r.header.Get(lifetimeHeader), e.LedgerRows(t))
	}
}

// routeWindowEnv serves on tg behind a middleware whose POST /items has a
// retention of 1 h of its own and whose PUT /orders/{id} refuses keys
// without a birth (the ledger's default window, 24 h less 1 min of
// skew), with its metrics in m.
func routeWindowEnv(t *testing.T, tg testdb.Target, m *otelread.Metrics) *env {
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	return newEnv(t, te, nil, keyed.WithLockWait(300*time.Millisecond), keyed.WithMeterProvider(m.Provider),
		httpint.WithRouteWindow("POST /items", time.Hour, policy.AcceptUnknownBirth),
		httpint.WithRouteWindow("PUT /orders/{id}", 0, policy.RefuseUnknownBirth))
}

// testRouteWindow: a route's retention of its own refuses a key born
// before it as expired (the handler not run, nothing stored), a resolve
// of it too, and its answers carry its lifetime; a route that refuses
// keys without a birth refuses a random key sent without a first-sent
// time (400, naming UUIDv7 and the header) and takes a UUIDv7 key or a
// first-sent time, with the ledger's lifetime; opledger.key.birth counts
// the keys by where their birth came from.
func testRouteWindow(t *testing.T, tg testdb.Target) {
	m := otelread.NewMetrics()
	e := routeWindowEnv(t, tg, m)
	own, ledgers := seconds(time.Hour-time.Minute), seconds(24*time.Hour-time.Minute)
	wantLifetime := func(what string, r response, want string) {
		t.Helper()
		if got := r.header.Get(lifetimeHeader); got != want {
			t.Errorf("%s: %d, %s %q; want %q", what, r.status, lifetimeHeader, got, want)
		}
	}
	late := keybirth.New(time.Now().Add(-90 * time.Minute))
	r := e.do(t, req{caller: "alice", key: late, body: "late"})
	wantProblem(t, r, keyed.KeyExpired.String(), late)
	wantLifetime("a UUIDv7 key born before the route's window", r, own)
	r = e.do(t, req{caller: "alice", key: late, header: map[string]string{httpint.ResolveHeader: "1"}})
	wantProblem(t, r, keyed.KeyExpired.String(), late)
	wantLifetime("its resolve", r, own)
	sentLate := map[string]string{firstSentHeader: keybirth.FormatFirstSent(time.Now().Add(-2 * time.Hour))}
	r = e.do(t, req{caller: "alice", key: "late-random-key", body: "late", header: sentLate})
	wantProblem(t, r, keyed.KeyExpired.String(), "late-random-key")
	wantLifetime("a first-sent time before the route's window", r, own)
	if e.runs.Load() != 0 || e.BizRows(t, "late") != 0 || e.LedgerRows(t) != 0 {
		t.Fatalf("a key born before the route's window ran or stored: %d runs, %d rows, %d entries", e.runs.Load(), e.BizRows(t, "late"), e.LedgerRows(t))
	}
	r = e.do(t, req{caller: "alice", key: keybirth.New(time.Now().Add(-30 * time.Minute)), body: "in"})
	if r.status != 201 {
		t.Fatalf("a key inside the route's window: %d %s", r.status, r.body)
	}
	wantLifetime("a key inside the route's window", r, own)
	r = e.do(t, req{caller: "alice", key: "random-on-items", body: "random"})
	if r.status != 201 {
		t.Fatalf("a random key on a route that accepts keys without a birth: %d %s", r.status, r.body)
	}
	wantLifetime("a random key on POST /items", r, own)

	r = e.do(t, req{method: http.MethodPut, path: "/orders/1", caller: "alice", key: "random-on-orders", body: "o"})
	p := wantProblem(t, r, keyed.KeyInvalid.String(), "random-on-orders")
	if !strings.Contains(p.Detail, "UUIDv7") || !strings.Contains(p.Detail, firstSentHeader) {
		t.Errorf("the refusal of a key without a birth does not name UUIDv7 and %s: %q", firstSentHeader, p.Detail)
	}
	wantLifetime("a key refused before the ledger", r, "")
	if e.BizRows(t, "1:o") != 0 {
		t.Fatal("a refused key without a birth ran")
	}
	r = e.do(t, req{method: http.MethodPut, path: "/orders/2", caller: "alice", key: keyed.NewKey(), body: "o"})
	if r.status != 201 {
		t.Fatalf("a UUIDv7 key on a route that refuses keys without a birth: %d %s", r.status, r.body)
	}
	wantLifetime("a UUIDv7 key on PUT /orders/{id}", r, ledgers)
	sent := map[string]string{firstSentHeader: keybirth.FormatFirstSent(time.Now())}
	r = e.do(t, req{method: http.MethodPut, path: "/orders/3", caller: "alice", key: "random-with-first-sent", body: "o", header: sent})
	if r.status != 201 {
		t.Fatalf("a random key with a first-sent time on a route that refuses keys without a birth: %d %s", r.status, r.body)
	}
	if e.runs.Load() != 4 || e.LedgerRows(t) != 4 {
		t.Errorf("%d runs, %d entries; want 4 and 4", e.runs.Load(), e.LedgerRows(t))
	}
	points, err := m.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for birth, want := range map[string]float64{keyedcore.BirthKey: 3, keyedcore.BirthFirstSent: 2, keyedcore.BirthUnknown: 2} {
		if got := otelread.Sum(points, "opledger.server.calls", keyedcore.BirthAttr.String(birth)); got != want {
			t.Errorf("opledger.server.calls with %s=%s: %v, want %v", keyedcore.BirthAttr, birth, got, want)
		}
	}
}

// TestRouteWindow: testRouteWindow on SQLite and PostgreSQL.
func TestRouteWindow(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Family() == "mysql" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) { testRouteWindow(t, tg) })
	}
}

// TestRouteWindowRefused: New and NewFor refuse a route's window that
// cannot work: a retention longer than the ledger's, not longer than its
// clock skew, or given while the ledger does not state its window; a
// route that is not keyed; a route given twice; a negative retention; an
// unknown birth policy. A route that only refuses keys without a birth
// needs no window from the ledger.
func TestRouteWindowRefused(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 1)
	store, err := ledger.New(tg.Dialect, ledger.WithRetention(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	silent := struct{ ledger.Ledger }{store} // states no window
	caller := httpint.CallerFromTrustedHeader(callerHeader)
	window := func(route string, d time.Duration, b policy.BirthPolicy) keyed.ServerOption {
		return httpint.WithRouteWindow(route, d, b)
	}
	for name, c := range map[string]struct {
		l    ledger.Ledger
		opts []keyed.ServerOption
		want string
	}{
		"longer than the ledger's": {store, []keyed.ServerOption{window("POST /items", 3*time.Hour, 0)}, "longer than the ledger's"},
		"within the clock skew":    {store, []keyed.ServerOption{window("POST /items", time.Minute, 0)}, "clock skew"},
		"no window stated":         {silent, []keyed.ServerOption{window("POST /items", time.Hour, 0)}, "does not state its window"},
		"not a keyed route":        {store, []keyed.ServerOption{window("POST /other", time.Hour, 0)}, "not one of the keyed routes"},
		"a route twice": {store, []keyed.ServerOption{window("POST /items", time.Hour, 0),
			window("POST /items", 30*time.Minute, 0)}, "given twice"},
		"negative retention":   {store, []keyed.ServerOption{window("POST /items", -time.Hour, 0)}, "negative retention"},
		"unknown birth policy": {store, []keyed.ServerOption{window("POST /items", 0, policy.BirthPolicy(7))}, "birth policy"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := httpint.New(db, c.l, caller, routes, c.opts...)
			if !errors.Is(err, httpint.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v; want ErrInvalidConfig saying %q", err, c.want)
			}
			_, err = httpint.NewFor(keyed.SQL(db, c.l), caller, routes, c.opts...)
			if !errors.Is(err, httpint.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewFor: %v; want ErrInvalidConfig saying %q", err, c.want)
			}
		})
	}
	if _, err := httpint.New(db, silent, caller, routes, window("POST /items", 0, policy.RefuseUnknownBirth)); err != nil {
		t.Errorf("a route that refuses keys without a birth, on a ledger that states no window: %v", err)
	}
	if _, err := httpint.New(db, store, caller, routes, window("POST /items", time.Hour, 0), window("PUT /orders/{id}", 90*time.Minute, policy.RefuseUnknownBirth)); err != nil {
		t.Errorf("two routes' windows: %v", err)
	}
}
