package httpint_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
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
