package pgxledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/pgxkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/internal/txrun"
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
// trips ({BEGIN, claim}, {read, ROLLBACK}) and runs no work. The
// lock-wait bound (txmiddleware.WithLockWait) covers the wait for a
// connection of the pool (its Acquire) as txmiddleware.Runner's covers
// database/sql's: past it the call fails with an error matching
// ledger.ErrInProgress when a call with the same identity is in flight
// on the runner, else txmiddleware.ErrBusy; the claim's own lock waits
// get what the acquire left of the bound, rounded up to an eighth. It
// holds no connection between calls and is safe for concurrent use.
type Runner struct {
	r *txrun.Runner[pgx.Tx]
}

// NewRunner returns a Runner for pool, the database that holds both the
// ledger's table and the work's tables, with the Store s. It takes
// txmiddleware's options; WithIsolation's level must be one PostgreSQL
// offers. Configuration errors match txmiddleware.ErrInvalidConfig.
func NewRunner(pool *pgxpool.Pool, s *Store, opts ...txmiddleware.Option) (*Runner, error) {
	if pool == nil || s == nil {
		return nil, fmt.Errorf("%w: pool and store must not be nil", txmiddleware.ErrInvalidConfig)
	}
	r, err := txrun.New(func(set txrun.Settings) (txrun.Driver[pgx.Tx], error) {
		iso, err := pgxkit.IsoLevel(set.Isolation)
		if err != nil {
			return nil, err
		}
		return &runDriver{s: s, p: pipeline{s: s, pool: pool, opts: pgx.TxOptions{IsoLevel: iso}, owned: true}}, nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return &Runner{r: r}, nil
}

// Run claims req's identity and, when this call acquires it, runs work and
// records its result, all in one transaction, with the outcomes of
// txmiddleware.Runner's Run.
func (r *Runner) Run(ctx context.Context, req ledger.ClaimRequest, work Work) (txmiddleware.RunResult, error) {
	out, err := r.r.Run(ctx, req, txrun.Work[pgx.Tx](work))
	return txmiddleware.RunResult(out), err
}

// TxFromContext returns the transaction that a Runner passes to the work,
// from the work's context or one derived from it: txmiddleware's
// TxFromContext for pgx.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := txrun.TxFrom[pgx.Tx](ctx)
	return tx, ok && tx != nil
}

// runDriver is the Runner's txrun.Driver: the Store's pipelined
// steps on the pool.
type runDriver struct {
	s *Store
	p pipeline
}

func (d *runDriver) Dialect() dialects.Dialect { return d.s.core.Dialect() }

// bounded sets the claim's lock-wait bound, what the wait for a
// connection left of the runner's (see txrun.Began), in req.
func bounded(req ledger.ClaimRequest, wait time.Duration) ledger.ClaimRequest {
	if wait > 0 {
		req.LockWait = wait
	}
	return req
}

// acquire takes a connection of the pool for one attempt, within the
// runner's lock-wait bound: the wait for it is the attempt's wait for a
// connection (BEGIN goes with the claim, or just after, on it). It
// returns the pipeline that begins on it, the connection (to release
// unless the pipeline took it) and the claim's bound.
func (d *runDriver) acquire(ctx context.Context, began txrun.Began) (pipeline, *heldConn, time.Duration, error) {
	c, err := d.p.acquire(ctx)
	wait, gerr := began(err)
	if gerr != nil {
		if err == nil {
			c.Release()
		}
		return pipeline{}, nil, 0, gerr
	}
	p := d.p
	p.held = &heldConn{c: c}
	return p, p.held, wait, nil
}

func (d *runDriver) BeginClaim(ctx context.Context, began txrun.Began, req ledger.ClaimRequest) (txrun.Unit[pgx.Tx], *ledger.Claim, error) {
	p, held, wait, err := d.acquire(ctx, began)
	if err != nil {
		return nil, nil, err
	}
	defer held.release()
	tx, c, err := d.s.core.BeginClaim(ctx, txledger.AnyPipeline[pgx.Tx](p), bounded(req, wait))
	if err != nil || !c.Acquired() {
		return nil, c, err
	}
	return &unit{d: d, tx: tx, wait: wait}, c, nil
}

func (d *runDriver) Begin(ctx context.Context, began txrun.Began) (txrun.Unit[pgx.Tx], error) {
	p, held, wait, err := d.acquire(ctx, began)
	if err != nil {
		return nil, err
	}
	defer held.release()
	tx, err := p.Begin(ctx)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("pgxledger: begin: %w (%w)", cerr, err)
		}
		return nil, fmt.Errorf("pgxledger: begin: %w", err)
	}
	return &unit{d: d, tx: tx, wait: wait}, nil
}

// Lookup reads id's entry on a connection of the pool, acquired within
// the runner's bound.
func (d *runDriver) Lookup(ctx context.Context, began txrun.Began, id ledger.Identity) (*ledger.Entry, error) {
	c, err := d.p.acquire(ctx)
	if _, gerr := began(err); gerr != nil {
		if err == nil {
			c.Release()
		}
		return nil, gerr
	}
	defer c.Release()
	return d.s.Lookup(ctx, c, id)
}

// unit is one attempt's transaction.
type unit struct {
	d    *runDriver
	tx   pgx.Tx
	wait time.Duration // the record's lock-wait bound (claim at commit)
}

func (u *unit) Tx() pgx.Tx { return u.tx }

func (u *unit) Rollback(ctx context.Context) { _ = u.d.p.Rollback(ctx, u.tx) }

func (u *unit) CompleteCommit(ctx context.Context, c *ledger.Claim, r ledger.Result, before func(context.Context) error) error {
	if err := before(ctx); err != nil {
		u.Rollback(ctx)
		return err
	}
	return u.d.s.core.CompleteCommit(ctx, txledger.AnyPipeline[pgx.Tx](u.d.p), u.tx, c, r)
}

func (u *unit) RecordCommit(ctx context.Context, req ledger.ClaimRequest, r ledger.Result, before func(context.Context) error) (*ledger.Claim, error) {
	if err := before(ctx); err != nil {
		u.Rollback(ctx)
		return nil, err
	}
	return u.d.s.core.RecordCommit(ctx, txledger.AnyPipeline[pgx.Tx](u.d.p), u.tx, bounded(req, u.wait), r)
}
