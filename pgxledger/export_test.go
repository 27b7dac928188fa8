package pgxledger

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/ledger"
)

// Begin is begin: a transaction whose RecordCommit costs one round trip.
func (s *Store) Begin(ctx context.Context, pool *pgxpool.Pool, opts pgx.TxOptions) (pgx.Tx, error) {
	return s.begin(ctx, pool, opts)
}

// RecordCommit is recordCommit: the record and COMMIT in one round trip.
func (s *Store) RecordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return s.recordCommit(ctx, tx, req, r)
}

// Lookup is the runner's Lookup (txmiddleware.Runner's, on pgx).
func (r *Runner) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return r.r.Lookup(ctx, id)
}

// InFlight is the runner's InFlight (txmiddleware.Runner's, on pgx).
func (r *Runner) InFlight(id ledger.Identity) bool { return r.r.InFlight(id) }
