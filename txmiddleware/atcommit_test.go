package txmiddleware_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// Claim at commit, one call after another: the first executes; a retry
// runs the work once more, rolls it back and replays the stored result; a
// claim-first runner replays it too, and the other way round; another
// request with the key runs the work, rolls it back and is ErrKeyReused; a
// final error is recorded in a fresh transaction and replayed.
func TestClaimAtCommit(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 4, func(t *testing.T, e *env) {
		ctx := context.Background()
		r := e.runner(t, txmiddleware.WithClaimAtCommit())
		first := e.runner(t)
		var runs atomic.Int64

		out, err := r.Run(ctx, req(t, "acc"), e.bizWork("acc", 1, &runs))
		if err != nil || !out.Executed || out.Replayed || out.Attempts != 1 || runs.Load() != 1 {
			t.Fatalf("first call: %+v %v, %d runs", out, err, runs.Load())
		}
		stored := out.Result
		for i, rr := range []*txmiddleware.Runner{r, first} {
			out, err := rr.Run(ctx, req(t, "acc"), e.bizWork("acc", 2, &runs))
			if err != nil || !out.Replayed || out.Executed || !sameResult(out.Result, stored) || out.CompletedAt.IsZero() {
				t.Fatalf("retry %d: %+v %v, want a replay of %+v", i, out, err, stored)
			}
		}
		if runs.Load() != 2 || e.BizRows(t, "acc") != 1 {
			t.Fatalf("%d runs, %d business rows; want 2 (the claim-at-commit retry ran the work), 1", runs.Load(), e.BizRows(t, "acc"))
		}

		// Recorded claim first, replayed at commit.
		if out, err := first.Run(ctx, req(t, "first"), e.bizWork("first", 1, &runs)); err != nil || !out.Executed {
			t.Fatalf("claim first: %+v %v", out, err)
		}
		if out, err := r.Run(ctx, req(t, "first"), e.bizWork("first", 2, &runs)); err != nil || !out.Replayed || string(out.Result.Response) != "done first by 1" {
			t.Fatalf("claim at commit after claim first: %+v %v", out, err)
		}
		if n := e.BizRows(t, "first"); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}

		// Another request with the key.
		other := ledger.ClaimRequest{Identity: req(t, "acc").Identity, Fingerprint: ledger.FingerprintOf([]byte("another request"))}
		if out, err := r.Run(ctx, other, e.bizWork("acc", 3, &runs)); !errors.Is(err, ledger.ErrKeyReused) || out.Executed || out.Replayed {
			t.Fatalf("another request: %+v %v, want ErrKeyReused", out, err)
		}
		if n := e.BizRows(t, "acc"); n != 1 {
			t.Fatalf("%d business rows after the reused key, want 1", n)
		}

		// A final error.
		var fruns atomic.Int64
		fwork := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
			fruns.Add(1)
			if err := e.WriteBiz(ctx, tx, "final", 1); err != nil {
				return ledger.Result{}, err
			}
			return ledger.Result{}, &finalErr{codeFailedPrecondition, "insufficient funds"}
		}
		out, err = r.Run(ctx, req(t, "final"), fwork)
		assertFinal(t, "final error", err, codeFailedPrecondition, "insufficient funds")
		if !out.Executed || out.Attempts != 1 || fruns.Load() != 1 || e.BizRows(t, "final") != 0 {
			t.Fatalf("final error: %+v, %d runs, %d business rows", out, fruns.Load(), e.BizRows(t, "final"))
		}
		out, err = r.Run(ctx, req(t, "final"), fwork)
		assertFinal(t, "final error replayed", err, codeFailedPrecondition, "insufficient funds")
		if !out.Replayed || e.BizRows(t, "final") != 0 {
			t.Fatalf("final error replayed: %+v, %d business rows", out, e.BizRows(t, "final"))
		}
		out, err = first.Run(ctx, req(t, "final"), fwork)
		assertFinal(t, "final error replayed claim first", err, codeFailedPrecondition, "insufficient funds")
		if !out.Replayed {
			t.Fatalf("final error replayed claim first: %+v", out)
		}
		testdb.WaitIdle(t, e.DB)
	})
}

// noRecorder is a Ledger without Record.
type noRecorder struct{ ledger.Ledger }

// WithClaimAtCommit needs a ledger with Record.
func TestClaimAtCommitNeedsRecorder(t *testing.T) {
	t.Parallel()
	forEachTarget(t, 1, func(t *testing.T, e *env) {
		if r, err := txmiddleware.New(e.DB, noRecorder{e.l}, txmiddleware.WithClaimAtCommit()); !errors.Is(err, txmiddleware.ErrInvalidConfig) || r != nil {
			t.Fatalf("%v %v, want ErrInvalidConfig", r, err)
		}
	}, "sqlite")
}
