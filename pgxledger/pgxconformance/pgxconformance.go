// Package pgxconformance runs the ledger's conformance suite (package
// conformance) over pgx: its units of work claim in pgx.Tx transactions
// of a *pgxpool.Pool, against the kit's pgxledger.Store. Create the
// target with [NewTarget]; run it claim first or at commit
// (Target.AtCommit), in the caller's transaction or pipelined
// (Target.Pipelined: the claim sent with BEGIN, the completion or the
// record with COMMIT).
//
//	db := stdlib.OpenDBFromPool(pool) // the suite's own statements
//	defer db.Close()
//	tg := pgxconformance.NewTarget("pgx", pool, db)
//	conformance.Run(t, tg)
//	conformance.Run(t, tg.Pipelined().AtCommit())
//
// It imports package conformance, and with it package testing: import it
// from tests and tools only.
package pgxconformance

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/conformance"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/internal/conformancekit"
	"github.com/opledger/opledger/internal/pgxkit"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/pgxledger"
)

// pgxDriver is the suite's driver (conformancekit.Driver) for pgx:
// transactions of Pool.
// It also bounds a transaction's lock waits (SET LOCAL lock_timeout) and
// reports the pool's connections to the suite.
type pgxDriver struct {
	Pool *pgxpool.Pool
}

var (
	_ conformancekit.Driver[pgx.Tx]          = pgxDriver{}
	_ conformancekit.BoundedBeginner[pgx.Tx] = pgxDriver{}
	_ conformancekit.PoolReporter            = pgxDriver{}
)

func (d pgxDriver) options(level sql.IsolationLevel) (pgx.TxOptions, error) {
	iso, err := pgxkit.IsoLevel(level)
	return pgx.TxOptions{IsoLevel: iso}, err
}

// Begin begins a transaction on the pool at level.
func (d pgxDriver) Begin(ctx context.Context, level sql.IsolationLevel) (pgx.Tx, error) {
	opts, err := d.options(level)
	if err != nil {
		return nil, err
	}
	return d.Pool.BeginTx(ctx, opts)
}

// BeginBounded begins a transaction whose lock waits end after wait.
func (d pgxDriver) BeginBounded(ctx context.Context, wait time.Duration) (pgx.Tx, error) {
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	ms := max(int64((wait+time.Millisecond-1)/time.Millisecond), 1)
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(ms, 10)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// Commit commits tx.
func (pgxDriver) Commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

// Rollback rolls tx back.
func (pgxDriver) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

// Exec runs query in tx.
func (pgxDriver) Exec(ctx context.Context, tx pgx.Tx, query string, args ...any) error {
	_, err := tx.Exec(ctx, query, args...)
	return err
}

// QueryInt runs query in tx and returns its integer.
func (pgxDriver) QueryInt(ctx context.Context, tx pgx.Tx, query string, args ...any) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// SessionID returns the backend pid of tx's session.
func (pgxDriver) SessionID(ctx context.Context, tx pgx.Tx) (int64, error) {
	var pid int64
	err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// PoolStats returns the pool's acquired connections and its size.
func (d pgxDriver) PoolStats() (inUse, max int) {
	s := d.Pool.Stat()
	return int(s.AcquiredConns()), int(s.MaxConns())
}

// pgxLedger is a pgxledger.Store on a pool as the suite's ledger under
// test, with its pipelined forms and its sweep.
type pgxLedger struct {
	Store *pgxledger.Store
	Pool  *pgxpool.Pool
}

var (
	_ conformancekit.TxLedger[pgx.Tx]  = pgxLedger{}
	_ conformancekit.Pipeliner[pgx.Tx] = pgxLedger{}
	_ txledger.TxRecorder[pgx.Tx]      = pgxLedger{}
	_ txledger.LockWaitBounder         = pgxLedger{}
)

// Claim is the Store's.
func (l pgxLedger) Claim(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return l.Store.Claim(ctx, tx, req)
}

// Complete is the Store's.
func (l pgxLedger) Complete(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return l.Store.Complete(ctx, tx, c, r)
}

// Record is the Store's.
func (l pgxLedger) Record(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return l.Store.Record(ctx, tx, req, r)
}

// Dialect is the Store's: PostgreSQL's.
func (l pgxLedger) Dialect() dialects.Dialect { return pgDialect }

// pgDialect is the dialect of every pgxledger.Store.
var pgDialect = postgres.New()

// BoundsLockWait reports true, as the Store's Claim, Record and pipelined
// forms honour ClaimRequest.LockWait in their own statements.
func (l pgxLedger) BoundsLockWait() bool { return true }

// Lookup reads through the pool.
func (l pgxLedger) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return l.Store.Lookup(ctx, l.Pool, id)
}

// Sweep sweeps through the pool.
func (l pgxLedger) Sweep(ctx context.Context, batch int) (int64, error) {
	return l.Store.Sweep(ctx, l.Pool, batch)
}

// BeginClaim is the Store's on the pool.
func (l pgxLedger) BeginClaim(ctx context.Context, level sql.IsolationLevel, req ledger.ClaimRequest) (pgx.Tx, *ledger.Claim, error) {
	opts, err := pgxDriver{}.options(level)
	if err != nil {
		return nil, nil, err
	}
	return l.Store.BeginClaim(ctx, l.Pool, opts, req)
}

// BeginAt is the Store's Begin on the pool.
func (l pgxLedger) BeginAt(ctx context.Context, level sql.IsolationLevel) (pgx.Tx, error) {
	opts, err := pgxDriver{}.options(level)
	if err != nil {
		return nil, err
	}
	return pgxkit.StoreBegin(l.Store, ctx, l.Pool, opts)
}

// CompleteCommit is the Store's.
func (l pgxLedger) CompleteCommit(ctx context.Context, tx pgx.Tx, c *ledger.Claim, r ledger.Result) error {
	return l.Store.CompleteCommit(ctx, tx, c, r)
}

// RecordCommit is the Store's.
func (l pgxLedger) RecordCommit(ctx context.Context, tx pgx.Tx, req ledger.ClaimRequest, r ledger.Result) (*ledger.Claim, error) {
	return pgxkit.StoreRecordCommit(l.Store, ctx, tx, req, r)
}

// NewTarget returns the conformance target of the kit's pgxledger.Store
// on pool, db being a database/sql handle on the same database (for the
// suite's own statements; stdlib.OpenDBFromPool(pool) is one). Extra
// options are applied after the suite's table, retention, clock and size
// limit.
func NewTarget(name string, pool *pgxpool.Pool, db *sql.DB, opts ...ledger.Option) conformance.Target {
	return targetFor(name, pool, db, func(cfg conformancekit.LedgerConfig) (conformancekit.TxLedger[pgx.Tx], error) {
		s, err := pgxledger.New(append([]ledger.Option{
			ledger.WithTable(cfg.Table),
			ledger.WithRetention(cfg.Retention),
			ledger.WithClock(cfg.Clock),
			ledger.WithMaxResultSize(cfg.MaxResultSize),
		}, opts...)...)
		if err != nil {
			return nil, err
		}
		return pgxLedger{Store: s, Pool: pool}, nil
	})
}

// targetFor returns the conformance target of the ledgers newLedger
// builds on pool, db as for NewTarget: the suite's own tests run their
// broken pgx ledgers through it (export_test.go).
func targetFor(name string, pool *pgxpool.Pool, db *sql.DB, newLedger func(conformancekit.LedgerConfig) (conformancekit.TxLedger[pgx.Tx], error)) conformance.Target {
	return conformancekit.TxTarget[pgx.Tx](name, db, postgres.New(), pgxDriver{Pool: pool}, newLedger).(conformance.Target)
}
