package txmiddleware

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/ledger"
)

// ErrInvalidConfig is returned (wrapped) by New for a nil database or
// ledger, or a bad option.
var ErrInvalidConfig = errors.New("txmiddleware: invalid configuration")

// ErrCommitUnknown means COMMIT was in flight when the connection broke
// or the context ended: the unit may or may not have committed. It is
// neither success nor a plain failure. Resolve it before retrying: read
// the identity with ledger's Lookup (a completed entry means it committed;
// ErrNotFound means it did not, and running it again is safe), or retry
// with the same key, which replays if it had committed.
var ErrCommitUnknown = errors.New("txmiddleware: commit outcome unknown; resolve before retrying")

// ErrBusy means the transaction could not begin within the lock-wait
// bound (see [WithLockWait]) while no other call with the same identity
// was in flight on the runner: every connection of the pool was in use,
// or (SQLite) another transaction held the database's single write lock.
// It says nothing about the identity: nothing was written, and running
// the call again later is safe (gRPC UNAVAILABLE STORAGE_BUSY, HTTP 503
// with Retry-After). It never matches ledger.ErrInProgress, which is
// returned instead when another call with the same identity is in flight
// on the runner, holding the connection or the lock waited for.
var ErrBusy = errors.New("txmiddleware: the database is busy; nothing was written")

// Work is the caller's mutation. It runs in tx, the transaction that holds
// the claim, and returns the result to record (Code 0 and the encoded
// response, as a rule) or an error.
//
// Work can run more than once before one run commits: a transient
// database failure rolls the attempt back and runs the whole unit again.
// Keep every side effect inside tx; anything else (a message sent, a file
// written, a call to another service) can happen once per attempt. Work
// must not commit or roll back tx, and must not use it after returning.
// ctx carries tx for deeper code (see [TxFromContext]).
type Work func(ctx context.Context, tx *sql.Tx) (ledger.Result, error)

// RunResult is what Run did.
type RunResult struct {
	// Result is the recorded result: the work's, or for a final error its
	// encoding by the [ErrorCodec], or the stored one on replay. Zero when
	// nothing was recorded.
	Result ledger.Result
	// Executed is true when this call ran the work and committed its
	// result (a success or a final error).
	Executed bool
	// Replayed is true when an earlier call had completed the operation:
	// Result is the stored result, and the work did not run (claim first)
	// or ran and was rolled back (claim at commit, see
	// [WithClaimAtCommit]).
	Replayed bool
	// CompletedAt is when the replayed result was recorded (Replayed only).
	CompletedAt time.Time
	// Attempts is how many times the unit was started: 1 unless transient
	// failures were retried, 0 when it never started (bad input).
	Attempts int
}

// Runner runs claim, work and completion as one transaction on a pool. It
// holds no connection between calls and is safe for concurrent use.
type Runner struct {
	db  *sql.DB
	l   ledger.Ledger
	d   dialects.Dialect
	lw  dialects.LockWaiter // set when a lock wait bound is configured and the ledger cannot bound its claims
	rec ledger.Recorder     // set in claim-at-commit mode
	// claimWait is the lock wait bound passed in every ClaimRequest, when
	// one is configured and the ledger bounds its claims itself.
	claimWait time.Duration
	cfg       config
	obs       *observer
	inflight  inflight // the identities of the Runs in progress
}

// New returns a Runner for db, the database that holds both the ledger's
// table and the work's tables, with ledger l. It classifies failures with
// l's dialect. Configuration errors match [ErrInvalidConfig].
func New(db *sql.DB, l ledger.Ledger, opts ...Option) (*Runner, error) {
	if db == nil || l == nil {
		return nil, fmt.Errorf("%w: database and ledger must not be nil", ErrInvalidConfig)
	}
	d := l.Dialect()
	if d == nil {
		return nil, fmt.Errorf("%w: the ledger has no dialect", ErrInvalidConfig)
	}
	r := &Runner{db: db, l: l, d: d, cfg: defaults(), inflight: inflight{n: map[[32]byte]int{}}}
	if err := options.Apply(&r.cfg, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// The bound goes into the claim's own statement when the ledger can
	// put it there: the Claim, or in claim-at-commit mode the Record (and
	// the final error's claim); a ledger that bounds lock waits honours it
	// in both.
	if b, ok := l.(ledger.LockWaitBounder); ok && r.cfg.lockWait > 0 && b.BoundsLockWait() {
		r.claimWait = r.cfg.lockWait // in the claim's statements: none of its own
	} else if r.cfg.lockWait > 0 {
		lw, ok := d.(dialects.LockWaiter)
		if !ok {
			return nil, fmt.Errorf("%w: WithLockWait: dialect %s cannot bound lock waits (no dialects.LockWaiter)", ErrInvalidConfig, d.Name())
		}
		r.lw = lw
	}
	if r.cfg.atCommit {
		rec, ok := l.(ledger.Recorder)
		if !ok {
			return nil, fmt.Errorf("%w: WithClaimAtCommit: the ledger (%T) does not implement ledger.Recorder", ErrInvalidConfig, l)
		}
		r.rec = rec
	}
	r.obs = newObserver(d, &r.cfg)
	return r, nil
}

type txKey struct{}

// TxFromContext returns the transaction that Run passes to the work, from
// the work's context or one derived from it. The work's context also
// carries the operation's identity (ledger.OperationFromContext), from
// which downstream keys and outbox message ids are derived.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}

// Run claims req's identity and, when this call acquires it, runs work and
// records its result, all in one transaction:
//
//	BEGIN → Claim → work → Complete → COMMIT
//
// or, with [WithClaimAtCommit], the work first and the completed entry
// recorded last:
//
//	BEGIN → work → Record → COMMIT
//
// in which a replay or a reused key is found only after the work ran: the
// transaction then rolls back and the outcome is as below.
//
// It returns:
//   - the work's result with Executed set, once it committed;
//   - the stored result with Replayed set, when an earlier call completed
//     the operation (the work does not run). A stored final error (a
//     non-zero Code) comes back as the error too, rebuilt by the
//     [ErrorCodec]'s Decode;
//   - for a final error of the work (see [WithErrorCodec]): the whole
//     transaction is rolled back, so none of the work's writes survive,
//     and the error's encoding is recorded in a fresh transaction (claim
//     again, complete with the encoding, commit); the work's error is
//     returned with Executed set. If another call completed the operation
//     in between, its result is returned as a replay instead; if another
//     transaction holds the identity, the in-progress error. The work
//     never runs twice for one final error, and no savepoint is taken;
//   - for any other error of the work: everything is rolled back, nothing
//     is recorded, and that error is returned (a later call runs the work
//     again);
//   - ledger.ErrKeyReused, ledger.ErrIncomplete, and an error matching
//     ledger.ErrInProgress when another transaction held the identity past
//     the wait bound, or when the transaction could not begin within it
//     (no free connection in the pool; on SQLite, the write lock not had
//     within the busy timeout) while another call with the same identity
//     was in flight on this runner;
//   - an error matching [ErrBusy] when the transaction could not begin
//     within the wait bound and no other call with the same identity was
//     in flight on this runner: nothing was written;
//   - an error matching [ErrCommitUnknown] when the connection broke during
//     COMMIT, or the context ended while COMMIT was in flight (the error
//     then matches the context's error too);
//   - the context's error (matching errors.Is) when it ended first;
//     nothing is then committed unless COMMIT had already been sent.
//
// Transient failures, a serialization failure or deadlock on any
// statement including BEGIN and COMMIT, or a connection lost before COMMIT
// was sent, roll back and run the whole unit again, up to the attempt
// bound, with jittered backoff that never sleeps past the context's
// deadline; once a final error is being recorded, only its recording is
// run again. When attempts run out the last error is returned, matching
// ledger.ErrRetryable. A panic in work rolls back and propagates.
func (r *Runner) Run(ctx context.Context, req ledger.ClaimRequest, work Work) (RunResult, error) {
	ctx, op := r.obs.begin(ctx, req)
	out, err := r.run(ctx, req, work)
	r.obs.ran(ctx, op, req, out, err)
	return out, err
}

func (r *Runner) run(ctx context.Context, req ledger.ClaimRequest, work Work) (RunResult, error) {
	if work == nil {
		return RunResult{}, errors.New("txmiddleware: work must not be nil")
	}
	id := req.Identity.ID()
	r.inflight.enter(id)
	defer r.inflight.leave(id)
	var (
		out   RunResult
		final *finalError // set once the work returned a final error
	)
	for {
		out.Attempts++
		var (
			o   RunResult
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
		if out.Attempts >= r.cfg.maxAttempts {
			return out, giveUp(fmt.Sprintf("%d attempts failed", out.Attempts), err)
		}
		delay := r.cfg.delay(out.Attempts)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
			return out, giveUp(fmt.Sprintf("no time left for attempt %d", out.Attempts+1), err)
		}
		if r.cfg.onRetry != nil {
			r.cfg.onRetry(ctx, out.Attempts, err, delay)
		}
		if serr := sleep(ctx, delay); serr != nil {
			return out, fmt.Errorf("txmiddleware: waiting to retry: %w (after: %v)", serr, err)
		}
	}
}

// giveUp wraps the last transient error so that it matches
// ledger.ErrRetryable.
func giveUp(why string, err error) error {
	if errors.Is(err, ledger.ErrRetryable) {
		return fmt.Errorf("txmiddleware: %s: %w", why, err)
	}
	return fmt.Errorf("txmiddleware: %s: %w: %w", why, ledger.ErrRetryable, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finalError is once's answer when the work returned a final error: the
// attempt's transaction has been rolled back, and enc, the codec's
// encoding of err, is to be recorded in a fresh transaction.
type finalError struct {
	enc ledger.Result
	err error
}

func (e *finalError) Error() string {
	return "txmiddleware: final error, to be recorded: " + e.err.Error()
}
func (e *finalError) Unwrap() error { return e.err }

// transient reports whether the unit should run again after err.
func (r *Runner) transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrCommitUnknown) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ledger.ErrRetryable) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	switch r.d.Classify(err) {
	case dialects.ClassSerialization, dialects.ClassDeadlock, dialects.ClassConnection:
		return true
	}
	return false
}

// ctxErr returns an error matching both the context's error and err, or
// nil when ctx is still live.
func ctxErr(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		return nil
	}
	if err == nil || errors.Is(err, cerr) {
		return fmt.Errorf("txmiddleware: %s: %w", op, cerr)
	}
	return fmt.Errorf("txmiddleware: %s: %w (%w)", op, cerr, err)
}

// begin starts one attempt's transaction, with the lock-wait bound when
// one is configured. The bound covers the wait for a pool connection and
// BEGIN itself (on SQLite, the wait for the write lock): past it the
// attempt fails with ledger.ErrInProgress or ErrBusy (see boundPassed).
// It returns what is left of the bound for the claim's own lock waits.
// release is never nil; it ends the bound's context, once the
// transaction has ended.
func (r *Runner) begin(ctx context.Context, id [32]byte) (*sql.Tx, func(), time.Duration, error) {
	opts := &sql.TxOptions{Isolation: r.cfg.iso}
	if r.cfg.lockWait <= 0 {
		tx, err := r.db.BeginTx(ctx, opts)
		return tx, func() {}, 0, err
	}
	// The transaction lives in bctx, which the bound's timer cancels only
	// while the transaction has not begun: database/sql waits for a free
	// connection until its context ends.
	start := time.Now()
	bctx, cancel := context.WithCancel(ctx)
	var state atomic.Int32 // 0 beginning, 1 begun, 2 bound passed
	timer := time.AfterFunc(r.cfg.lockWait, func() {
		if state.CompareAndSwap(0, 2) {
			cancel()
		}
	})
	var (
		tx      *sql.Tx
		release func()
		err     error
	)
	if r.lw != nil {
		tx, release, err = r.lw.BeginBounded(bctx, r.db, opts, r.cfg.lockWait)
	} else {
		tx, err = r.db.BeginTx(bctx, opts)
	}
	if release == nil {
		release = func() {}
	}
	begun := state.CompareAndSwap(0, 1)
	timer.Stop()
	switch {
	case !begun:
		// The bound passed first: whatever began is rolled back.
		if err == nil {
			_ = tx.Rollback()
			release()
		}
		cancel()
		return nil, func() {}, 0, r.boundPassed(id, fmt.Sprintf("the transaction did not begin within the lock-wait bound of %v", r.cfg.lockWait))
	case err != nil:
		cancel()
		return nil, func() {}, 0, err
	}
	left := max(r.cfg.lockWait-time.Since(start), time.Millisecond)
	return tx, func() { release(); cancel() }, left, nil
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
func (r *Runner) boundPassed(id [32]byte, why string) error {
	if r.inflight.others(id) {
		return fmt.Errorf("txmiddleware: begin: %s while another call with the same identity is in flight: %w", why, ledger.ErrInProgress)
	}
	return fmt.Errorf("txmiddleware: begin: %s: %w", why, ErrBusy)
}

// Lookup reads the committed entry of id with the runner's ledger (see
// ledger.Ledger's Lookup) on a connection of the runner's pool. With a
// lock-wait bound (see [WithLockWait]) the wait for that connection is
// bounded too: past it Lookup returns an error matching
// ledger.ErrInProgress when a Run of id is in flight on the runner, and
// [ErrBusy] otherwise. A transport's resolve reads through it.
func (r *Runner) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	if r.cfg.lockWait <= 0 {
		return r.l.Lookup(ctx, r.db, id)
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.lockWait)
	conn, err := r.db.Conn(cctx)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		why := fmt.Sprintf("txmiddleware: lookup: no connection of the pool within the lock-wait bound of %v", r.cfg.lockWait)
		if r.InFlight(id) {
			return nil, fmt.Errorf("%s while a call with the same identity is in flight: %w", why, ledger.ErrInProgress)
		}
		return nil, fmt.Errorf("%s: %w", why, ErrBusy)
	case err != nil:
		return nil, err
	}
	defer conn.Close()
	return r.l.Lookup(ctx, conn, id)
}

// InFlight reports whether a Run of id is in progress on the runner. A
// transport that answers resolve requests with a probe on a runner of
// its own asks the runner of the calls it resolves, when its probe could
// not begin within the wait bound ([ErrBusy]): a call with the key still
// in flight is the truer answer (in progress) than a busy database.
func (r *Runner) InFlight(id ledger.Identity) bool {
	r.inflight.mu.Lock()
	defer r.inflight.mu.Unlock()
	return r.inflight.n[id.ID()] > 0
}

// inflight counts the Runs in progress per identity, so that a wait that
// passed its bound before the transaction began can say whether a call
// with the same identity is what it waited behind.
type inflight struct {
	mu sync.Mutex
	n  map[[32]byte]int
}

func (f *inflight) enter(id [32]byte) {
	f.mu.Lock()
	f.n[id]++
	f.mu.Unlock()
}

func (f *inflight) leave(id [32]byte) {
	f.mu.Lock()
	if f.n[id] <= 1 {
		delete(f.n, id)
	} else {
		f.n[id]--
	}
	f.mu.Unlock()
}

// others reports whether another Run of id than the caller's is in
// progress.
func (f *inflight) others(id [32]byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[id] > 1
}

// once runs the unit one time. With fe set it records that final error of
// an earlier run of the work, whose transaction was rolled back, in a
// fresh transaction instead of running the work: claim again and complete
// with the encoding. When another call completed the operation meanwhile,
// its result is the answer, as a replay.
func (r *Runner) once(ctx context.Context, req ledger.ClaimRequest, work Work, fe *finalError) (out RunResult, err error) {
	if fe != nil && r.cfg.afterFinalRollback != nil {
		r.cfg.afterFinalRollback(ctx)
	}
	id := req.Identity.ID()
	tx, release, left, err := r.begin(ctx, id)
	if err != nil {
		return out, r.beginErr(ctx, id, err)
	}
	if r.claimWait > 0 {
		// The claim's own lock waits get what the wait for a connection
		// and BEGIN left of the bound.
		req.LockWait = claimBound(r.claimWait, left)
	}
	// Registered before the transaction's own deferred rollback, so it
	// runs after it: a session setting is restored once the transaction
	// has ended, then the connection goes back to the pool.
	defer release()
	ended := false
	defer func() {
		if !ended {
			_ = tx.Rollback() // also when work panics; the panic goes on
		}
	}()

	var c *ledger.Claim
	if r.rec == nil {
		c, err = r.l.Claim(ctx, tx, req)
		if err != nil {
			if cerr := ctxErr(ctx, "claim", err); cerr != nil {
				return out, cerr
			}
			return out, err // the ledger's errors, unchanged
		}
		r.obs.claimed(ctx, req, c)
		if !c.Acquired() {
			// Nothing was written: end the transaction without a commit.
			ended = true
			_ = tx.Rollback()
			return r.replayed(out, c)
		}
	}

	var (
		res  ledger.Result
		werr error
	)
	if fe != nil {
		res, werr = fe.enc, fe.err
	} else {
		res, werr = work(ledger.ContextWithOperation(context.WithValue(ctx, txKey{}, tx), req.Identity), tx)
	}
	if werr != nil && fe == nil {
		if cerr := ctxErr(ctx, "work", werr); cerr != nil {
			return out, cerr
		}
		if r.transient(ctx, werr) {
			return out, werr
		}
		if enc, ok := r.final(werr); ok {
			// Roll back everything the work wrote; the encoding is recorded
			// in a fresh transaction (see run).
			ended = true
			_ = tx.Rollback()
			return out, &finalError{enc: enc, err: werr}
		}
		return out, werr
	}
	if r.rec != nil {
		// Claim at commit: the completed entry, as the last statement.
		rc, err := r.rec.Record(ctx, tx, req, res)
		if err != nil {
			if cerr := ctxErr(ctx, "record", err); cerr != nil {
				return out, cerr
			}
			return out, err // the deferred rollback undoes the work
		}
		r.obs.claimed(ctx, req, rc)
		if !rc.Recorded() {
			// Another call completed it first: the work must not commit.
			ended = true
			_ = tx.Rollback()
			return r.replayed(out, rc)
		}
	} else if err := r.l.Complete(ctx, tx, c, res); err != nil {
		if cerr := ctxErr(ctx, "complete", err); cerr != nil {
			return out, cerr
		}
		return out, err
	}
	if err := r.commit(ctx, tx, &ended); err != nil {
		return out, err
	}
	out.Result, out.Executed = res, true
	return out, werr
}

// replayed is the answer for a replay of c's stored result.
func (r *Runner) replayed(out RunResult, c *ledger.Claim) (RunResult, error) {
	out.Result, out.Replayed, out.CompletedAt = c.Result, true, c.CompletedAt
	return out, r.replayErr(c.Result)
}

// final reports whether werr is final for the codec, with its encoding.
func (r *Runner) final(werr error) (ledger.Result, bool) {
	if r.cfg.codec == nil {
		return ledger.Result{}, false
	}
	enc, ok := r.cfg.codec.Encode(werr)
	return enc, ok && enc.Code != 0
}

// commit runs the test hook, checks the context and commits tx, setting
// *ended once COMMIT is sent.
func (r *Runner) commit(ctx context.Context, tx *sql.Tx, ended *bool) error {
	if r.cfg.beforeCommit != nil {
		r.cfg.beforeCommit(ctx)
	}
	if cerr := ctxErr(ctx, "commit", nil); cerr != nil {
		return cerr // COMMIT not sent; the deferred rollback ends it
	}
	*ended = true
	if err := tx.Commit(); err != nil {
		return r.commitErr(ctx, err)
	}
	return nil
}

// beginErr wraps a failed BEGIN.
func (r *Runner) beginErr(ctx context.Context, id [32]byte, err error) error {
	if errors.Is(err, ErrBusy) || errors.Is(err, ledger.ErrInProgress) {
		return err // the bound passed (begin)
	}
	if cerr := ctxErr(ctx, "begin", err); cerr != nil {
		return cerr
	}
	if r.d.Classify(err) == dialects.ClassLockTimeout {
		// SQLite with immediate transactions waits for the write lock at
		// BEGIN: the busy timeout passed while another transaction wrote,
		// one with this identity or (SQLite has one writer) any other.
		return fmt.Errorf("%w (%w)", r.boundPassed(id, "another transaction held the database's write lock past the busy timeout"), err)
	}
	return fmt.Errorf("txmiddleware: begin: %w", dialects.Explain(r.d, err))
}

// commitErr sorts a failed COMMIT: not sent (the transaction was already
// rolled back), refused by the database (a definite rollback, retried
// when transient), or unknown.
func (r *Runner) commitErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, sql.ErrTxDone):
		// database/sql rolled the transaction back when its context ended,
		// before COMMIT could be sent: not committed.
		if cerr := ctxErr(ctx, "commit", err); cerr != nil {
			return cerr
		}
		return fmt.Errorf("txmiddleware: commit: %w", err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The context was live just before COMMIT and ended during it: the
		// driver may have sent COMMIT and given up waiting for its answer.
		// The error matches the context's error too.
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	case errors.Is(err, driver.ErrBadConn) || r.d.Classify(err) == dialects.ClassConnection:
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	case ctx.Err() != nil:
		// The database answered COMMIT with an error after the context
		// ended (lib/pq cancels the statement: 57014): it rolled back.
		return ctxErr(ctx, "commit", err)
	}
	return &ledger.DBError{Op: "commit", Class: r.d.Classify(err), Err: dialects.Explain(r.d, err)}
}

// replayErr is the error a replayed result stands for: the codec's
// decoding of a non-zero code, or nil.
func (r *Runner) replayErr(res ledger.Result) error {
	if res.Code == 0 || r.cfg.codec == nil {
		return nil
	}
	return r.cfg.codec.Decode(res)
}
