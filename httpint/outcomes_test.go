package httpint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/keyedtest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// named is the classification's outcome called name.
func named(name string) keyed.Outcome {
	o, ok := keyed.Named(name)
	if !ok {
		panic("no outcome " + name)
	}
	return o
}

// neverRendered: HTTP never ends a request with o, and its table says why.
func neverRendered(t *testing.T, o keyed.Outcome) {
	t.Helper()
	if _, ok := httpint.RenderingOf(httpint.ProblemTypeBase + o.String()); ok {
		t.Errorf("%s is a problem of the middleware's", o)
	}
	for _, x := range httpint.Renderings() {
		if x.Name == o.String() {
			t.Errorf("%s is in the outcome table", o)
		}
	}
	if cells := httpint.TableCells(o.Row()); !strings.HasPrefix(cells[1], "never: ") {
		t.Errorf("%s: the table's rendering %q does not say why it never happens", o, cells[1])
	}
}

// TestOutcomeRows produces every outcome of package keyed's
// classification that HTTP renders through a real server on SQLite
// (PostgreSQL for the cut COMMIT) and checks the answer; for the others,
// that the middleware never answers with them.
func TestOutcomeRows(t *testing.T) {
	ctx := context.Background()
	alice := func(key, body string) req { return req{caller: "alice", key: key, body: body} }
	keyedtest.Rows(t, map[keyed.Outcome]func(t *testing.T){
		keyed.KeyedStream: func(t *testing.T) {
			// A keyed route's handler gets a buffering ResponseWriter: it
			// cannot stream, so the outcome never happens.
			e := sqliteEnv(t, nil)
			r := e.do(t, req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "stream"}})
			if r.status != 200 || r.body != "flusher=false hijacker=false" {
				t.Fatalf("%d %q", r.status, r.body)
			}
			neverRendered(t, keyed.KeyedStream)
		},
		keyed.NotExecuted: func(t *testing.T) {
			shed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				httpint.NotExecuted(w, 1500*time.Millisecond, "shedding load")
			}))
			defer shed.Close()
			resp, err := http.Post(shed.URL+"/items", "text/plain", strings.NewReader("r"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var p httpint.Problem
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			o, ok := httpint.RenderingOf(p.Type)
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || !ok || o.Name != keyed.NotExecuted.String() ||
				o.Next != keyed.Retry || o.Committed != "no" || p.Detail != "shedding load" {
				t.Fatalf("%d Retry-After %q %+v: %+v", resp.StatusCode, resp.Header.Get("Retry-After"), p, o)
			}
		},
		keyed.NotSent:            func(t *testing.T) { neverRendered(t, keyed.NotSent) },
		keyed.ServerAnswered:     func(t *testing.T) { neverRendered(t, keyed.ServerAnswered) },
		keyed.CallOutcomeUnknown: func(t *testing.T) { neverRendered(t, keyed.CallOutcomeUnknown) },
		named(keyed.Executed.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			r := e.do(t, alice("k1", "r1"))
			if r.status != 201 || r.replayed() || e.BizRows(t, "r1") != 1 {
				t.Fatalf("status %d, replayed %v, rows %d", r.status, r.replayed(), e.BizRows(t, "r1"))
			}
			// A final error status: stored, the handler's write undone.
			r = e.do(t, req{caller: "alice", key: "k2", body: "r2", header: map[string]string{testHeader: "status:409"}})
			if r.status != 409 || e.BizRows(t, "r2") != 0 {
				t.Fatalf("final status: %d, rows %d; want 409 and the write undone", r.status, e.BizRows(t, "r2"))
			}
			if s := e.mw.Stats(); s.Executed != 2 {
				t.Errorf("stats %+v", s)
			}
		},
		named(keyed.Replayed.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			first := e.do(t, alice("k", "r"))
			again := e.do(t, alice("k", "r"))
			if !again.replayed() || again.status != first.status || again.body != first.body || e.runs.Load() != 1 {
				t.Fatalf("replay %d %q (replayed %v), first %d %q; handler ran %d times", again.status, again.body, again.replayed(), first.status, first.body, e.runs.Load())
			}
			// A stored final error replays too, without running again.
			q := req{caller: "alice", key: "k409", body: "r409", header: map[string]string{testHeader: "status:409"}}
			f409, a409 := e.do(t, q), e.do(t, q)
			if !a409.replayed() || a409.status != 409 || a409.body != f409.body || e.runs.Load() != 2 {
				t.Fatalf("replayed final error: %d %q, handler ran %d times", a409.status, a409.body, e.runs.Load())
			}
		},
		named(keyed.NotStored.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			for _, status := range []string{"500", "503", "429", "401"} {
				q := req{caller: "alice", key: "k" + status, body: "r" + status, header: map[string]string{testHeader: "status:" + status}}
				r := e.do(t, q)
				if r.status == 0 || fmt.Sprint(r.status) != status || r.replayed() || !strings.Contains(r.body, "handler says") || e.BizRows(t, "r"+status) != 0 {
					t.Fatalf("status %d %q; want the handler's %s, rolled back", r.status, r.body, status)
				}
				q.header = nil
				if r := e.do(t, q); r.status != 201 || r.replayed() || e.BizRows(t, "r"+status) != 1 {
					t.Fatalf("retry after %s: %d (replayed %v); want the handler to run again", status, r.status, r.replayed())
				}
			}
		},
		named(keyed.HandlerPanic.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			q := req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "panic"}}
			if r, err := e.send(ctx, q); err == nil {
				t.Fatalf("a panicking handler answered %d %q; want the response aborted", r.status, r.body)
			}
			if n := e.BizRows(t, "r"); n != 0 || e.LedgerRows(t) != 0 {
				t.Fatalf("after a panic: %d business rows, %d ledger rows", n, e.LedgerRows(t))
			}
			q.header = nil
			if r := e.do(t, q); r.status != 201 || r.replayed() {
				t.Fatalf("retry after a panic: %d (replayed %v)", r.status, r.replayed())
			}
		},
		named(keyed.CallerMissing.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			wantProblem(t, e.do(t, req{key: "k", body: "r"}), keyed.CallerMissing.String(), "")
			bad := req{key: "k", body: "r", header: map[string]string{callerHeader: "a\x01b"}}
			if r, err := e.send(ctx, bad); err == nil && r.status != 401 && r.status != 400 {
				t.Fatalf("caller with a control character: %d", r.status)
			}
			if e.runs.Load() != 0 {
				t.Fatal("the handler ran")
			}
		},
		named(keyed.KeyMissing.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			wantProblem(t, e.do(t, req{caller: "alice", body: "r"}), keyed.KeyMissing.String(), "")
			wantProblem(t, e.do(t, req{method: "PUT", path: "/orders/7", caller: "alice", body: "r"}), keyed.KeyMissing.String(), "")
		},
		named(keyed.KeyInvalid.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			for _, v := range []string{"unquoted-key", `""`, `"a" "b"`, `"` + strings.Repeat("k", 256) + `"`, `"a";1`} {
				wantProblem(t, e.do(t, req{caller: "alice", key: v, rawKey: true, body: "r"}), keyed.KeyInvalid.String(), "")
			}
			// Two header fields.
			hr := e.rawRequest(t, "alice", "r")
			hr.Header.Add(httpint.KeyHeader, `"one"`)
			hr.Header.Add(httpint.KeyHeader, `"two"`)
			wantProblem(t, e.doRaw(t, hr), keyed.KeyInvalid.String(), "")
			if e.runs.Load() != 0 || e.LedgerRows(t) != 0 {
				t.Fatal("an invalid key reached the handler or the ledger")
			}
		},
		named(keyed.RequestTooLarge.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil, httpint.WithMaxRequestBody(16))
			wantProblem(t, e.do(t, alice("k", strings.Repeat("b", 17))), keyed.RequestTooLarge.String(), "")
			// Without a Content-Length (chunked): read, then refused.
			hr := e.rawRequest(t, "alice", "")
			hr.Body, hr.ContentLength = ioNopCloser(strings.Repeat("b", 100)), -1
			hr.Header.Set(httpint.KeyHeader, `"k2"`)
			wantProblem(t, e.doRaw(t, hr), keyed.RequestTooLarge.String(), "")
			if e.LedgerRows(t) != 0 || e.runs.Load() != 0 {
				t.Fatal("something was claimed for a body over the limit")
			}
			if r := e.do(t, alice("k", strings.Repeat("b", 16))); r.status != 201 {
				t.Fatalf("a body at the limit: %d", r.status)
			}
		},
		named(keyed.RequestUnreadable.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil, httpint.WithBodyCanonicalizer(httpint.CanonicalJSON))
			wantProblem(t, e.do(t, alice("k", "{not json")), keyed.RequestUnreadable.String(), "")
			// Bodies that encoding/json would merge with another (U+FFFD,
			// the last of two names): each refused, none claimed, so a
			// second one is never replayed the first one's answer.
			for _, body := range []string{`{"name":"\ud800"}`, `{"name":"\udc00"}`, "{\"name\":\"\xff\"}", `{"n":1,"n":2}`} {
				wantProblem(t, e.do(t, alice("k2", body)), keyed.RequestUnreadable.String(), "")
			}
			if e.runs.Load() != 0 || e.LedgerRows(t) != 0 {
				t.Fatal("a body the canonicaliser refused reached the handler or the ledger")
			}
		},
		named(keyed.NotKeyed.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			for _, method := range []string{"GET", "POST"} {
				q := req{method: method, path: "/items", caller: "alice", key: "k", header: map[string]string{httpint.ResolveHeader: "1"}}
				if method == "GET" {
					wantProblem(t, e.do(t, q), keyed.NotKeyed.String(), "")
				}
			}
			q := req{method: "DELETE", path: "/items", caller: "alice", key: "k", header: map[string]string{httpint.ResolveHeader: "1"}}
			wantProblem(t, e.do(t, q), keyed.NotKeyed.String(), "")
			if e.runs.Load() != 0 {
				t.Fatal("a resolve ran a handler")
			}
		},
		named(keyed.KeyReused.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			e.do(t, alice("k", "r1"))
			wantProblem(t, e.do(t, alice("k", "r2")), keyed.KeyReused.String(), "")
			if e.BizRows(t, "r2") != 0 {
				t.Fatal("a reused key ran the handler")
			}
		},
		named(keyed.InProgress.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			q := req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "block"}}
			done := make(chan response, 1)
			go func() { r, _ := e.send(ctx, q); done <- r }()
			<-e.entered
			wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: "r"}), keyed.InProgress.String(), "")
			close(e.release)
			if r := <-done; r.status != 201 {
				t.Fatalf("the first request: %d", r.status)
			}
			if r := e.do(t, req{caller: "alice", key: "k", body: "r"}); !r.replayed() {
				t.Fatal("after the first request committed, a retry does not replay")
			}
		},
		named(keyed.Incomplete.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			// An entry committed without a result, outside the middleware.
			tx, err := e.DB.Begin()
			if err != nil {
				t.Fatal(err)
			}
			id := testdb.ID(t, "header:alice", "POST /items", "k")
			if _, err := e.store.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("x"))}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			wantProblem(t, e.do(t, req{caller: "alice", key: "k", header: map[string]string{httpint.ResolveHeader: "1"}}), keyed.Incomplete.String(), "")
		},
		keyed.KeyExpired: func(t *testing.T) { testLateRetry(t, testdb.Targets()[0]) },
		named(keyed.TxAborted.String()): func(t *testing.T) {
			serialization := &ledger.DBError{Op: "claim", Class: dialects.ClassSerialization, Err: errors.New("could not serialize")}
			e := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: serialization} },
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(2), txmiddleware.WithTxBackoff(time.Millisecond, time.Millisecond)))
			wantProblem(t, e.do(t, alice("k", "r")), keyed.TxAborted.String(), "")
		},
		named(keyed.StorageBusy.String()): func(t *testing.T) { testPoolOfOne(t, testdb.Targets()[0]) },
		named(keyed.StorageUnavailable.String()): func(t *testing.T) {
			conn := &ledger.DBError{Op: "claim", Class: dialects.ClassConnection, Err: errors.New("connection refused")}
			e := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger { return testdb.FaultyLedger{Store: s, ClaimErr: conn} },
				keyed.WithTxOptions(txmiddleware.WithMaxTxAttempts(1)))
			wantProblem(t, e.do(t, alice("k", "r")), keyed.StorageUnavailable.String(), "")
		},
		named(keyed.CommitUnknown.String()): func(t *testing.T) { commitUnknown(t) },
		named(keyed.RequestEnded.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			q := req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "block"}}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { _, err := e.send(cctx, q); done <- err }()
			<-e.entered
			cancel() // the client goes away; the server's request context ends
			<-done
			testdb.WaitIdle(t, e.DB) // the handler returns once the server saw it, and the transaction ends
			if e.BizRows(t, "r") != 0 || e.LedgerRows(t) != 0 {
				t.Fatal("a request whose context ended committed")
			}
			// The answer the client no longer reads, seen from inside.
			rec := newRecorderRequest(t, e, cctx)
			wantProblem(t, rec, keyed.RequestEnded.String(), "")
		},
		named(keyed.ResponseTooLarge.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil, httpint.WithMaxResponseBody(100))
			wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "big"}}), keyed.ResponseTooLarge.String(), "")
			if e.LedgerRows(t) != 0 {
				t.Fatal("a response over the limit was stored")
			}
		},
		named(keyed.NotStorable.String()): func(t *testing.T) {
			// New refuses a body limit the ledger cannot store, so only
			// stored headers over StoredHeaderRoom get here.
			tg := testdb.Targets()[0]
			te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
			store, err := ledger.New(tg.Dialect, ledger.WithTable(te.Table), ledger.WithMaxResultSize(httpint.StoredHeaderRoom+256))
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, te, func(*ledger.Store) ledger.Ledger { return store }, httpint.WithMaxResponseBody(256))
			wantProblem(t, e.do(t, req{caller: "alice", key: "k", body: "r", header: map[string]string{testHeader: "big-headers"}}), keyed.NotStorable.String(), "")
			if e.LedgerRows(t) != 0 {
				t.Fatal("a response that could not be stored committed")
			}
			if r := e.do(t, alice("k2", "r")); r.status != 201 {
				t.Fatalf("a response within the limits: %d %q", r.status, r.body)
			}
		},
		named(keyed.LedgerMisuse.String()): func(t *testing.T) {
			e := sqliteEnv(t, func(s *ledger.Store) ledger.Ledger {
				return testdb.FaultyLedger{Store: s, CompleteErr: ledger.ErrNotAcquired}
			})
			wantProblem(t, e.do(t, alice("k", "r")), keyed.LedgerMisuse.String(), "")
		},
		named(keyed.ResultUnreadable.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			// A result stored under the route's identity by something else.
			tx, err := e.DB.Begin()
			if err != nil {
				t.Fatal(err)
			}
			id := testdb.ID(t, "header:alice", "POST /items", "k")
			c, err := e.store.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("x"))})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.store.Complete(ctx, tx, c, ledger.Result{Code: 200, Response: []byte("not ours"), TypeName: "pkg.Other"}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			wantProblem(t, e.do(t, req{caller: "alice", key: "k", header: map[string]string{httpint.ResolveHeader: "1"}}), keyed.ResultUnreadable.String(), "")
		},
		named(keyed.NotFound.String()): func(t *testing.T) {
			e := sqliteEnv(t, nil)
			resolve := req{caller: "alice", key: "never-sent", header: map[string]string{httpint.ResolveHeader: "1"}}
			wantProblem(t, e.do(t, resolve), keyed.NotFound.String(), "never-sent")
			first := e.do(t, alice("never-sent", "r"))
			got := e.do(t, resolve)
			if got.status != 201 || !got.replayed() || got.body != first.body || e.runs.Load() != 1 {
				t.Fatalf("resolve after the request: %d %q (replayed %v), first %q", got.status, got.body, got.replayed(), first.body)
			}
		},
	})
}

// commitUnknown cuts the connection while COMMIT is in flight, through
// pgx: the answer is 503 commit-outcome-unknown, and a resolve finds the
// committed response.
func commitUnknown(t *testing.T) {
	dsn := os.Getenv(testdb.EnvPostgres)
	if dsn == "" {
		testdb.Skip(t, testdb.EnvPostgres)
	}
	testdb.Parallel(t, "postgres", 4)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testdb.NewCutProxy(t, u.Host)
	u.Host = proxy.Addr()
	db := testdb.OpenDSN(t, "pgx", u.String(), 4)
	e := newEnv(t, testdb.NewEnv(t, "postgres/pgx", postgres.New(), db), nil)
	proxy.Arm()
	r := e.do(t, req{caller: "alice", key: "cut", body: "cut"})
	wantProblem(t, r, keyed.CommitUnknown.String(), "")
	if proxy.Cuts() != 1 {
		t.Fatalf("proxy cut %d connections, want 1", proxy.Cuts())
	}
	got := e.do(t, req{caller: "alice", key: "cut", header: map[string]string{httpint.ResolveHeader: "1"}})
	if got.status != 201 || !got.replayed() || e.BizRows(t, "cut") != 1 {
		t.Fatalf("resolve after the cut: %d %q; rows %d", got.status, got.body, e.BizRows(t, "cut"))
	}
}

// TestOutcomeTableIsTheDoc: the table in docs/http.md is package keyed's
// classification as httpint renders it.
func TestOutcomeTableIsTheDoc(t *testing.T) {
	keyedtest.WantTable(t, "../docs/http.md", "outcome-table", "keyed.Outcomes() as httpint renders them",
		[]string{"outcome", "status", "cause", "committed", "client's next step"}, httpint.TableCells)
}

// TestOutcomeTable: httpint's table is the classification's rows that HTTP
// produces, in its order, with its names, committed and next steps; an
// outcome the server pushes back on carries Retry-After; every outcome
// name of httpint is one of the classification's.
func TestOutcomeTable(t *testing.T) {
	var want []string
	for _, r := range keyed.Outcomes() {
		if !strings.HasPrefix(httpint.TableCells(r)[1], "never: ") {
			want = append(want, r.Name)
		}
	}
	var got []string
	for _, o := range httpint.Renderings() {
		got = append(got, o.Name)
		r := named(o.Name).Row()
		if o.Committed != string(r.Committed) || o.Next != r.Next || (r.Pushback && !o.RetryAfter) || !strings.HasPrefix(o.Cause, r.Cause) ||
			(o.Status == 0) != (o.Title == "") {
			t.Errorf("%s: %+v, row %+v", o.Name, o, r)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	for _, n := range []string{keyed.Executed.String(), keyed.Replayed.String(), keyed.NotStored.String(), keyed.HandlerPanic.String(),
		keyed.CallerMissing.String(), keyed.KeyMissing.String(), keyed.KeyInvalid.String(), keyed.RequestTooLarge.String(),
		keyed.RequestUnreadable.String(), keyed.NotKeyed.String(), keyed.KeyReused.String(), keyed.InProgress.String(),
		keyed.Incomplete.String(), keyed.TxAborted.String(), keyed.StorageBusy.String(), keyed.StorageUnavailable.String(),
		keyed.CommitUnknown.String(), keyed.RequestEnded.String(), keyed.ResponseTooLarge.String(), keyed.NotStorable.String(),
		keyed.LedgerMisuse.String(), keyed.ResultUnreadable.String(), keyed.NotFound.String(), keyed.NotExecuted.String()} {
		if _, ok := keyed.Named(n); !ok {
			t.Errorf("httpint's outcome %s is not the classification's", n)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, o := range httpint.Renderings() {
		got, ok := httpint.RenderingOf(o.Type())
		if ok != (o.Status != 0) || ok && got.Name != o.Name {
			t.Errorf("OutcomeOf(%q) = %+v, %v", o.Type(), got, ok)
		}
	}
	if _, ok := httpint.RenderingOf("about:blank"); ok {
		t.Error("OutcomeOf(about:blank)")
	}
	for _, n := range []keyed.Next{keyed.Stop, keyed.Retry, keyed.Resolve, 0} {
		if n.String() == "" {
			t.Errorf("Next(%d) has no name", int(n))
		}
	}
}
