package pgxledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// Transactions returns pgx's keyed.Transactions: Runners over pool with
// the Store s, so that every transport of the kit runs its keyed calls in
// pipelined pgx transactions (grpcint.NewServerFor, httpint.NewFor). The
// handlers find their transaction with TxFromContext. It states s's
// result limit (txledger.ResultSizer).
func Transactions(pool *pgxpool.Pool, s *Store) keyed.Transactions { return transactions{pool, s} }

type transactions struct {
	pool *pgxpool.Pool
	s    *Store
}

func (t transactions) Dialect() dialects.Dialect {
	if t.s == nil {
		return nil
	}
	return t.s.core.Dialect()
}

func (t transactions) MaxResultSize() int {
	if t.s == nil {
		return 0
	}
	return t.s.core.MaxResultSize()
}

// LedgerWindow passes on the Store's retention and clock skew, so that a
// server over these Transactions learns its window.
func (t transactions) LedgerWindow() (retention, skew time.Duration, ok bool) {
	if t.s == nil {
		return 0, 0, false
	}
	r, k := t.s.core.Window()
	return r, k, true
}

func (t transactions) NewRunner(opts ...txmiddleware.Option) (keyedtx.Runner, error) {
	r, err := NewRunner(t.pool, t.s, opts...)
	if err != nil {
		return nil, err
	}
	return keyedRunner{r}, nil
}

// keyedRunner is a Runner as a keyedtx.Runner.
type keyedRunner struct{ *Runner }

// Lookup is the runner's: see txmiddleware.Runner's Lookup.
func (r keyedRunner) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return r.Runner.r.Lookup(ctx, id)
}

// InFlight is the runner's: see txmiddleware.Runner's InFlight.
func (r keyedRunner) InFlight(id ledger.Identity) bool { return r.Runner.r.InFlight(id) }

func (r keyedRunner) Run(ctx context.Context, req ledger.ClaimRequest, work keyedtx.Work) (txmiddleware.RunResult, error) {
	return r.Runner.Run(ctx, req, func(ctx context.Context, _ pgx.Tx) (ledger.Result, error) { return work(ctx) })
}
