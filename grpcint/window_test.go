package grpcint_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// The window's metadata keys, as docs/grpc.md names them.
const (
	firstSentMD = "idempotency-key-first-sent"
	lifetimeMD  = "idempotency-key-lifetime"
)

// windowEnv serves the wallet on tg with a ledger of the default window
// (24 h, skew 1 min) and returns the env and its ledger's entry count.
func windowEnv(t *testing.T, tg testdb.Target) (*env, func() int) {
	t.Helper()
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	e := serve(t, db, tg.Dialect, table, biz, keyed.WithLockWait(300*time.Millisecond))
	return e, func() int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM " + tg.Dialect.QuoteIdent(table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// wantLifetime checks the trailer's idempotency-key-lifetime.
func wantLifetime(t *testing.T, trl metadata.MD, want time.Duration) {
	t.Helper()
	if got := trl.Get(lifetimeMD); len(got) != 1 || got[0] != strconv.FormatInt(int64(want/time.Second), 10) {
		t.Errorf("trailer %s: %v, want %v", lifetimeMD, got, int64(want/time.Second))
	}
}

// testLateRetry: a late retry (a key born before the ledger's window):
// refused with IDEMPOTENCY_KEY_EXPIRED without running the handler or
// storing anything, a resolve of it answers the same (never NOT_FOUND),
// and the kit's client reports the outcome after one attempt, with no
// resolve.
func testLateRetry(t *testing.T, tg testdb.Target) {
	ctx := context.Background()
	e, entries := windowEnv(t, tg)
	lifetime := 24*time.Hour - time.Minute
	for _, c := range []struct {
		name string
		key  string
		md   []string
	}{
		{"UUIDv7", keybirth.New(time.Now().Add(-48 * time.Hour)), nil},
		{"first-sent", "late-random-key", []string{firstSentMD, keybirth.FormatFirstSent(time.Now().Add(-48 * time.Hour))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cctx := metadata.AppendToOutgoingContext(as(ctx, "alice", c.key), c.md...)
			var trl metadata.MD
			_, err := e.pc.Deposit(cctx, deposit("late", 1), grpc.Trailer(&trl))
			wantStatus(t, err, codes.FailedPrecondition, keyed.KeyExpired.Row().Reason)
			wantLifetime(t, trl, lifetime)
			if e.rows(t, "late") != 0 || entries() != 0 {
				t.Fatalf("a late retry ran or stored: %d deposits, %d entries", e.rows(t, "late"), entries())
			}
			trl = nil
			_, err = e.pc.Deposit(metadata.AppendToOutgoingContext(cctx, grpcint.ResolveHeader, "1"), deposit("late", 1), grpc.Trailer(&trl))
			wantStatus(t, err, codes.FailedPrecondition, keyed.KeyExpired.Row().Reason)
			wantLifetime(t, trl, lifetime)

			// The kit's client: the outcome after exactly one attempt, and no
			// resolve sent.
			before := e.server.Stats()
			cl, pc := appClient(t, e.addr, fastClient()...)
			_, err = pc.Deposit(cctx, deposit("late", 1))
			wantStatus(t, err, codes.FailedPrecondition, keyed.KeyExpired.Row().Reason)
			ci := wantCallInfo(t, err, keyed.KeyExpired.Row().Reason, policy.DoNotRetry)
			after := e.server.Stats()
			if ci.Outcome != keyed.KeyExpired || ci.Attempts != 1 || ci.Resolves != 0 || cl.Stats().Resolves != 0 ||
				after.Refused-before.Refused != 1 || after.Resolves != before.Resolves {
				t.Errorf("client: CallInfo %+v, stats %+v; server %+v → %+v: want one attempt, no resolve", ci, cl.Stats(), before, after)
			}
			if e.rows(t, "late") != 0 || entries() != 0 {
				t.Fatalf("a late retry ran or stored: %d deposits, %d entries", e.rows(t, "late"), entries())
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

// TestWindowMetadata: the first-sent metadata is the key's birth and part
// of its identity (a resolve must send the call's); malformed or sent
// twice, the key is invalid; a key born in the future past the skew is
// invalid; every answer that reached the ledger carries the key's
// lifetime in the trailer, a refusal before it none.
func TestWindowMetadata(t *testing.T) {
	ctx := context.Background()
	e, _ := windowEnv(t, testdb.Targets()[0])
	lifetime := 24*time.Hour - time.Minute
	sent := keybirth.FormatFirstSent(time.Now().Add(-time.Minute))
	call := func(key string, resolve bool, md ...string) (metadata.MD, error) {
		if resolve {
			md = append(md, grpcint.ResolveHeader, "1")
		}
		var trl metadata.MD
		_, err := e.pc.Deposit(metadata.AppendToOutgoingContext(as(ctx, "alice", key), md...), deposit("w", 1), grpc.Trailer(&trl))
		return trl, err
	}
	trl, err := call("k", false, firstSentMD, sent)
	if err != nil {
		t.Fatal(err)
	}
	wantLifetime(t, trl, lifetime)
	if trl, err = call("k", false, firstSentMD, sent); err != nil || len(trl.Get(grpcint.ReplayedHeader)) != 1 {
		t.Fatalf("retry with the same first-sent: %v, trailer %v; want a replay", err, trl)
	}
	wantLifetime(t, trl, lifetime)
	if trl, err = call("k", true, firstSentMD, sent); err != nil || len(trl.Get(grpcint.ReplayedHeader)) != 1 {
		t.Fatalf("resolve with the call's first-sent: %v, trailer %v; want the stored answer", err, trl)
	}
	trl, err = call("k", true, firstSentMD, keybirth.FormatFirstSent(time.Now().Add(-time.Hour)))
	wantStatus(t, err, codes.NotFound, keyed.NotFound.Row().Reason)
	wantLifetime(t, trl, lifetime)
	for name, md := range map[string][]string{
		"malformed": {firstSentMD, "yesterday"},
		"twice":     {firstSentMD, sent, firstSentMD, sent},
	} {
		trl, err := call("k2", false, md...)
		wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
		if len(trl.Get(lifetimeMD)) != 0 {
			t.Errorf("%s: a refusal before the ledger carries %v", name, trl.Get(lifetimeMD))
		}
	}
	_, err = call(keybirth.New(time.Now().Add(time.Hour)), false)
	wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
	if e.rows(t, "w") != 1 {
		t.Errorf("%d deposits, want 1", e.rows(t, "w"))
	}
}

// TestMethodWindow: the catalog's per-method retention is refused longer
// than the ledger's, and a key born before it is refused as expired before
// the claim; a method that refuses keys without a birth refuses a random
// key sent without a first-sent time.
func TestMethodWindow(t *testing.T) {
	ctx := context.Background()
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table), ledger.WithRetention(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	long, err := cat.With(policy.MethodPolicy{FullMethod: walletpb.DepositMethod, Kind: policy.KindKeyed, Retention: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcint.NewServer(db, store, long, grpcint.CallerFromTrustedHeader(callerHeader)); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Fatalf("a method retention longer than the ledger's: %v", err)
	}
	short, err := cat.With(policy.MethodPolicy{FullMethod: walletpb.DepositMethod, Kind: policy.KindKeyed, Retention: time.Hour,
		UnknownBirth: policy.RefuseUnknownBirth})
	if err != nil {
		t.Fatal(err)
	}
	// Through keyed.SQL (NewServerFor) the server learns the ledger's
	// window as NewServer does: the same refusal of a longer retention.
	if _, err := grpcint.NewServerFor(keyed.SQL(db, store), long, grpcint.CallerFromTrustedHeader(callerHeader)); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Fatalf("NewServerFor, a method retention longer than the ledger's: %v", err)
	}
	s, err := grpcint.NewServerFor(keyed.SQL(db, store), short, grpcint.CallerFromTrustedHeader(callerHeader))
	if err != nil {
		t.Fatal(err)
	}
	e := serveKit(t, db, tg.Dialect, biz, s, nil)
	var trl metadata.MD
	_, err = e.pc.Deposit(as(ctx, "alice", keybirth.New(time.Now().Add(-90*time.Minute))), deposit("m", 1), grpc.Trailer(&trl))
	wantStatus(t, err, codes.FailedPrecondition, keyed.KeyExpired.Row().Reason)
	wantLifetime(t, trl, time.Hour-time.Minute)
	_, err = e.pc.Deposit(as(ctx, "alice", "random"), deposit("m", 1))
	st := wantStatus(t, err, codes.InvalidArgument, keyed.KeyInvalid.Row().Reason)
	if want := "Idempotency-Key-First-Sent"; !strings.Contains(st.Message(), want) {
		t.Errorf("message %q does not name %s", st.Message(), want)
	}
	trl = nil
	if _, err := e.pc.Deposit(as(ctx, "alice", keyed.NewKey()), deposit("m", 1), grpc.Trailer(&trl)); err != nil {
		t.Fatal(err)
	}
	wantLifetime(t, trl, time.Hour-time.Minute)
	if e.rows(t, "m") != 1 {
		t.Errorf("%d deposits, want 1", e.rows(t, "m"))
	}
}

// TestClientResolvesWithFirstSent: the kit's client sends the call's
// first-sent metadata on its resolve too (it is part of the identity):
// an answer lost after COMMIT is resolved to the committed one, never run
// again.
func TestClientResolvesWithFirstSent(t *testing.T) {
	tg := testdb.Targets()[0]
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	e := serveLedger(t, db, store, biz, loseFirstAnswer(), keyed.WithLockWait(300*time.Millisecond))
	c, pc := appClient(t, e.addr, fastClient()...)
	ctx := metadata.AppendToOutgoingContext(as(context.Background(), "alice", "random-key"),
		firstSentMD, keybirth.FormatFirstSent(time.Now().Add(-time.Minute)))
	if _, err := pc.Deposit(ctx, deposit("fs", 1)); err != nil {
		ci, _ := grpcint.CallInfoOf(err)
		t.Fatalf("%v (%+v): want the committed answer", err, ci)
	}
	if st := c.Stats(); st.Resolved != 1 || e.rows(t, "fs") != 1 {
		t.Errorf("client stats %+v, %d deposits: want one resolved call, one deposit", st, e.rows(t, "fs"))
	}
}

// TestWindowMetadataKeys: grpcint's metadata keys are the window's
// headers in gRPC's lower case.
func TestWindowMetadataKeys(t *testing.T) {
	if firstSentMD != strings.ToLower(keybirth.FirstSentHeader) || lifetimeMD != strings.ToLower(keyedcore.LifetimeHeader) {
		t.Errorf("%s, %s: not %s, %s in lower case", firstSentMD, lifetimeMD, keybirth.FirstSentHeader, keyedcore.LifetimeHeader)
	}
}
