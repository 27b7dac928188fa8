package pgxledger

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// Work is the caller's mutation, run in tx, the transaction that holds
// the claim: [txmiddleware.Work] for pgx. It returns the result to record
// or an error, may run more than once before one run commits (keep every
// side effect inside tx), and must not commit or roll back tx (its Commit
// and Rollback return an error: the Runner ends it) nor use it after
// returning. ctx carries tx for deeper code (see [TxFromContext]).
type Work func(ctx context.Context, tx pgx.Tx) (ledger.Result, error)

// Runner runs a keyed unit on a *pgxpool.Pool: claim, work and completion
// (or, with txmiddleware.WithClaimAtCommit, work and record) as one
// transaction, with the behaviour of txmiddleware.Runner (its options,
// final errors and their codec, transient retries, the lock-wait bound,
// ErrCommitUnknown, replays) and pipelined, so that a keyed call costs the
// round trips of the bare transaction:
//
//	claim first:     {BEGIN, claim} → work → {complete, COMMIT}
//	claim at commit: BEGIN → work → {record, COMMIT}
//
// ({…}: sent in one round trip). A replay claim first costs two round
// trips ({BEGIN, claim}, {read, ROLLBACK}) and runs no work. It holds no
// connection between calls and is safe for concurrent use.
type Runner struct {
	r *txmiddleware.TxRunner[pgx.Tx]
}

// NewRunner returns a Runner for pool, the database that holds both the
// ledger's table and the work's tables, with the Store s. It takes
// txmiddleware's options; WithIsolation's level must be one PostgreSQL
// offers. Configuration errors match txmiddleware.ErrInvalidConfig.
func NewRunner(pool *pgxpool.Pool, s *Store, opts ...txmiddleware.Option) (*Runner, error) {
	if pool == nil || s == nil {
		return nil, fmt.Errorf("%w: pool and store must not be nil", txmiddleware.ErrInvalidConfig)
	}
	r, err := txmiddleware.NewTxRunner(func(set txmiddleware.TxSettings) (txmiddleware.TxDriver[pgx.Tx], error) {
		iso, err := IsoLevel(set.Isolation)
		if err != nil {
			return nil, err
		}
		return &runDriver{s: s, p: pipeline{s: s, pool: pool, opts: pgx.TxOptions{IsoLevel: iso}, owned: true}, set: set}, nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return &Runner{r: r}, nil
}

// IsoLevel returns pgx's name of database/sql's isolation level l
// ("" for sql.LevelDefault, the database's default), or an error for a
// level PostgreSQL has not.
func IsoLevel(l sql.IsolationLevel) (pgx.TxIsoLevel, error) {
	switch l {
	case sql.LevelDefault:
		return "", nil
	case sql.LevelReadUncommitted:
		return pgx.ReadUncommitted, nil
	case sql.LevelReadCommitted:
		return pgx.ReadCommitted, nil
	case sql.LevelRepeatableRead:
		return pgx.RepeatableRead, nil
	case sql.LevelSerializable:
		return pgx.Serializable, nil
	}
	return "", fmt.Errorf("pgxledger: PostgreSQL has no isolation level %v", l)
}

// Run claims req's identity and, when this call acquires it, runs work and
// records its result, all in one transaction, with the outcomes of
// txmiddleware.Runner's Run.
func (r *Runner) Run(ctx context.Context, req ledger.ClaimRequest, work Work) (txmiddleware.RunResult, error) {
	return r.r.Run(ctx, req, txmiddleware.TxWork[pgx.Tx](work))
}

// TxFromContext returns the transaction that a Runner passes to the work,
// from the work's context or one derived from it: txmiddleware's
// TxFromContext for pgx.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := txmiddleware.TxFrom[pgx.Tx](ctx)
	return tx, ok && tx != nil
}

// runDriver is the Runner's txmiddleware.TxDriver: the Store's pipelined
// steps on the pool.
type runDriver struct {
	s   *Store
	p   pipeline
	set txmiddleware.TxSettings
}

func (d *runDriver) Dialect() dialects.Dialect { return d.s.Dialect() }

// bounded sets the runner's lock-wait bound in req.
func (d *runDriver) bounded(req ledger.ClaimRequest) ledger.ClaimRequest {
	if d.set.LockWait > 0 {
		req.LockWait = d.set.LockWait
	}
	return req
}

func (d *runDriver) BeginClaim(ctx context.Context, req ledger.ClaimRequest) (txmiddleware.TxUnit[pgx.Tx], *ledger.Claim, error) {
	tx, c, err := d.s.core.BeginClaim(ctx, d.p, d.bounded(req))
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	return &unit{d: d, tx: tx}, c, nil
}

func (d *runDriver) Begin(ctx context.Context) (txmiddleware.TxUnit[pgx.Tx], error) {
	tx, err := d.p.Begin(ctx)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("pgxledger: begin: %w (%w)", cerr, err)
		}
		return nil, fmt.Errorf("pgxledger: begin: %w", err)
	}
	return &unit{d: d, tx: tx}, nil
}

// unit is one attempt's transaction.
type unit struct {
	d  *runDriver
	tx pgx.Tx
}

func (u *unit) Tx() pgx.Tx { return u.tx }

func (u *unit) Rollback(ctx context.Context) { _ = u.d.p.Rollback(ctx, u.tx) }

func (u *unit) CompleteCommit(ctx context.Context, c *ledger.Claim, r ledger.Result, before func(context.Context) error) error {
	if err := before(ctx); err != nil {
		u.Rollback(ctx)
		return err
	}
	return u.d.s.core.CompleteCommit(ctx, u.d.p, u.tx, c, r)
}

func (u *unit) RecordCommit(ctx context.Context, req ledger.ClaimRequest, r ledger.Result, before func(context.Context) error) (*ledger.Claim, error) {
	if err := before(ctx); err != nil {
		u.Rollback(ctx)
		return nil, err
	}
	return u.d.s.core.RecordCommit(ctx, u.d.p, u.tx, u.d.bounded(req), r)
}
