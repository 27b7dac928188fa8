package txmiddleware

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/txrun"
	"github.com/opledger/opledger/ledger"
)

// ErrInvalidConfig is returned (wrapped) by New for a nil database or
// ledger, or a bad option.
var ErrInvalidConfig = txrun.ErrInvalidConfig

// ErrCommitUnknown means COMMIT was in flight when the connection broke
// or the context ended: the unit may or may not have committed. It is
// neither success nor a plain failure. Resolve it before retrying: read
// the identity with ledger's Lookup (a completed entry means it committed;
// ErrNotFound means it did not, and running it again is safe), or retry
// with the same key, which replays if it had committed.
var ErrCommitUnknown = txrun.ErrCommitUnknown

// ErrBusy means the transaction could not begin within the lock-wait
// bound (see [WithLockWait]) while no other call with the same identity
// was in flight on the runner: every connection of the pool was in use,
// or (SQLite) another transaction held the database's single write lock.
// It says nothing about the identity: nothing was written, and running
// the call again later is safe (gRPC UNAVAILABLE STORAGE_BUSY, HTTP 503
// with Retry-After). It never matches ledger.ErrInProgress, which is
// returned instead when another call with the same identity is in flight
// on the runner, holding the connection or the lock waited for.
var ErrBusy = txrun.ErrBusy

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

// Runner runs claim, work and completion as one transaction on a pool.
// It holds no connection between calls and is safe for concurrent use.
type Runner struct {
	r *txrun.Runner[*sql.Tx]
}

// New returns a Runner for db, the database that holds both the ledger's
// table and the work's tables, with ledger l. It classifies failures with
// l's dialect. Configuration errors match [ErrInvalidConfig].
func New(db *sql.DB, l ledger.Ledger, opts ...Option) (*Runner, error) {
	if db == nil || l == nil {
		return nil, fmt.Errorf("%w: database and ledger must not be nil", ErrInvalidConfig)
	}
	r, err := txrun.New(func(s txrun.Settings) (txrun.Driver[*sql.Tx], error) { return newSQLDriver(db, l, s) }, opts...)
	if err != nil {
		return nil, err
	}
	return &Runner{r: r}, nil
}

// Lookup reads the committed entry of id with the runner's ledger (see
// ledger.Ledger's Lookup) on a connection of the runner's pool. With a
// lock-wait bound (see [WithLockWait]) the wait for that connection is
// bounded too: past it Lookup returns an error matching
// ledger.ErrInProgress when a Run of id is in flight on the runner, and
// [ErrBusy] otherwise. A transport's resolve reads through it.
func (r *Runner) Lookup(ctx context.Context, id ledger.Identity) (*ledger.Entry, error) {
	return r.r.Lookup(ctx, id)
}

// InFlight reports whether a Run of id is in progress on the runner. A
// transport that answers resolve requests with a probe on a runner of
// its own asks the runner of the calls it resolves, when its probe could
// not begin within the wait bound ([ErrBusy]): a call with the key still
// in flight is the truer answer (in progress) than a busy database.
func (r *Runner) InFlight(id ledger.Identity) bool { return r.r.InFlight(id) }

// TxFromContext returns the transaction that Run passes to the work, from
// the work's context or one derived from it. The work's context also
// carries the operation's identity (ledger.OperationFromContext), from
// which downstream keys and outbox message ids are derived.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := txrun.TxFrom[*sql.Tx](ctx)
	return tx, ok && tx != nil
}

// Run claims req's identity and, when this call acquires it, runs work and
// records its result, all in one transaction (BEGIN → Claim → work →
// Complete → COMMIT; with [WithClaimAtCommit], BEGIN → work → Record →
// COMMIT). It returns:
//   - the work's result with Executed set, once it committed;
//   - the stored result with Replayed set (the work did not run; a stored
//     final error comes back as the error too, through the [ErrorCodec]);
//   - for a final error of the work ([WithErrorCodec]): everything rolled
//     back, the error's encoding recorded in a fresh transaction, and the
//     work's error with Executed set;
//   - for any other error of the work: that error, nothing recorded;
//   - ledger.ErrKeyReused, ledger.ErrIncomplete, or an error matching
//     ledger.ErrInProgress (another transaction held the identity past the
//     wait bound, or the transaction could not begin within it while a
//     call with the same identity was in flight on this runner) or
//     [ErrBusy] (it could not begin within it otherwise; nothing written);
//   - an error matching [ErrCommitUnknown] when COMMIT's outcome is
//     unknown, or the context's error when it ended first.
//
// Serialization failures, deadlocks and connections lost before COMMIT
// run the whole unit again, up to the attempt bound, with backoff that
// never sleeps past the context's deadline; past it the error matches
// ledger.ErrRetryable. A panic in work rolls back and propagates.
// Every error Run returns (and Lookup) passes through the dialect's
// explanation (dialectkit.ErrorExplainer), whichever statement failed: the
// claim, the work's own and the outbox's, the completion or the record,
// BEGIN and COMMIT. Behind a transaction pooler, a driver error caused by
// prepared statements matches postgres.ErrStatementPooling and names the
// driver setting (docs/poolers.md); errors.Is and errors.As still reach
// the error underneath, and any other error is returned unchanged.
// docs/txmiddleware.md says what each outcome means for the caller.
func (r *Runner) Run(ctx context.Context, req ledger.ClaimRequest, work Work) (RunResult, error) {
	out, err := r.r.Run(ctx, req, txrun.Work[*sql.Tx](work))
	return RunResult(out), err
}
