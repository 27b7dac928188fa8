package txrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/ledger"
)

// Began is how a [Driver] tells its [Runner] that the wait before a
// transaction is over, so that the runner's lock-wait bound
// (txmiddleware.WithLockWait) covers the wait for a connection of the pool and BEGIN,
// and no more. The driver calls it exactly once per Begin, BeginClaim or
// Lookup, right after it has begun the transaction (database/sql: BeginTx,
// which waits for a connection and sends BEGIN) or, for an API that sends
// BEGIN together with the claim, right after it holds the connection BEGIN
// will go on (pgx: the pool's Acquire), with nil, or with the error that
// stopped it.
//
// Began returns the error the driver must return instead, having
// released whatever it holds: the bound passed first (an error matching
// ledger.ErrInProgress when another call with the same identity is in
// flight on the runner, else [ErrBusy]), the context's error, or the
// failure to begin as txmiddleware's Runner.Run documents it. Otherwise it returns the
// bound for the claim's own lock waits: what the wait left of the
// runner's bound, rounded up to an eighth of it, so that the whole wait
// stays within the bound and an eighth (zero without a bound). A driver
// whose ledger bounds lock waits in its statements
// (txledger.BoundsLockWait) puts it in the ClaimRequest.LockWait of the
// claim, or with txmiddleware.WithClaimAtCommit of the record.
type Began func(err error) (claimWait time.Duration, _ error)

// bound is one wait under the lock-wait bound: a timer on the context the
// transaction (or the lookup's connection) is begun in, stopped once it
// has begun. It is also the attempt's [Began] (its began method), so that
// an attempt allocates one value for both.
type bound struct {
	wait   time.Duration
	start  time.Time
	state  atomic.Int32 // 0 waiting, 1 begun, 2 bound passed
	timer  *time.Timer
	cancel context.CancelFunc

	// began's: the attempt's context, runner and identity, and its answer.
	ctx    context.Context
	w      *waits
	id     [32]byte
	called bool
	gerr   error
	claim  time.Duration // the claim's bound
}

// bound starts the wait: ctx's child, which the bound's timer cancels
// while the wait lasts. end cancels it, once the transaction has ended.
func (r *Runner[TX]) bound(ctx context.Context, id [32]byte) (context.Context, *bound) {
	b := &bound{wait: r.cfg.LockWait, ctx: ctx, w: &r.waits, id: id}
	if b.wait <= 0 {
		return ctx, b
	}
	// database/sql and pgxpool wait for a free connection until the
	// context ends: the timer ends it while the wait lasts.
	b.start = time.Now()
	bctx, cancel := context.WithCancel(ctx)
	b.cancel = cancel
	b.timer = time.AfterFunc(b.wait, func() {
		if b.state.CompareAndSwap(0, 2) {
			cancel()
		}
	})
	return bctx, b
}

// begun ends the wait and reports whether it ended within the bound.
func (b *bound) begun() bool {
	if b.timer == nil {
		return true
	}
	ok := b.state.CompareAndSwap(0, 1)
	b.timer.Stop()
	return ok || b.state.Load() == 1
}

// claimWait is what the wait left of the bound for the claim, rounded up
// to an eighth of it (see claimBound).
func (b *bound) claimWait() time.Duration {
	if b.wait <= 0 {
		return 0
	}
	return claimBound(b.wait, max(b.wait-time.Since(b.start), time.Millisecond))
}

// end stops the timer and cancels the bound's context.
func (b *bound) end() {
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.cancel != nil {
		b.cancel()
	}
}

// began is the [Began] of an attempt of b.id's unit: called more than
// once, it reports the first answer again.
func (b *bound) began(err error) (time.Duration, error) {
	if b.called {
		return b.claim, b.gerr
	}
	b.called = true
	switch {
	case !b.begun():
		b.gerr = b.w.boundPassed(b.id, fmt.Sprintf("the transaction did not begin within the lock-wait bound of %v", b.wait))
	case err != nil:
		b.gerr = b.w.beginErr(b.ctx, b.id, err)
	default:
		b.claim = b.claimWait()
	}
	return b.claim, b.gerr
}

// claimBound is the bound of a claim's lock waits when left of bound is
// what the wait for a connection and BEGIN left: left rounded up to an
// eighth of bound. The ledger's SQL carries the bound, so rounding keeps
// it to a few statement texts (a driver caches prepared statements by
// text): the whole wait stays within bound plus an eighth of it.
func claimBound(bound, left time.Duration) time.Duration {
	step := bound / 8
	if step <= 0 || left >= bound {
		return bound
	}
	return min((left+step-1)/step*step, bound)
}

// boundPassed is the error of an attempt whose transaction could not
// begin within the bound: ledger.ErrInProgress when another Run with the
// same identity is in flight on the runner (it holds a connection, or the
// write lock, this one waited for), ErrBusy otherwise (the pool or the
// database was busy with other work).
func (w *waits) boundPassed(id [32]byte, why string) error {
	if w.inflight.others(id) {
		return fmt.Errorf("txmiddleware: begin: %s while another call with the same identity is in flight: %w", why, ledger.ErrInProgress)
	}
	return fmt.Errorf("txmiddleware: begin: %s: %w", why, ErrBusy)
}

// beginErr wraps a failed BEGIN (or a failed wait for its connection).
func (w *waits) beginErr(ctx context.Context, id [32]byte, err error) error {
	if cerr := CtxErr(ctx, "begin", err); cerr != nil {
		return cerr
	}
	if w.d.Classify(err) == dialects.ClassLockTimeout {
		// SQLite with immediate transactions waits for the write lock at
		// BEGIN: the busy timeout passed while another transaction wrote,
		// one with this identity or (SQLite has one writer) any other.
		return fmt.Errorf("%w (%w)", w.boundPassed(id, "another transaction held the database's write lock past the busy timeout"), err)
	}
	return fmt.Errorf("txmiddleware: begin: %w", dialectkit.Explain(w.d, err))
}

// Lookup reads the committed entry of id with the driver's ledger, on a
// connection of the runner's pool: txmiddleware's Runner.Lookup. With a lock-wait bound
// the wait for that connection is bounded too: past it Lookup returns an
// error matching ledger.ErrInProgress when a Run of id is in flight on the
// runner, and [ErrBusy] otherwise.
func (r *Runner[TX]) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	bctx, b := r.bound(ctx, id.ID())
	defer b.end()
	e, err := r.drv.Lookup(bctx, func(err error) (time.Duration, error) {
		if !b.begun() {
			why := fmt.Sprintf("txmiddleware: lookup: no connection of the pool within the lock-wait bound of %v", b.wait)
			if r.InFlight(id) {
				return 0, fmt.Errorf("%s while a call with the same identity is in flight: %w", why, ledger.ErrInProgress)
			}
			return 0, fmt.Errorf("%s: %w", why, ErrBusy)
		}
		return 0, err
	}, id)
	return e, dialectkit.Explain(r.waits.d, err)
}

// InFlight reports whether a Run of id is in progress on the runner:
// txmiddleware's Runner.InFlight.
func (r *Runner[TX]) InFlight(id ledger.Identity) bool {
	return r.waits.inflight.count(id.ID()) > 0
}

// waits is what the errors of a wait under the bound are made from: the
// dialect that classifies a failed BEGIN, and the calls in flight.
type waits struct {
	d        dialects.Dialect
	inflight inflight // the identities of the Runs in progress
}

// inflight counts the Runs in progress per identity, so that a wait that
// passed its bound before the transaction began can say whether a call
// with the same identity is what it waited behind. The counts are split
// over shards by the identity's first byte (a hash), so that concurrent
// Runs seldom wait for one another's lock.
type inflight struct {
	shards [16]inflightShard
}

type inflightShard struct {
	mu sync.Mutex
	n  map[[32]byte]int
}

func (f *inflight) shard(id [32]byte) *inflightShard { return &f.shards[id[0]%16] }

func (f *inflight) enter(id [32]byte) {
	s := f.shard(id)
	s.mu.Lock()
	if s.n == nil {
		s.n = map[[32]byte]int{}
	}
	s.n[id]++
	s.mu.Unlock()
}

func (f *inflight) leave(id [32]byte) {
	s := f.shard(id)
	s.mu.Lock()
	if s.n[id] <= 1 {
		delete(s.n, id)
	} else {
		s.n[id]--
	}
	s.mu.Unlock()
}

// count is how many Runs of id are in progress.
func (f *inflight) count(id [32]byte) int {
	s := f.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

// others reports whether another Run of id than the caller's is in
// progress.
func (f *inflight) others(id [32]byte) bool { return f.count(id) > 1 }

// isBoundErr reports whether err is what a [Began] returned (the runner
// passes it on unchanged).
func isBoundErr(err, gerr error) bool { return gerr != nil && errors.Is(err, gerr) }
