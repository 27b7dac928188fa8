package keyedcore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// hiding wraps a real runner: its first Lookup reports nothing committed
// (the entry not yet visible to the read), its second fails as a lost
// connection does.
type hiding struct {
	keyedtx.Runner
	lookups int
}

var errLost = errors.New("connection lost")

func (h *hiding) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	h.lookups++
	switch h.lookups {
	case 1:
		return nil, ledger.ErrNotFound
	case 2:
		return nil, errLost
	}
	return h.Runner.Lookup(ctx, id)
}

type hidingTx struct {
	keyed.Transactions
	h *hiding
}

func (t hidingTx) NewRunner(opts ...txmiddleware.Option) (keyedtx.Runner, error) {
	r, err := t.Transactions.NewRunner(opts...)
	if err != nil {
		return nil, err
	}
	t.h.Runner = r
	return t.h, nil
}

// TestResolveProbeMeetsCommittedEntry: a resolve whose read found nothing
// probes with a claim of its own; when the probe meets the call's
// committed entry and the read after it fails, the answer is the read's
// failure (ask again), never IDEMPOTENCY_KEY_REUSED: the probe's
// fingerprint is never a request's, so meeting another one is never the
// caller's key reused. A chaos run's failover on MariaDB returned that
// false definite answer for a call that had committed.
func TestResolveProbeMeetsCommittedEntry(t *testing.T) {
	ctx := context.Background()
	tg := testdb.Targets()[0] // SQLite: always available
	db := tg.Open(t, 4)
	store, err := ledger.New(tg.Dialect, ledger.WithTable(testdb.NewTable(t, db, tg.Dialect)))
	if err != nil {
		t.Fatal(err)
	}
	h := &hiding{}
	s, err := keyedcore.NewServer(hidingTx{keyed.SQL(db, store), h}, keyedcore.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const method = "/pay.v1.Payments/Transfer"
	id, err := ledger.NewIdentity("tenant-a", method, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	req := ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("transfer 100"))}
	_, call := s.Begin(ctx, method, false)
	a := call.Run(ctx, req, func(context.Context) (ledger.Result, error) {
		return ledger.Result{Response: []byte("done")}, nil
	})
	if a.Err != nil {
		t.Fatalf("the call: %v", a.Err)
	}
	_, resolve := s.Begin(ctx, method, true)
	a = resolve.Resolve(ctx, id)
	if a.Outcome == keyed.KeyReused {
		t.Fatalf("resolve of a committed call answered %v (%v)", a.Outcome, a.Err)
	}
	if !errors.Is(a.Err, errLost) || a.Outcome != keyed.StorageUnavailable {
		t.Fatalf("resolve: %v (%v), want the read's failure", a.Outcome, a.Err)
	}
	// Asked again, the resolve reads the stored answer.
	_, resolve = s.Begin(ctx, method, true)
	if a = resolve.Resolve(ctx, id); a.Outcome != keyed.Replayed {
		t.Fatalf("second resolve: %v (%v), want the stored answer", a.Outcome, a.Err)
	}
}
