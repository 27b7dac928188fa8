package httpint_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// callerHeader is the header the tests' gateway would set.
const callerHeader = "X-Test-Caller"

// testHeader tells the test handler what to do: "panic", "stream" (say
// whether the ResponseWriter can flush or hijack), "block" (wait
// for the gate or the end of the request's context), "big" (write more than the response limit),
// "big-headers" (a stored header of twice StoredHeaderRoom), "default-limit" (a body of exactly
// DefaultMaxResponseBody bytes),
// "status:NNN" (write a business row, then answer NNN), "report:CLASS"
// (report a database error and answer 500).
const testHeader = "X-Test"

// env is one target with a ledger, a business table, the middleware in
// front of the test handler and an HTTP server on loopback.
type env struct {
	*testdb.Env
	store   *ledger.Store
	mw      *httpint.Middleware
	srv     *httptest.Server
	client  *http.Client
	runs    atomic.Int64
	entered chan struct{}
	release chan struct{}
	reportF func() error
}

// routes are the test's keyed routes.
var routes = []string{"POST /items", "PUT /orders/{id}"}

// newEnv serves the test handler on te behind a middleware over the
// ledger (wrapped by wrap, when not nil) with opts.
func newEnv(t testing.TB, te *testdb.Env, wrap func(*ledger.Store) ledger.Ledger, opts ...keyed.ServerOption) *env {
	t.Helper()
	return newEnvFor(t, te, wrap, nil, opts...)
}

// newEnvFor is newEnv with the middleware on the transactions txOf
// returns for the database and the ledger (httpint.New's when nil).
func newEnvFor(t testing.TB, te *testdb.Env, wrap func(*ledger.Store) ledger.Ledger, txOf func(*sql.DB, ledger.Ledger) keyed.Transactions, opts ...keyed.ServerOption) *env {
	t.Helper()
	store, err := ledger.New(te.Dialect, ledger.WithTable(te.Table))
	if err != nil {
		t.Fatal(err)
	}
	var l ledger.Ledger = store
	if wrap != nil {
		l = wrap(store)
	}
	e := &env{Env: te, store: store, entered: make(chan struct{}, 64), release: make(chan struct{})}
	var mw *httpint.Middleware
	if txOf != nil {
		mw, err = httpint.NewFor(txOf(te.DB, l), httpint.CallerFromTrustedHeader(callerHeader), routes, opts...)
	} else {
		mw, err = httpint.New(te.DB, l, httpint.CallerFromTrustedHeader(callerHeader), routes, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.mw = mw
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items", e.handle)
	mux.HandleFunc("PUT /orders/{id}", e.handle)
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		_, inTx := txmiddleware.TxFromContext(r.Context())
		fmt.Fprintf(w, "list (in a transaction: %v)", inTx)
	})
	e.srv = httptest.NewUnstartedServer(mw.Handler(mux))
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic tests' panics
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	e.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// item is the test handler's response body.
type item struct {
	ID  int64  `json:"id"`
	Ref string `json:"ref"`
}

var nextID atomic.Int64

// handle writes one business row for the request's reference (the body,
// or the path's id) in the request's transaction and answers 201 with a
// fresh id, Location, a cookie and a header that is not replayed.
func (e *env) handle(w http.ResponseWriter, r *http.Request) {
	e.runs.Add(1)
	ctx := r.Context()
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		http.Error(w, "not in a transaction", http.StatusInternalServerError)
		return
	}
	b, _ := io.ReadAll(r.Body)
	ref := string(b)
	if id := r.PathValue("id"); id != "" {
		ref = id + ":" + ref
	}
	mode := r.Header.Get(testHeader)
	switch {
	case mode == "panic":
		panic("test handler panics")
	case mode == "stream":
		_, flusher := w.(http.Flusher)
		_, hijacker := w.(http.Hijacker)
		fmt.Fprintf(w, "flusher=%v hijacker=%v", flusher, hijacker)
		return
	case mode == "block":
		e.entered <- struct{}{}
		select {
		case <-e.release:
		case <-ctx.Done(): // the client went away: the write below fails
		}
	case mode == "big":
		_, _ = w.Write([]byte(strings.Repeat("x", 64)))
		_, _ = w.Write([]byte(strings.Repeat("x", 64)))
		return
	case mode == "big-headers":
		w.Header().Set("Link", "<"+strings.Repeat("l", 2*httpint.StoredHeaderRoom)+">")
		_, _ = w.Write([]byte("small body"))
		return
	case mode == "default-limit":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Location", "/items/big")
		_, _ = w.Write([]byte(strings.Repeat("x", httpint.DefaultMaxResponseBody)))
		return
	case strings.HasPrefix(mode, "report:"):
		httpint.ReportError(r, e.reportF())
		http.Error(w, "database error", http.StatusInternalServerError)
		return
	}
	if err := e.WriteBiz(ctx, tx, ref, int(e.runs.Load())); err != nil {
		httpint.ReportError(r, err)
		http.Error(w, "database error", http.StatusInternalServerError)
		return
	}
	if code, ok := strings.CutPrefix(mode, "status:"); ok {
		n, _ := strconv.Atoi(code)
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Not-Replayed", "1")
		w.WriteHeader(n)
		fmt.Fprintf(w, `{"title":"handler says %d","ref":%q}`, n, ref)
		return
	}
	id := nextID.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/items/"+strconv.FormatInt(id, 10))
	w.Header().Set("Set-Cookie", "session=s"+strconv.FormatInt(id, 10))
	w.Header().Set("X-Not-Replayed", "1")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(item{ID: id, Ref: ref})
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   string
}

// replayed reports whether the response carries the replay marker under
// both its names, Stripe's and the one of gRPC's and connect's marker.
func (r response) replayed() bool {
	return r.header.Get(httpint.ReplayedHeader) == "true" && r.header.Get(replayedHeader) == "true"
}

// replayedHeader is the replay marker's name on every transport.
const replayedHeader = "Idempotency-Replayed"

// problem decodes a problem+json body.
func (r response) problem(t testing.TB) httpint.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != httpint.ProblemContentType {
		t.Fatalf("status %d, Content-Type %q, want %s (body %q)", r.status, ct, httpint.ProblemContentType, r.body)
	}
	var p httpint.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	return p
}

// req describes one request.
type req struct {
	method, path, caller, key, body string
	header                          map[string]string
	rawKey                          bool // key is the field value as it is
}

// send makes the request; a transport error is returned as it is.
func (e *env) send(ctx context.Context, q req) (response, error) {
	if q.method == "" {
		q.method = http.MethodPost
	}
	if q.path == "" {
		q.path = "/items"
	}
	hr, err := http.NewRequestWithContext(ctx, q.method, e.srv.URL+q.path, strings.NewReader(q.body))
	if err != nil {
		return response{}, err
	}
	if q.caller != "" {
		hr.Header.Set(callerHeader, q.caller)
	}
	if q.key != "" {
		v := q.key
		if !q.rawKey {
			if v, err = httpint.FormatKey(q.key); err != nil {
				return response{}, err
			}
		}
		hr.Header.Set(httpint.KeyHeader, v)
	}
	for k, v := range q.header {
		hr.Header.Set(k, v)
	}
	resp, err := e.client.Do(hr)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

// do is send for the test goroutine.
func (e *env) do(t testing.TB, q req) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := e.send(ctx, q)
	if err != nil {
		t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	return r
}

// wantProblem checks a problem answer: status, Content-Type, type URI,
// title and status member, Retry-After as the outcome table says, and no
// key in it.
func wantProblem(t testing.TB, r response, name, key string) httpint.Problem {
	t.Helper()
	var o httpint.Rendering
	for _, x := range httpint.Renderings() {
		if x.Name == name {
			o = x
		}
	}
	p := r.problem(t)
	if r.status != o.Status || p.Status != o.Status || p.Type != httpint.ProblemTypeBase+name || p.Title != o.Title || p.Detail == "" {
		t.Fatalf("status %d, problem %+v; want %d %s", r.status, p, o.Status, name)
	}
	if ra := r.header.Get("Retry-After"); (ra != "") != o.RetryAfter {
		t.Errorf("%s: Retry-After %q, want one: %v", name, ra, o.RetryAfter)
	}
	if len(key) >= 4 && strings.Contains(r.body, key) {
		t.Errorf("the problem holds the key: %s", r.body)
	}
	return p
}

// sqliteEnv is an env on SQLite with a short lock wait.
func sqliteEnv(t *testing.T, wrap func(*ledger.Store) ledger.Ledger, opts ...keyed.ServerOption) *env {
	t.Helper()
	tg := testdb.Targets()[0]
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	return newEnv(t, te, wrap, append([]keyed.ServerOption{keyed.WithLockWait(300 * time.Millisecond)}, opts...)...)
}

// rawRequest is a POST /items as caller with body, without a key.
func (e *env) rawRequest(t testing.TB, caller, body string) *http.Request {
	t.Helper()
	hr, err := http.NewRequest(http.MethodPost, e.srv.URL+"/items", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set(callerHeader, caller)
	return hr
}

// doRaw sends hr.
func (e *env) doRaw(t testing.TB, hr *http.Request) response {
	t.Helper()
	resp, err := e.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func ioNopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// newRecorderRequest runs a keyed request with ctx straight through the
// server's handler and returns what it wrote.
func newRecorderRequest(t testing.TB, e *env, ctx context.Context) response {
	t.Helper()
	hr := httptest.NewRequestWithContext(ctx, http.MethodPost, "/items", strings.NewReader("ended"))
	hr.Header.Set(callerHeader, "alice")
	hr.Header.Set(httpint.KeyHeader, `"ended"`)
	rec := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(rec, hr)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}
