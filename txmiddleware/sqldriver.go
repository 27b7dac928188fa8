package txmiddleware

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/txledger"
	"github.com/opledger/opledger/internal/txrun"
	"github.com/opledger/opledger/ledger"
)

// sqlDriver is the txrun.Driver of database/sql: a pool and a ledger.Ledger,
// one statement at a time.
type sqlDriver struct {
	db  *sql.DB
	l   ledger.Ledger
	d   dialects.Dialect
	iso sql.IsolationLevel
	rec txledger.Recorder   // set in claim-at-commit mode
	lw  dialects.LockWaiter // set when a lock wait bound is configured and the ledger cannot bound its claims
	// claimWait is the lock wait bound passed in every ClaimRequest, when
	// one is configured and the ledger bounds its claims itself.
	claimWait time.Duration
	lockWait  time.Duration
}

func newSQLDriver(db *sql.DB, l ledger.Ledger, s txrun.Settings) (*sqlDriver, error) {
	d := l.Dialect()
	if d == nil {
		return nil, fmt.Errorf("%w: the ledger has no dialect", ErrInvalidConfig)
	}
	drv := &sqlDriver{db: db, l: l, d: d, iso: s.Isolation, lockWait: s.LockWait}
	// The bound goes into the claim's own statement when the ledger can
	// put it there: the Claim, or in claim-at-commit mode the Record (and
	// the final error's claim); a ledger that bounds lock waits honours it
	// in both.
	if s.LockWait > 0 && txledger.BoundsLockWait(l) {
		drv.claimWait = s.LockWait // in the claim's statements: none of its own
	} else if s.LockWait > 0 {
		lw, ok := d.(dialects.LockWaiter)
		if !ok {
			return nil, fmt.Errorf("%w: WithLockWait: dialect %s cannot bound lock waits (no dialects.LockWaiter)", ErrInvalidConfig, d.Name())
		}
		drv.lw = lw
	}
	if s.ClaimAtCommit {
		rec, ok := l.(txledger.Recorder)
		if !ok {
			return nil, fmt.Errorf("%w: WithClaimAtCommit: the ledger (%T) has no Record method (ledger.Store's: claim at commit)", ErrInvalidConfig, l)
		}
		drv.rec = rec
	}
	return drv, nil
}

func (d *sqlDriver) Dialect() dialects.Dialect { return d.d }

// sqlUnit is one attempt's transaction.
type sqlUnit struct {
	d       *sqlDriver
	tx      *sql.Tx
	release func() // after the transaction ended (a bounded begin's)
	ended   bool
	// claimWait is the bound of the claim's (or the record's) lock waits
	// in its statements, when the ledger bounds them itself: what the wait
	// for a connection and BEGIN left of the runner's bound.
	claimWait time.Duration
}

// begin starts one attempt's transaction, with the lock-wait bound when
// one is configured, and reports to began once it has begun (or failed
// to): the runner's bound covers the wait for a pool connection and BEGIN
// itself (on SQLite, the wait for the write lock).
func (d *sqlDriver) begin(ctx context.Context, began txrun.Began) (*sqlUnit, error) {
	opts := &sql.TxOptions{Isolation: d.iso}
	u := &sqlUnit{d: d}
	var err error
	if d.lw != nil {
		u.tx, u.release, err = d.lw.BeginBounded(ctx, d.db, opts, d.lockWait)
	} else {
		u.tx, err = d.db.BeginTx(ctx, opts)
	}
	if u.release == nil {
		u.release = func() {}
	}
	wait, gerr := began(err)
	if gerr != nil {
		if err == nil {
			// The bound passed first: whatever began is rolled back.
			_ = u.tx.Rollback()
			u.release()
		}
		return nil, gerr
	}
	if d.claimWait > 0 {
		u.claimWait = wait
	}
	return u, nil
}

func (d *sqlDriver) Begin(ctx context.Context, began txrun.Began) (txrun.Unit[*sql.Tx], error) {
	u, err := d.begin(ctx, began)
	if err != nil {
		return nil, err
	}
	return u, nil
}

func (d *sqlDriver) BeginClaim(ctx context.Context, began txrun.Began, req ledger.ClaimRequest) (txrun.Unit[*sql.Tx], *ledger.Claim, error) {
	u, err := d.begin(ctx, began)
	if err != nil {
		return nil, nil, err
	}
	if u.claimWait > 0 {
		req.LockWait = u.claimWait
	}
	c, err := d.l.Claim(ctx, u.tx, req)
	if err != nil {
		u.Rollback(ctx)
		return nil, nil, err
	}
	if !c.Acquired() {
		// Nothing was written: end the transaction without a commit.
		u.Rollback(ctx)
		return nil, c, nil
	}
	return u, c, nil
}

// Lookup reads id's entry on a connection of the pool, had within the
// runner's bound when it has one.
func (d *sqlDriver) Lookup(ctx context.Context, began txrun.Began, id ledger.Identity) (*ledger.Entry, error) {
	if d.lockWait <= 0 {
		if _, err := began(nil); err != nil {
			return nil, err
		}
		return d.l.Lookup(ctx, d.db, id)
	}
	conn, err := d.db.Conn(ctx)
	if _, gerr := began(err); gerr != nil {
		if err == nil {
			conn.Close()
		}
		return nil, gerr
	}
	defer conn.Close()
	return d.l.Lookup(ctx, conn, id)
}

func (u *sqlUnit) Tx() *sql.Tx { return u.tx }

// Rollback rolls the transaction back, then releases the bounded begin's
// setting and connection.
func (u *sqlUnit) Rollback(context.Context) {
	if u.ended {
		return
	}
	u.ended = true
	_ = u.tx.Rollback()
	u.release()
}

func (u *sqlUnit) CompleteCommit(ctx context.Context, c *ledger.Claim, r ledger.Result, before func(context.Context) error) error {
	if err := u.d.l.Complete(ctx, u.tx, c, r); err != nil {
		u.Rollback(ctx)
		return err
	}
	return u.commit(ctx, before)
}

func (u *sqlUnit) RecordCommit(ctx context.Context, req ledger.ClaimRequest, r ledger.Result, before func(context.Context) error) (*ledger.Claim, error) {
	if u.claimWait > 0 {
		req.LockWait = u.claimWait
	}
	rc, err := u.d.rec.Record(ctx, u.tx, req, r)
	if err != nil || !rc.Recorded() {
		// Another call completed it first (or the record failed): the
		// work must not commit.
		u.Rollback(ctx)
		return rc, err
	}
	if err := u.commit(ctx, before); err != nil {
		return nil, err
	}
	return rc, nil
}

// commit runs before, then commits, and releases.
func (u *sqlUnit) commit(ctx context.Context, before func(context.Context) error) error {
	if err := before(ctx); err != nil {
		u.Rollback(ctx)
		return err
	}
	u.ended = true
	defer u.release()
	if err := u.tx.Commit(); err != nil {
		return u.d.commitErr(ctx, err)
	}
	return nil
}

// commitErr sorts a failed COMMIT: not sent (the transaction was already
// rolled back), refused by the database (a definite rollback, retried
// when transient), or unknown.
func (d *sqlDriver) commitErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, sql.ErrTxDone):
		// database/sql rolled the transaction back when its context ended,
		// before COMMIT could be sent: not committed.
		if cerr := txrun.CtxErr(ctx, "commit", err); cerr != nil {
			return cerr
		}
		return fmt.Errorf("txmiddleware: commit: %w", err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The context was live just before COMMIT and ended during it: the
		// driver may have sent COMMIT and given up waiting for its answer.
		// The error matches the context's error too.
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	case errors.Is(err, driver.ErrBadConn) || d.d.Classify(err) == dialects.ClassConnection:
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	case ctx.Err() != nil:
		// The database answered COMMIT with an error after the context
		// ended (lib/pq cancels the statement: 57014): it rolled back.
		return txrun.CtxErr(ctx, "commit", err)
	}
	return txledger.NewDBError(d.d, "commit", err)
}
