package txmiddleware

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/opledger/opledger/internal/txrun"
)

// Option configures a Runner; the With functions build them. Giving the
// same option twice is an error.
type Option = txrun.Option

func option(name string, f func(*txrun.Config) error) Option { return txrun.NewOption(name, f) }

// WithIsolation sets the isolation level of every transaction (default
// sql.LevelDefault, the database's own: READ COMMITTED on PostgreSQL,
// REPEATABLE READ on MySQL, serializable on SQLite). Under PostgreSQL's
// REPEATABLE READ and SERIALIZABLE a concurrent duplicate that commits
// first surfaces as a serialization failure, which the runner retries; the
// retry replays.
func WithIsolation(level sql.IsolationLevel) Option {
	return option("WithIsolation", func(c *txrun.Config) error {
		c.Isolation = level
		return nil
	})
}

// WithMaxTxAttempts bounds how many times the transaction runs when it
// keeps failing transiently (default 10). n must be at least 1; 1
// disables retries.
func WithMaxTxAttempts(n int) Option {
	return option("WithMaxTxAttempts", func(c *txrun.Config) error {
		if n < 1 {
			return errors.New("max attempts must be at least 1")
		}
		c.MaxAttempts = n
		return nil
	})
}

// WithTxBackoff sets the delay before a transaction is run again: base
// doubled for each attempt already made, at most max, then jittered to
// between half and all of it (defaults 5ms and 500ms). A retry whose delay
// would end past the context's deadline is not made.
func WithTxBackoff(base, max time.Duration) Option {
	return option("WithTxBackoff", func(c *txrun.Config) error {
		if base <= 0 || max < base {
			return errors.New("backoff needs 0 < base <= max")
		}
		c.Base, c.Cap = base, max
		return nil
	})
}

// WithLockWait bounds how long a call waits before its claim is decided:
// for a connection of the pool, for BEGIN (on SQLite, for the write lock)
// and for another transaction that holds the same identity uncommitted.
// Past it the call returns an error matching ledger.ErrInProgress when a
// call with the same identity is in flight, or [ErrBusy] when the
// transaction could not begin in time for another reason; the runner
// retries neither. The bound also applies to every later statement of the
// transaction (with [WithClaimAtCommit] on a ledger that bounds its own
// statements, from the Record on). New refuses it, with an error matching
// [ErrInvalidConfig], when neither the ledger (a ledger.Store on
// PostgreSQL, or a ledger of your own with a BoundsLockWait method that
// reports true) nor the dialect (dialects.LockWaiter) can bound the wait,
// and refuses a negative d. Zero (the default) sets nothing: the database's own setting
// and the context bound the wait. How each database is bounded, and what
// it costs, is in docs/txmiddleware.md ("In-progress duplicates: the wait
// bound").
func WithLockWait(d time.Duration) Option {
	return option("WithLockWait", func(c *txrun.Config) error {
		if d < 0 {
			return errors.New("lock wait must not be negative")
		}
		c.LockWait = d
		return nil
	})
}

// WithErrorCodec sets which errors of the work are final, recorded and
// replayed, and how (see [ErrorCodec]). Without one (the default) no error
// is final: every error of the work rolls back and nothing is recorded; a
// replayed result with a non-zero Code comes back
// without an error.
func WithErrorCodec(codec ErrorCodec) Option {
	return option("WithErrorCodec", func(c *txrun.Config) error {
		if codec == nil {
			return errors.New("codec must not be nil")
		}
		c.Codec = codec
		return nil
	})
}

// WithClaimAtCommit runs the other order of the ledger's protocol: the
// work first, then the operation recorded already completed as the last
// statement before COMMIT (the ledger's Record, one statement instead of
// a claim and a completion; a replay reads the stored entry with one
// more):
//
//	BEGIN → work → Record → COMMIT
//
// When the record conflicts, another call got there first: the whole
// transaction rolls back (the work's writes vanish) and the stored result
// is returned as a replay, or ledger.ErrKeyReused. Only one run of the
// work can ever commit. The price: a retry of a completed call, and every
// concurrent duplicate, runs the work before it finds out, so it suits
// short work whose retries are rare and whose every effect is inside the
// transaction (see docs/txmiddleware.md). The ledger must have a Record
// method as ledger.Store's (Record(ctx, *sql.Tx, ledger.ClaimRequest,
// ledger.Result) (*ledger.Claim, error)).
func WithClaimAtCommit() Option {
	return option("WithClaimAtCommit", func(c *txrun.Config) error {
		c.AtCommit = true
		return nil
	})
}

// WithOnRetry sets a function called before each retry with the attempt
// that failed (1 for the first), its error and the delay before the next
// one: a place for metrics or logs. It must be safe for concurrent use.
func WithOnRetry(f func(ctx context.Context, attempt int, err error, delay time.Duration)) Option {
	return option("WithOnRetry", func(c *txrun.Config) error {
		c.OnRetry = f
		return nil
	})
}
