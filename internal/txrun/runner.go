// Package txrun is the kit's runner of keyed transactions, generic over
// the transaction API: [Runner] runs claim, work and completion as one
// transaction, retrying transient failures, on the transactions a
// [Driver] begins and ends. txmiddleware.Runner is it over database/sql
// (its driver is txmiddleware's), pgxledger.Runner over pgx.Tx (pipelined).
// Create one with [New].
package txrun

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/wait"
	"github.com/opledger/opledger/ledger"
)

// Work is the caller's mutation for a transaction API of type TX
// (txmiddleware.Work for database/sql), run in tx, the transaction that
// holds the claim.
type Work[TX any] func(ctx context.Context, tx TX) (ledger.Result, error)

// Settings is what a [Runner] asks of its driver, from its options.
type Settings struct {
	// Isolation is the isolation level of every transaction
	// (txmiddleware.WithIsolation).
	Isolation sql.IsolationLevel
	// LockWait bounds how long a claim waits for another transaction that
	// holds the identity, zero for the database's own bound
	// (txmiddleware.WithLockWait).
	LockWait time.Duration
	// ClaimAtCommit is set for the claim-at-commit order
	// (txmiddleware.WithClaimAtCommit): the driver's ledger must then
	// record.
	ClaimAtCommit bool
}

// Driver is how a [Runner] runs the transactions of a keyed unit on
// one transaction API, of type TX, with one ledger: the seam that lets one
// runner serve database/sql (txmiddleware.Runner, whose driver is
// txmiddleware's) and pgx (package pgxledger's Runner, whose driver sends the claim with
// BEGIN and the completion with COMMIT). The runner owns everything else:
// the attempts and their backoff, final errors and their codec, the
// context's checks, the lock-wait bound over the wait for a connection
// and BEGIN (through [Began]), the calls in flight, the outcomes and their
// telemetry.
//
// A driver is built for one runner, from its settings, and must be safe
// for concurrent use.
type Driver[TX any] interface {
	// Dialect classifies the failures of the whole transaction.
	Dialect() dialects.Dialect
	// BeginClaim begins a transaction and claims req in it (claim first),
	// calling began once the transaction has begun (see [Began]) and
	// bounding the claim's lock waits with what it returns. On Acquired
	// it returns the open unit; on any other outcome (a replay, or an
	// error) nothing is left open and the unit is nil.
	BeginClaim(ctx context.Context, began Began, req ledger.ClaimRequest) (Unit[TX], *ledger.Claim, error)
	// Begin begins a transaction (claim at commit, whose work runs before
	// the ledger is touched), calling began as BeginClaim does; the unit's
	// RecordCommit bounds the record's lock waits with what it returned.
	Begin(ctx context.Context, began Began) (Unit[TX], error)
	// Lookup reads the committed entry of id with the ledger (its
	// Lookup) on a connection of the driver's pool, calling began once it
	// holds that connection; the claim bound began returns is unused.
	Lookup(ctx context.Context, began Began, id ledger.Identity) (*ledger.Entry, error)
}

// Unit is one attempt's open transaction, from a [Driver].
type Unit[TX any] interface {
	// Tx is the transaction the work runs in.
	Tx() TX
	// CompleteCommit completes c with r and commits, calling before just
	// before COMMIT is sent; when before returns an error, it rolls back
	// and returns that error. The unit has ended when it returns. An error
	// matching [ErrCommitUnknown] means COMMIT may have committed; any
	// other error means nothing did.
	CompleteCommit(ctx context.Context, c *ledger.Claim, r ledger.Result, before func(context.Context) error) error
	// RecordCommit records req completed with r and commits (claim at
	// commit), calling before as CompleteCommit does; when the record
	// finds the operation completed already (a replay, or an error such as
	// ledger.ErrKeyReused) it rolls back instead, the work's writes with
	// it. The unit has ended when it returns; errors as for
	// CompleteCommit.
	RecordCommit(ctx context.Context, req ledger.ClaimRequest, r ledger.Result, before func(context.Context) error) (*ledger.Claim, error)
	// Rollback ends the transaction without committing; once it has ended
	// it does nothing.
	Rollback(ctx context.Context)
}

// Runner runs claim, work and completion as one transaction, on the
// transaction API of its [Driver]: txmiddleware.Runner is one for
// database/sql, package pgxledger's Runner one for pgx. Its Run behaves
// as txmiddleware's Runner.Run documents.
// It holds no connection between calls and is safe for concurrent use.
type Runner[TX any] struct {
	drv    Driver[TX]
	cfg    Config
	obs    *observer
	waits  waits                           // the driver's dialect and the Runs in progress
	before func(ctx context.Context) error // beforeCommit, made once
}

// New returns a runner whose driver newDriver builds from the
// runner's settings (its options). A driver that cannot honour them
// returns an error, reported matching [ErrInvalidConfig], as is a bad
// option.
func New[TX any](newDriver func(Settings) (Driver[TX], error), opts ...Option) (*Runner[TX], error) {
	if newDriver == nil {
		return nil, fmt.Errorf("%w: driver must not be nil", ErrInvalidConfig)
	}
	cfg, err := Apply(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	drv, err := newDriver(Settings{Isolation: cfg.Isolation, LockWait: cfg.LockWait, ClaimAtCommit: cfg.AtCommit})
	if err != nil {
		if errors.Is(err, ErrInvalidConfig) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if drv == nil || drv.Dialect() == nil {
		return nil, fmt.Errorf("%w: the driver has no dialect", ErrInvalidConfig)
	}
	r := &Runner[TX]{drv: drv, cfg: cfg, waits: waits{d: drv.Dialect()}}
	r.obs = newObserver(r.waits.d, &r.cfg)
	r.before = r.beforeCommit
	return r, nil
}

type txKey[TX any] struct{}

// TxFrom returns the transaction of type TX that a [Runner] passes to
// the work, from the work's context or one derived from it
// (txmiddleware.TxFromContext for database/sql).
func TxFrom[TX any](ctx context.Context) (TX, bool) {
	tx, ok := ctx.Value(txKey[TX]{}).(TX)
	return tx, ok
}

// Run claims req's identity and, when this call acquires it, runs work and
// records its result, all in one transaction, with the outcomes of
// txmiddleware's Runner.Run.
func (r *Runner[TX]) Run(ctx context.Context, req ledger.ClaimRequest, work Work[TX]) (Result, error) {
	ctx, op := r.obs.begin(ctx, req)
	out, err := r.run(ctx, req, work)
	err = dialectkit.Explain(r.waits.d, err)
	r.obs.ran(ctx, op, req, out, err)
	return out, err
}

func (r *Runner[TX]) run(ctx context.Context, req ledger.ClaimRequest, work Work[TX]) (Result, error) {
	if work == nil {
		return Result{}, errors.New("txmiddleware: work must not be nil")
	}
	id := req.Identity.ID()
	r.waits.inflight.enter(id)
	defer r.waits.inflight.leave(id)
	var (
		out   Result
		final *finalError // set once the work returned a final error
	)
	for {
		out.Attempts++
		var (
			o   Result
			err error
		)
		o, err = r.once(ctx, req, work, final)
		o.Attempts = out.Attempts
		out = o
		if err == nil {
			return out, nil
		}
		var fe *finalError
		if errors.As(err, &fe) {
			// The work's final error, its transaction rolled back: record it
			// in a fresh transaction, at once (not a failure). The work
			// does not run again.
			final = fe
			out.Attempts--
			continue
		}
		if out.Executed || out.Replayed || !r.transient(ctx, err) {
			return out, err
		}
		if out.Attempts >= r.cfg.MaxAttempts {
			return out, giveUp(fmt.Sprintf("%d attempts failed", out.Attempts), err)
		}
		delay := r.cfg.Delay(out.Attempts)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
			return out, giveUp(fmt.Sprintf("no time left for attempt %d", out.Attempts+1), err)
		}
		if r.cfg.OnRetry != nil {
			r.cfg.OnRetry(ctx, out.Attempts, err, delay)
		}
		if serr := wait.Sleep(ctx, delay); serr != nil {
			return out, fmt.Errorf("txmiddleware: waiting to retry: %w (after: %v)", serr, err)
		}
	}
}

// transient reports whether the unit should run again after err.
func (r *Runner[TX]) transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrCommitUnknown) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ledger.ErrRetryable) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	switch r.waits.d.Classify(err) {
	case dialects.ClassSerialization, dialects.ClassDeadlock, dialects.ClassConnection:
		return true
	}
	return false
}

// beforeCommit runs the test hook and checks the context, just before
// COMMIT is sent.
func (r *Runner[TX]) beforeCommit(ctx context.Context) error {
	if r.cfg.BeforeCommit != nil {
		r.cfg.BeforeCommit(ctx)
	}
	return CtxErr(ctx, "commit", nil) // COMMIT not sent; the unit rolls back
}

// once runs the unit one time. With fe set it records that final error of
// an earlier run of the work, whose transaction was rolled back, in a
// fresh transaction instead of running the work: claim again and complete
// with the encoding. When another call completed the operation meanwhile,
// its result is the answer, as a replay.
func (r *Runner[TX]) once(ctx context.Context, req ledger.ClaimRequest, work Work[TX], fe *finalError) (out Result, err error) {
	if fe != nil && r.cfg.AfterFinalRollback != nil {
		r.cfg.AfterFinalRollback(ctx)
	}
	// The transaction lives in bctx, which the lock-wait bound's timer
	// cancels only while the transaction has not begun. Deferred first, so
	// that it runs once the unit has ended (the deferred rollback below).
	bctx, b := r.bound(ctx, req.Identity.ID())
	defer b.end()
	u, c, err := r.open(ctx, bctx, req, b)
	if err != nil {
		return out, err
	}
	if c != nil && !c.Acquired() {
		// Nothing was written, and the driver ended the transaction.
		return r.replayed(out, c)
	}
	ended := false
	defer func() {
		if !ended {
			u.Rollback(ctx) // also when work panics; the panic goes on
		}
	}()

	var (
		res  ledger.Result
		werr error
	)
	if fe != nil {
		res, werr = fe.enc, fe.err
	} else {
		tx := u.Tx()
		res, werr = work(ledger.ContextWithOperation(context.WithValue(ctx, txKey[TX]{}, tx), req.Identity), tx)
	}
	if werr != nil && fe == nil {
		ended, err = r.workFailed(ctx, u, werr)
		return out, err
	}
	ended = true // the driver ends the unit from here on
	return r.commit(ctx, out, req, u, c, res, werr)
}

// open begins the unit's transaction in bctx and, claim first, claims req
// in it; a replay comes back as a claim not acquired, its transaction
// ended by the driver. Claim at commit, it only begins (the claim is nil).
func (r *Runner[TX]) open(ctx, bctx context.Context, req ledger.ClaimRequest, b *bound) (Unit[TX], *ledger.Claim, error) {
	if r.cfg.AtCommit {
		u, err := r.drv.Begin(bctx, b.began)
		return u, nil, err
	}
	u, c, err := r.drv.BeginClaim(bctx, b.began, req)
	if err != nil {
		if isBoundErr(err, b.gerr) {
			return u, nil, err // the bound passed, or BEGIN failed
		}
		if cerr := CtxErr(ctx, "claim", err); cerr != nil {
			return u, nil, cerr
		}
		return u, nil, err // the ledger's errors, unchanged
	}
	r.obs.claimed(ctx, req, c)
	return u, c, nil
}

// workFailed is the error of a unit whose work failed with werr, and
// whether it rolled u back: a final error is rolled back here, so that
// its encoding is recorded in a fresh transaction (see run).
func (r *Runner[TX]) workFailed(ctx context.Context, u Unit[TX], werr error) (rolledBack bool, err error) {
	if cerr := CtxErr(ctx, "work", werr); cerr != nil {
		return false, cerr
	}
	if r.transient(ctx, werr) {
		return false, werr
	}
	if enc, ok := r.final(werr); ok {
		u.Rollback(ctx)
		return true, &finalError{enc: enc, err: werr}
	}
	return false, werr
}

// commit ends the unit whose work returned res (and werr, the final error
// being recorded): claim at commit, the completed entry sent with COMMIT;
// claim first, c's completion sent with COMMIT.
func (r *Runner[TX]) commit(ctx context.Context, out Result, req ledger.ClaimRequest, u Unit[TX], c *ledger.Claim, res ledger.Result, werr error) (Result, error) {
	if r.cfg.AtCommit {
		rc, err := u.RecordCommit(ctx, req, res, r.before)
		if err != nil {
			if cerr := CtxErr(ctx, "record", err); cerr != nil && !errors.Is(err, ErrCommitUnknown) {
				return out, cerr
			}
			return out, err // the driver rolled the work back
		}
		r.obs.claimed(ctx, req, rc)
		if !rc.Recorded() {
			// Another call completed it first: the work did not commit.
			return r.replayed(out, rc)
		}
	} else if err := u.CompleteCommit(ctx, c, res, r.before); err != nil {
		if cerr := CtxErr(ctx, "complete", err); cerr != nil && !errors.Is(err, ErrCommitUnknown) {
			return out, cerr
		}
		return out, err
	}
	out.Result, out.Executed = res, true
	return out, werr
}

// replayed is the answer for a replay of c's stored result.
func (r *Runner[TX]) replayed(out Result, c *ledger.Claim) (Result, error) {
	out.Result, out.Replayed, out.CompletedAt = c.Result, true, c.CompletedAt
	return out, r.replayErr(c.Result)
}

// final reports whether werr is final for the codec, with its encoding.
func (r *Runner[TX]) final(werr error) (ledger.Result, bool) {
	if r.cfg.Codec == nil {
		return ledger.Result{}, false
	}
	enc, ok := r.cfg.Codec.Encode(werr)
	return enc, ok && enc.Code != 0
}

// replayErr is the error a replayed result stands for: the codec's
// decoding of a non-zero code, or nil.
func (r *Runner[TX]) replayErr(res ledger.Result) error {
	if res.Code == 0 || r.cfg.Codec == nil {
		return nil
	}
	return r.cfg.Codec.Decode(res)
}
