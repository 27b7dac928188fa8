package httpint_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// TestReplayHeaders: a replay carries the allow-listed headers only:
// Content-Type and Location, never Set-Cookie or a header of the
// handler's own; the first response carries them all.
func TestReplayHeaders(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil)
	first := e.do(t, req{caller: "alice", key: "k", body: "r"})
	if first.header.Get("Set-Cookie") == "" || first.header.Get("X-Not-Replayed") == "" || first.replayed() {
		t.Fatalf("first response's headers %v: want every header the handler set", first.header)
	}
	again := e.do(t, req{caller: "alice", key: "k", body: "r"})
	for _, h := range []string{"Content-Type", "Location"} {
		if again.header.Get(h) == "" || again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s %q, first %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	for _, h := range []string{"Set-Cookie", "X-Not-Replayed"} {
		if v, ok := again.header[h]; ok {
			t.Errorf("replay carries %s: %q", h, v)
		}
	}
	if !again.replayed() || again.body != first.body || again.status != first.status {
		t.Errorf("replay %d %q, first %d %q", again.status, again.body, first.status, first.body)
	}

	// Set-Cookie only when configured; other headers by name.
	e2 := sqliteEnv(t, nil, httpint.WithSetCookieReplay(), httpint.WithReplayHeaders("content-type", "X-Not-Replayed"))
	f2 := e2.do(t, req{caller: "alice", key: "k", body: "r"})
	a2 := e2.do(t, req{caller: "alice", key: "k", body: "r"})
	if a2.header.Get("Set-Cookie") != f2.header.Get("Set-Cookie") || a2.header.Get("X-Not-Replayed") != "1" || a2.header.Get("Location") != "" {
		t.Errorf("configured replay headers: %v", a2.header)
	}
	if _, err := httpint.New(e.DB, e.store, httpint.CallerFromTrustedHeader(callerHeader), routes, httpint.WithReplayHeaders("Set-Cookie")); !errors.Is(err, httpint.ErrInvalidConfig) {
		t.Errorf("Set-Cookie in WithReplayHeaders: %v, want ErrInvalidConfig", err)
	}
}

// TestRouteIdentity: the identity is the route's pattern, not the path:
// one key on /orders/1 and /orders/2 is one operation with two different
// requests (422), while the same key on another route is another
// operation.
func TestRouteIdentity(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil)
	put := func(path, key string) response {
		return e.do(t, req{method: "PUT", path: path, caller: "alice", key: key, body: "b"})
	}
	if r := put("/orders/1", "k"); r.status != 201 {
		t.Fatalf("PUT /orders/1: %d", r.status)
	}
	wantProblem(t, put("/orders/2", "k"), keyed.KeyReused.String(), "")
	if r := put("/orders/1", "k"); !r.replayed() {
		t.Fatal("the same request again does not replay")
	}
	// The same key on POST /items: another route, another operation.
	if r := e.do(t, req{caller: "alice", key: "k", body: "b"}); r.status != 201 || r.replayed() {
		t.Fatalf("the key on another route: %d (replayed %v)", r.status, r.replayed())
	}
	// The query is part of the request; its order is not.
	if r := e.do(t, req{path: "/items?a=1&b=2", caller: "alice", key: "q", body: "b"}); r.status != 201 {
		t.Fatalf("with a query: %d", r.status)
	}
	if r := e.do(t, req{path: "/items?b=2&a=1", caller: "alice", key: "q", body: "b"}); !r.replayed() {
		t.Fatalf("the same query in another order: %d, not replayed", r.status)
	}
	wantProblem(t, e.do(t, req{path: "/items?a=2", caller: "alice", key: "q", body: "b"}), keyed.KeyReused.String(), "")
	if got := e.Count(t, "SELECT COUNT(*) FROM "+e.Dialect.QuoteIdent(e.Table)+" WHERE method = "+e.Ph(1), "PUT /orders/{id}"); got != 1 {
		t.Errorf("%d ledger entries with method \"PUT /orders/{id}\", want 1", got)
	}
}

// TestCallerIsolation: two callers with one key are two operations, and
// neither sees the other's response, not even through a resolve.
func TestCallerIsolation(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil)
	a := e.do(t, req{caller: "alice", key: "shared", body: "from alice"})
	b := e.do(t, req{caller: "bob", key: "shared", body: "from bob"})
	if a.replayed() || b.replayed() || a.body == b.body || e.runs.Load() != 2 {
		t.Fatalf("alice %q, bob %q (replayed %v %v); want two executions", a.body, b.body, a.replayed(), b.replayed())
	}
	resolve := func(caller string) response {
		return e.do(t, req{caller: caller, key: "shared", header: map[string]string{httpint.ResolveHeader: "1"}})
	}
	if r := resolve("bob"); r.body != b.body {
		t.Errorf("bob resolves %q, want his own %q", r.body, b.body)
	}
	wantProblem(t, resolve("carol"), keyed.NotFound.String(), "")
}

// TestPassThrough: routes that are not keyed run untouched, outside any
// transaction, with or without a key.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil)
	for _, q := range []req{{method: "GET", path: "/items"}, {method: "GET", path: "/items", caller: "alice", key: "k"}} {
		r := e.do(t, q)
		if r.status != 200 || r.body != "list (in a transaction: false)" || r.replayed() {
			t.Fatalf("GET /items: %d %q", r.status, r.body)
		}
	}
	if r := e.do(t, req{method: "GET", path: "/nowhere"}); r.status != 404 {
		t.Fatalf("GET /nowhere: %d", r.status)
	}
	if e.LedgerRows(t) != 0 {
		t.Fatal("a route that is not keyed reached the ledger")
	}
}

// TestCanonicalJSON: with the canonicaliser, two encodings of one
// document are one request; without it, two.
func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil, httpint.WithBodyCanonicalizer(httpint.CanonicalJSON))
	e.do(t, req{caller: "alice", key: "k", body: `{"a":1,"b":[true,null]}`})
	if r := e.do(t, req{caller: "alice", key: "k", body: "{ \"b\": [true, null],\n \"a\": 1 }"}); !r.replayed() {
		t.Fatalf("the same document re-encoded: %d %q", r.status, r.body)
	}
	wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: `{"a":1.0,"b":[true,null]}`}), keyed.KeyReused.String(), "")
	plain := sqliteEnv(t, nil)
	plain.do(t, req{caller: "alice", key: "k", body: `{"a":1}`})
	wantProblem(t, plain.do(t, req{caller: "alice", key: "k", body: `{ "a": 1 }`}), keyed.KeyReused.String(), "")
	for _, bad := range []string{"{", "1 2", `{"a":}`} {
		if _, err := httpint.CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%q) accepted it", bad)
		}
	}
}

// TestFingerprintHeaders: a configured header is part of the request.
func TestFingerprintHeaders(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil, httpint.WithFingerprintHeaders("X-Account"))
	e.do(t, req{caller: "alice", key: "k", body: "b", header: map[string]string{"X-Account": "1"}})
	wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: "b", header: map[string]string{"X-Account": "2"}}), keyed.KeyReused.String(), "")
}

// TestBareKeys: WithBareKeys takes an unquoted key as it is, and a quoted
// one as a string: "k" and k are one key.
func TestBareKeys(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil, httpint.WithBareKeys())
	e.do(t, req{caller: "alice", key: "k-1", rawKey: true, body: "b"})
	if r := e.do(t, req{caller: "alice", key: `"k-1"`, rawKey: true, body: "b"}); !r.replayed() {
		t.Fatalf("quoted form of a bare key: %d, not replayed", r.status)
	}
}

// TestFinalStatus: WithFinalStatus decides what an error status does.
func TestFinalStatus(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil, httpint.WithFinalStatus(func(s int) bool { return s == 503 }))
	q := req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "status:503"}}
	e.do(t, q)
	if r := e.do(t, q); !r.replayed() || r.status != 503 {
		t.Fatalf("a final 503: %d, replayed %v", r.status, r.replayed())
	}
	q = req{caller: "alice", key: "k2", body: "r2", header: map[string]string{testHeader: "status:422"}}
	e.do(t, q)
	if r := e.do(t, q); r.replayed() || e.runs.Load() != 3 {
		t.Fatalf("a 422 that is not final: replayed %v, handler ran %d times", r.replayed(), e.runs.Load())
	}
}

// TestReportError: a database error the handler reports rolls the
// transaction back and runs the handler again; when it keeps failing, the
// answer is the kit's, not the handler's 500.
func TestReportError(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t, nil, keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(3), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond)))
	var calls atomic.Int64
	e.reportF = func() error {
		calls.Add(1)
		return &ledger.DBError{Op: "work", Class: dialects.ClassSerialization, Err: errors.New("could not serialize")}
	}
	wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "report:serialization"}}), keyed.TxAborted.String(), "")
	if calls.Load() != 3 {
		t.Errorf("the handler ran %d times, want 3 (one per transaction attempt)", calls.Load())
	}
	e.reportF = func() error { return errors.New("not a database error") }
	r := e.do(t, req{caller: "alice", key: "k2", body: "r", header: map[string]string{testHeader: "report:other"}})
	if r.status != 500 || !strings.Contains(r.body, "database error") {
		t.Errorf("another reported error: %d %q; want the handler's own 500", r.status, r.body)
	}
	if httpint.ReportError(e.rawRequest(t, "alice", ""), errors.New("x")) {
		t.Error("ReportError outside a keyed request reported true")
	}
}

// TestNewRefuses: a configuration that cannot work fails at construction.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 1)
	store, err := ledger.New(tg.Dialect)
	if err != nil {
		t.Fatal(err)
	}
	small, err := ledger.New(tg.Dialect, ledger.WithMaxResultSize(httpint.DefaultMaxResponseBody))
	if err != nil {
		t.Fatal(err)
	}
	caller := httpint.CallerFromTrustedHeader(callerHeader)
	for name, f := range map[string]func() error{
		"nil db":      func() error { _, err := httpint.New(nil, store, caller, routes); return err },
		"nil ledger":  func() error { _, err := httpint.New(db, nil, caller, routes); return err },
		"nil caller":  func() error { _, err := httpint.New(db, store, nil, routes); return err },
		"no route":    func() error { _, err := httpint.New(db, store, caller, nil); return err },
		"gRPC name":   func() error { _, err := httpint.New(db, store, caller, []string{"/pkg.S/M"}); return err },
		"no method":   func() error { _, err := httpint.New(db, store, caller, []string{"/items"}); return err },
		"lower case":  func() error { _, err := httpint.New(db, store, caller, []string{"post /items"}); return err },
		"host":        func() error { _, err := httpint.New(db, store, caller, []string{"POST example.com/items"}); return err },
		"bad pattern": func() error { _, err := httpint.New(db, store, caller, []string{"POST /items/{a"}); return err },
		"twice":       func() error { _, err := httpint.New(db, store, caller, []string{"POST /a", "POST /a"}); return err },
		"option twice": func() error {
			_, err := httpint.New(db, store, caller, routes, httpint.WithBareKeys(), httpint.WithBareKeys())
			return err
		},
		"nil option": func() error { _, err := httpint.New(db, store, caller, routes, nil); return err },
		"an option it cannot honour": func() error {
			_, err := httpint.New(db, store, caller, routes, keyed.WithInProgressPushback(time.Second))
			return err
		},
		"negative limit": func() error {
			_, err := httpint.New(db, store, caller, routes, httpint.WithMaxRequestBody(-1))
			return err
		},
		"bad header name": func() error {
			_, err := httpint.New(db, store, caller, routes, httpint.WithReplayHeaders("a b"))
			return err
		},
		"lock wait twice": func() error {
			_, err := httpint.New(db, store, caller, routes, keyed.WithTxOptions(txmiddleware.WithLockWait(time.Second)))
			return err
		},
		"claim at commit, unknown route": func() error {
			_, err := httpint.New(db, store, caller, routes, keyed.WithClaimAtCommit("POST /other"))
			return err
		},
		"claim at commit, no route": func() error {
			_, err := httpint.New(db, store, caller, routes, keyed.WithClaimAtCommit())
			return err
		},
		"nil final": func() error {
			_, err := httpint.New(db, store, caller, routes, httpint.WithFinalStatus(nil))
			return err
		},
		"zero retry-after": func() error { _, err := httpint.New(db, store, caller, routes, httpint.WithRetryAfter(0)); return err },
		"response body limit the default ledger cannot store": func() error {
			_, err := httpint.New(db, store, caller, routes, httpint.WithMaxResponseBody(httpint.DefaultMaxResponseBody+1))
			return err
		},
		"the default response body limit on a smaller ledger": func() error {
			_, err := httpint.New(db, small, caller, routes)
			return err
		},
	} {
		if err := f(); !errors.Is(err, httpint.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	// Limits that agree are accepted: the defaults, and a larger body
	// with a ledger that leaves it StoredHeaderRoom.
	large, err := ledger.New(tg.Dialect, ledger.WithMaxResultSize(4<<20+httpint.StoredHeaderRoom))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httpint.New(db, store, caller, routes); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if _, err := httpint.New(db, large, caller, routes, httpint.WithMaxResponseBody(4<<20)); err != nil {
		t.Errorf("a 4 MiB body on a ledger that holds it: %v", err)
	}
}

// TestDefaultResponseLimitIsStored: with every default, a response whose
// body is exactly DefaultMaxResponseBody bytes, with the headers it
// stores, is stored and replayed (the ledger's default limit holds it).
func TestDefaultResponseLimitIsStored(t *testing.T) {
	t.Parallel()
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 4))
	e := newEnv(t, te, nil)
	q := req{caller: "alice", key: "k-limit", body: "r", header: map[string]string{testHeader: "default-limit"}}
	first := e.do(t, q)
	if first.status != 200 || len(first.body) != httpint.DefaultMaxResponseBody {
		t.Fatalf("status %d, %d bytes (%.200q); want 200 with %d bytes", first.status, len(first.body), first.body, httpint.DefaultMaxResponseBody)
	}
	again := e.do(t, q)
	if !again.replayed() || again.body != first.body || again.header.Get("Location") != "/items/big" {
		t.Fatalf("retry: status %d, replayed %v, Location %q; want the stored response", again.status, again.replayed(), again.header.Get("Location"))
	}
}

// TestCallers: the caller functions.
func TestCallers(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("POST", "/", nil)
	if _, ok := httpint.CallerFromPeerCertificate()(r); ok {
		t.Error("a caller without TLS")
	}
	if httpint.CallerFromTrustedHeader(" ") != nil || httpint.CallerFromPrincipal(nil) != nil {
		t.Error("a caller function from nothing")
	}
	type key struct{}
	principal := httpint.CallerFromPrincipal(func(ctx context.Context) (string, bool) {
		s, ok := ctx.Value(key{}).(string)
		return s, ok
	})
	first := httpint.FirstCaller(nil, httpint.CallerFromTrustedHeader("x-caller"), principal)
	if _, ok := first(r); ok {
		t.Error("FirstCaller found a caller in nothing")
	}
	r.Header.Add("X-Caller", "gw")
	if c, ok := first(r); !ok || c != "header:gw" {
		t.Errorf("FirstCaller = %q, %v", c, ok)
	}
	r.Header.Add("X-Caller", "again")
	r = r.WithContext(context.WithValue(r.Context(), key{}, "alice"))
	if c, ok := first(r); !ok || c != "principal:alice" {
		t.Errorf("a repeated header is no caller; FirstCaller = %q, %v", c, ok)
	}
}

// TestNewFor: the middleware runs on any keyed.Transactions: its requests,
// its claim-at-commit routes and its resolves go through the runners the
// seam builds, and the handler finds its transaction in its context.
func TestNewFor(t *testing.T) {
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 4))
	var tx *keyedtest.Counting
	e := newEnvFor(t, te, nil, func(db *sql.DB, l ledger.Ledger) keyed.Transactions {
		tx = &keyedtest.Counting{Transactions: keyed.SQL(db, l)}
		return tx
	}, keyed.WithClaimAtCommit("PUT /orders/{id}"))
	if tx.Runners.Load() != 3 {
		t.Fatalf("%d runners built; want the requests', the claim-at-commit routes' and the resolve probe's", tx.Runners.Load())
	}
	first := e.do(t, req{caller: "alice", key: "k", body: "r"})
	again := e.do(t, req{caller: "alice", key: "k", body: "r"})
	if first.status != 201 || !again.replayed() || again.body != first.body || e.BizRows(t, "r") != 1 {
		t.Fatalf("first %d %q, again %d %q (replayed %v)", first.status, first.body, again.status, again.body, again.replayed())
	}
	resolve := map[string]string{httpint.ResolveHeader: "1"}
	if got := e.do(t, req{caller: "alice", key: "k", header: resolve}); !got.replayed() || got.body != first.body {
		t.Fatalf("resolve: %d %q", got.status, got.body)
	}
	wantProblem(t, e.do(t, req{caller: "alice", key: "never", header: resolve}), keyed.NotFound.String(), "")
	if n := tx.Runs.Load(); n != 3 { // two requests and the probe of the resolve that found nothing
		t.Errorf("%d runs through the seam, want 3", n)
	}
	if _, err := httpint.NewFor(nil, httpint.CallerFromTrustedHeader(callerHeader), routes); !errors.Is(err, httpint.ErrInvalidConfig) {
		t.Errorf("nil transactions: %v", err)
	}
}
