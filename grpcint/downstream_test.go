package grpcint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

func TestDownstreamKeyOutsideKeyedCall(t *testing.T) {
	if _, err := keyed.DownstreamKey(context.Background(), "charge"); !errors.Is(err, ledger.ErrNoOperation) {
		t.Fatalf("got %v, want ErrNoOperation", err)
	}
	id, err := ledger.NewIdentity("c", "/p.S/M", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.DownstreamKey(ledger.ContextWithOperation(context.Background(), id), ""); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("empty step: got %v, want ErrInvalid", err)
	}
}

// TestDownstreamKeysOption: from a context that carries an operation, a
// client with WithDownstreamKeys calls a keyed method with the key derived
// from the operation and the method, the same on every call (so the
// second call replays); without the option, or with WithKey, it does not.
func TestDownstreamKeysOption(t *testing.T) {
	tg := testdb.Targets()[0]
	db := tg.Open(t, 4)
	table, biz := newTables(t, db, tg.Dialect)
	e := serve(t, db, tg.Dialect, table, biz)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := ledger.NewIdentity("front", "/front.v1.Front/Pay", "upstream-key")
	if err != nil {
		t.Fatal(err)
	}
	opCtx := ledger.ContextWithOperation(as(context.Background(), "svc", ""), upstream)
	derived, err := keyed.DownstreamKey(opCtx, walletpb.DepositMethod)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(key string) bool {
		t.Helper()
		id, err := ledger.NewIdentity("header:svc", walletpb.DepositMethod, key)
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Lookup(context.Background(), db, id)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	c, pc := appClient(t, e.addr, keyed.WithDownstreamKeys())
	r1, err := pc.Deposit(opCtx, deposit("chained", 5))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := pc.Deposit(opCtx, deposit("chained", 5))
	if err != nil {
		t.Fatal(err)
	}
	if r1.GetDepositId() != r2.GetDepositId() || c.Stats().Replayed != 1 {
		t.Fatalf("second call with the derived key did not replay: %v %v, replayed %d", r1, r2, c.Stats().Replayed)
	}
	if !lookup(derived) {
		t.Fatal("no ledger entry under the derived key")
	}
	// An explicit key wins over the derived one.
	if _, err := pc.Deposit(grpcint.WithKey(opCtx, "explicit"), deposit("explicit", 5)); err != nil {
		t.Fatal(err)
	}
	if !lookup("explicit") {
		t.Fatal("the explicit key was not used")
	}
	// Without the option, each call gets a fresh random key.
	_, plain := appClient(t, e.addr)
	p1, err := plain.Deposit(opCtx, deposit("chained", 5))
	if err != nil {
		t.Fatal(err)
	}
	if p1.GetDepositId() == r1.GetDepositId() {
		t.Fatal("a client without WithDownstreamKeys used the derived key")
	}
	// Outside a keyed call the option changes nothing: a random key.
	o1, err := pc.Deposit(as(context.Background(), "svc", ""), deposit("outside", 5))
	if err != nil {
		t.Fatal(err)
	}
	o2, err := pc.Deposit(as(context.Background(), "svc", ""), deposit("outside", 5))
	if err != nil || o1.GetDepositId() == o2.GetDepositId() {
		t.Fatalf("outside a keyed call two calls shared a key: %v %v %v", o1, o2, err)
	}
}
