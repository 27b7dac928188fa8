package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/ledger"
)

func mustID(t *testing.T, caller, method, key string) ledger.Identity {
	t.Helper()
	id, err := ledger.NewIdentity(caller, method, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestDerivedKey(t *testing.T) {
	const m = "/pay.v1.Payments/Transfer"
	base := mustID(t, "alice", m, "secret-key-1")
	k, err := base.DerivedKey("charge")
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic: the same identity, built again, gives the same key.
	again, err := mustID(t, "alice", m, "secret-key-1").DerivedKey("charge")
	if err != nil || again != k {
		t.Fatalf("not deterministic: %q vs %q (%v)", k, again, err)
	}
	// A valid idempotency key, which says nothing of the upstream key.
	if _, err := ledger.NewIdentity("svc", m, k); err != nil {
		t.Fatalf("derived key %q is not a valid key: %v", k, err)
	}
	if !strings.HasPrefix(k, ledgerkit.DerivedKeyPrefix) || len(k) != len(ledgerkit.DerivedKeyPrefix)+52 || strings.Contains(k, "secret") {
		t.Fatalf("derived key %q", k)
	}
	seen := map[string]string{k: "base"}
	for name, id := range map[string]ledger.Identity{
		"caller": mustID(t, "bob", m, "secret-key-1"),
		"method": mustID(t, "alice", "/pay.v1.Payments/Refund", "secret-key-1"),
		"key":    mustID(t, "alice", m, "secret-key-2"),
	} {
		d, err := id.DerivedKey("charge")
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[d]; dup {
			t.Errorf("%s: same derived key as %s", name, prev)
		}
		seen[d] = name
	}
	for _, step := range []string{"refund", "charge ", "Charge", "charge\u00e9"} {
		d, err := base.DerivedKey(step)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[d]; dup {
			t.Errorf("step %q: same derived key as %s", step, prev)
		}
		seen[d] = "step " + step
	}
	// Purposes are separated: a message id is never a downstream key.
	a, _ := base.Derive("downstream-key", "x")
	b, _ := base.Derive("outbox-message", "x")
	if a == b {
		t.Error("two purposes derive the same value")
	}
}

func TestDerivedKeyInvalid(t *testing.T) {
	id := mustID(t, "alice", "/p.S/M", "k")
	for _, step := range []string{"", strings.Repeat("x", ledgerkit.MaxNameLen+1), "a\nb", "\xff"} {
		if _, err := id.DerivedKey(step); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("step %q: %v, want ErrInvalid", step, err)
		}
	}
	if _, err := id.DerivedKey(strings.Repeat("x", ledgerkit.MaxNameLen)); err != nil {
		t.Errorf("longest step: %v", err)
	}
	if _, err := (ledger.Identity{}).DerivedKey("x"); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("zero identity: %v", err)
	}
}

func TestOperationContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := ledger.OperationFromContext(ctx); ok {
		t.Fatal("empty context has an operation")
	}
	if _, ok := ledger.OperationFromContext(ledger.ContextWithOperation(ctx, ledger.Identity{})); ok {
		t.Fatal("zero identity counts as an operation")
	}
	id := mustID(t, "alice", "/p.S/M", "k")
	got, ok := ledger.OperationFromContext(ledger.ContextWithOperation(ctx, id))
	if !ok || got.ID() != id.ID() {
		t.Fatalf("got %v %v", got, ok)
	}
}
