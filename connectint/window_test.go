package connectint_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// The window's headers, as docs/connect.md names them.
const (
	firstSentHeader = "Idempotency-Key-First-Sent"
	lifetimeHeader  = "Idempotency-Key-Lifetime"
)

// windowEnv serves on tg with connectint.NewServer (the ledger states its
// window through it) and the ledger's options.
func windowEnv(t *testing.T, tg testdb.Target, cat *policy.Catalog, opts ...ledger.Option) *env {
	t.Helper()
	te := testdb.NewEnv(t, tg.Name, tg.Dialect, tg.Open(t, 8))
	store := newStore(t, te, opts...)
	s, err := connectint.NewServer(te.DB, store, cat, connectint.CallerFromTrustedHeader(callerHeader), keyed.WithLockWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return serveServer(t, te, s)
}

// lifetimeOf returns the lifetime the answer carries: in the error's
// metadata, or in the response's trailer.
func lifetimeOf(resp *connect.Response[walletpb.DepositReply], err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Meta().Get(lifetimeHeader)
	}
	if resp != nil {
		return resp.Trailer().Get(lifetimeHeader)
	}
	return ""
}

func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// testLateRetry: a late retry (a key born before the ledger's window), on
// every protocol: refused with IDEMPOTENCY_KEY_EXPIRED (FAILED_PRECONDITION)
// without running the handler or storing anything; a resolve of it
// answers the same, never NOT_FOUND; the kit's client reports the outcome
// after one attempt, with no resolve.
func testLateRetry(t *testing.T, tg testdb.Target) {
	ctx := context.Background()
	e := windowEnv(t, tg, catalog(t))
	lifetime := seconds(24*time.Hour - time.Minute)
	for _, protocol := range protocols {
		for _, birth := range []string{"UUIDv7", "first-sent"} {
			t.Run(protocol+"/"+birth, func(t *testing.T) {
				req := func() *connect.Request[walletpb.DepositRequest] {
					r := request("alice", keybirth.New(time.Now().Add(-48*time.Hour)), "late", 1)
					if birth == "first-sent" {
						r.Header().Set(connectint.KeyHeader, "late-"+protocol)
						r.Header().Set(firstSentHeader, keybirth.FormatFirstSent(time.Now().Add(-48*time.Hour)))
					}
					return r
				}
				resp, err := e.client(protocol).CallUnary(ctx, req())
				wantError(t, err, connect.CodeFailedPrecondition, keyed.KeyExpired.Row().Reason)
				if got := lifetimeOf(resp, err); got != lifetime {
					t.Errorf("%s %q, want %s", lifetimeHeader, got, lifetime)
				}
				r := req()
				r.Header().Set(connectint.ResolveHeader, "1")
				_, err = e.client(protocol).CallUnary(ctx, r)
				wantError(t, err, connect.CodeFailedPrecondition, keyed.KeyExpired.Row().Reason)

				before := e.server.Stats()
				cl, c := e.kitClient(t, policy.OwnerApplication, protocol, fastClient()...)
				_, err = c.CallUnary(ctx, req())
				wantError(t, err, connect.CodeFailedPrecondition, keyed.KeyExpired.Row().Reason)
				ci := wantCallInfo(t, err, keyed.KeyExpired.Row().Reason, policy.DoNotRetry)
				after := e.server.Stats()
				if ci.Outcome != keyed.KeyExpired || ci.Attempts != 1 || ci.Resolves != 0 || cl.Stats().Resolves != 0 ||
					after.Refused-before.Refused != 1 || after.Resolves != before.Resolves {
					t.Errorf("client: CallInfo %+v, stats %+v; server %+v → %+v: want one attempt, no resolve", ci, cl.Stats(), before, after)
				}
				if e.runs.Load() != 0 || e.BizRows(t, "late") != 0 || e.LedgerRows(t) != 0 {
					t.Fatalf("a late retry ran or stored: %d runs, %d rows, %d entries", e.runs.Load(), e.BizRows(t, "late"), e.LedgerRows(t))
				}
			})
		}
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
// its identity (a resolve must send the call's); malformed or sent twice,
// the key is invalid; every answer that reached the ledger carries the
// key's lifetime, a refusal before it none; a per-method retention and a
// refusal of keys without a birth apply.
func TestWindowHeaders(t *testing.T) {
	ctx := context.Background()
	cat, err := catalog(t).With(policy.MethodPolicy{FullMethod: walletpb.DepositMethod, Kind: policy.KindKeyed, Retention: time.Hour,
		UnknownBirth: policy.RefuseUnknownBirth})
	if err != nil {
		t.Fatal(err)
	}
	e := windowEnv(t, testdb.Targets()[0], cat, ledger.WithRetention(2*time.Hour))
	lifetime := seconds(time.Hour - time.Minute)
	sent := keybirth.FormatFirstSent(time.Now().Add(-time.Minute))
	call := func(key string, resolve bool, firstSent ...string) (*connect.Response[walletpb.DepositReply], error) {
		r := request("alice", key, "w", 1)
		for _, v := range firstSent {
			r.Header().Add(firstSentHeader, v)
		}
		if resolve {
			r.Header().Set(connectint.ResolveHeader, "1")
		}
		return e.client("connect").CallUnary(ctx, r)
	}
	resp, err := call("k", false, sent)
	if err != nil || lifetimeOf(resp, err) != lifetime {
		t.Fatalf("call: %v, lifetime %q", err, lifetimeOf(resp, err))
	}
	if resp, err = call("k", true, sent); err != nil || !replayed(resp.Trailer()) || lifetimeOf(resp, err) != lifetime {
		t.Fatalf("resolve with the call's first-sent: %v; want the stored answer and the lifetime", err)
	}
	resp, err = call("k", true, keybirth.FormatFirstSent(time.Now().Add(-30*time.Minute)))
	wantError(t, err, connect.CodeNotFound, keyed.NotFound.Row().Reason)
	if lifetimeOf(resp, err) != lifetime {
		t.Errorf("not found: lifetime %q", lifetimeOf(resp, err))
	}
	for _, fs := range [][]string{{"yesterday"}, {sent, sent}} {
		resp, err := call("k2", false, fs...)
		wantError(t, err, connect.CodeInvalidArgument, keyed.KeyInvalid.Row().Reason)
		if lifetimeOf(resp, err) != "" {
			t.Errorf("first-sent %q: a refusal before the ledger carries a lifetime", fs)
		}
	}
	// The method's own window: 1 h.
	resp, err = call(keybirth.New(time.Now().Add(-90*time.Minute)), false)
	wantError(t, err, connect.CodeFailedPrecondition, keyed.KeyExpired.Row().Reason)
	if lifetimeOf(resp, err) != lifetime {
		t.Errorf("expired: lifetime %q", lifetimeOf(resp, err))
	}
	// Keys without a birth are refused.
	_, err = call("random", false)
	ce := wantError(t, err, connect.CodeInvalidArgument, keyed.KeyInvalid.Row().Reason)
	if !strings.Contains(ce.Message(), firstSentHeader) {
		t.Errorf("message %q does not name %s", ce.Message(), firstSentHeader)
	}
	if e.BizRows(t, "w") != 1 {
		t.Errorf("%d rows, want 1", e.BizRows(t, "w"))
	}
}
