package txrun_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/txrun"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

type nopTx struct{}

type nopDriver struct{ d dialects.Dialect }

func (d nopDriver) Dialect() dialects.Dialect { return d.d }
func (d nopDriver) BeginClaim(ctx context.Context, began txrun.Began, req ledger.ClaimRequest) (txrun.Unit[nopTx], *ledger.Claim, error) {
	if _, err := began(nil); err != nil {
		return nil, nil, err
	}
	return nopUnit{}, acquired, nil
}
func (d nopDriver) Begin(ctx context.Context, began txrun.Began) (txrun.Unit[nopTx], error) {
	if _, err := began(nil); err != nil {
		return nil, err
	}
	return nopUnit{}, nil
}
func (d nopDriver) Lookup(ctx context.Context, began txrun.Began, id ledger.Identity) (*ledger.Entry, error) {
	return nil, ledger.ErrNotFound
}

var acquired = &ledger.Claim{Outcome: ledger.Acquired}

type nopUnit struct{}

func (nopUnit) Tx() nopTx { return nopTx{} }
func (nopUnit) CompleteCommit(ctx context.Context, c *ledger.Claim, r ledger.Result, before func(context.Context) error) error {
	return before(ctx)
}
func (nopUnit) RecordCommit(ctx context.Context, req ledger.ClaimRequest, r ledger.Result, before func(context.Context) error) (*ledger.Claim, error) {
	return recorded, before(ctx)
}
func (nopUnit) Rollback(ctx context.Context) {}

var recorded = &ledger.Claim{Outcome: ledger.Recorded}

// BenchmarkRunOverhead is the runner's own work per call, on a driver that
// does no I/O.
func BenchmarkRunOverhead(b *testing.B) {
	for _, at := range []bool{false, true} {
		name := "claim-first"
		var opts []txmiddleware.Option
		if at {
			name, opts = "claim-at-commit", []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}
		}
		b.Run(name, func(b *testing.B) {
			r, err := txrun.New(func(txrun.Settings) (txrun.Driver[nopTx], error) {
				return nopDriver{postgres.New()}, nil
			}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			work := func(ctx context.Context, tx nopTx) (ledger.Result, error) { return ledger.Result{}, nil }
			ctx := context.Background()
			var g atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine its own key, as concurrent calls have.
				id, err := ledger.NewIdentity("svc-a", "/pay.v1.Payments/Create", "k-"+strconv.FormatInt(g.Add(1), 10))
				if err != nil {
					b.Error(err)
					return
				}
				req := ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("x"))}
				for pb.Next() {
					if _, err := r.Run(ctx, req, work); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
