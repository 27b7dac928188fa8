package txmiddleware

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/internal/options"
)

// Defaults for a Runner's options.
const (
	DefaultMaxTxAttempts = 10
	DefaultTxBackoffBase = 5 * time.Millisecond
	DefaultTxBackoffCap  = 500 * time.Millisecond
)

// Option configures a Runner; the With functions build them. Giving the
// same option twice is an error.
type Option struct{ o options.Option[config] }

func option(name string, f func(*config) error) Option {
	return Option{options.New(name, f)}
}

type config struct {
	iso         sql.IsolationLevel
	maxAttempts int
	base, cap   time.Duration
	random      func() float64
	lockWait    time.Duration
	codec       ErrorCodec
	atCommit    bool
	onRetry     func(ctx context.Context, attempt int, err error, delay time.Duration)
	mp          metric.MeterProvider
	tp          trace.TracerProvider
	logger      *slog.Logger
	spansOnly   bool

	// beforeCommit, set by tests only, runs after Complete and before the
	// context check that precedes COMMIT.
	beforeCommit func(ctx context.Context)
	// afterFinalRollback, set by tests only, runs after the transaction of
	// a work that returned a final error was rolled back, before the fresh
	// transaction that records the error begins.
	afterFinalRollback func(ctx context.Context)
}

func defaults() config {
	return config{
		iso:         sql.LevelDefault,
		maxAttempts: DefaultMaxTxAttempts,
		base:        DefaultTxBackoffBase,
		cap:         DefaultTxBackoffCap,
		random:      rand.Float64,
	}
}

// WithIsolation sets the isolation level of every transaction (default
// sql.LevelDefault, the database's own: READ COMMITTED on PostgreSQL,
// REPEATABLE READ on MySQL, serializable on SQLite). Under PostgreSQL's
// REPEATABLE READ and SERIALIZABLE a concurrent duplicate that commits
// first surfaces as a serialization failure, which the runner retries; the
// retry replays.
func WithIsolation(level sql.IsolationLevel) Option {
	return option("WithIsolation", func(c *config) error {
		c.iso = level
		return nil
	})
}

// WithMaxTxAttempts bounds how many times the transaction runs when it
// keeps failing transiently (default 10). n must be at least 1; 1
// disables retries.
func WithMaxTxAttempts(n int) Option {
	return option("WithMaxTxAttempts", func(c *config) error {
		if n < 1 {
			return errors.New("max attempts must be at least 1")
		}
		c.maxAttempts = n
		return nil
	})
}

// WithTxBackoff sets the delay before a transaction is run again: base
// doubled for each attempt already made, at most max, then jittered to
// between half and all of it (defaults 5ms and 500ms). A retry whose delay
// would end past the context's deadline is not made.
func WithTxBackoff(base, max time.Duration) Option {
	return option("WithTxBackoff", func(c *config) error {
		if base <= 0 || max < base {
			return errors.New("backoff needs 0 < base <= max")
		}
		c.base, c.cap = base, max
		return nil
	})
}

// WithRandom replaces the jitter source, a function returning a number in
// [0, 1) that must be safe for concurrent use (default math/rand/v2's
// Float64). Tests pass a fixed function.
func WithRandom(f func() float64) Option {
	return option("WithRandom", func(c *config) error {
		if f == nil {
			return errors.New("random source must not be nil")
		}
		c.random = f
		return nil
	})
}

// WithLockWait bounds how long a call waits before its claim can be
// decided: for a connection of the pool, for BEGIN (on SQLite, for the
// database's write lock) and for another transaction that holds the same
// identity uncommitted. Past it the call returns an error matching
// ledger.ErrInProgress when another call with the same identity is in
// flight (on this runner, for a wait before the transaction began), or
// [ErrBusy] when the transaction could not begin in time for any other
// reason (every connection was in use, another key held SQLite's write
// lock). Neither is retried by the runner.
//
// The wait for a connection and BEGIN is bounded by a timer on the
// transaction's context, cancelled once it has begun; the claim's lock
// waits by the database. When the ledger bounds its claims itself
// (ledger.LockWaitBounder: a ledger.Store on PostgreSQL), the claim's
// bound goes in each ClaimRequest.LockWait and costs no statement: what
// the wait for a connection left of d, rounded up to an eighth of d, so
// the whole wait stays within d and an eighth. Otherwise the dialect
// must implement dialects.LockWaiter, which begins a bounded transaction
// with d: on SQLite the whole wait happens before the transaction has
// begun, within d; on MySQL the claim's lock wait is bounded again by d
// in whole seconds after the wait for a connection.
//
// Zero (the default) sets nothing: the wait is then bounded by the
// database's own setting (the busy timeout in SQLite's DSN, PostgreSQL's
// lock_timeout, MySQL's innodb_lock_wait_timeout) and by the context,
// which also bounds the wait for a connection. The bound applies to
// every statement of the transaction from the claim on, including the
// work's own. With [WithClaimAtCommit] on a ledger that bounds lock
// waits itself, the claim is the Record at the end: the work before it
// waits as long as the database's own setting allows, and only the
// Record (and a final error's claim) is bounded; on any other ledger the
// bounded transaction covers the work too.
func WithLockWait(d time.Duration) Option {
	return option("WithLockWait", func(c *config) error {
		if d < 0 {
			return errors.New("lock wait must not be negative")
		}
		c.lockWait = d
		return nil
	})
}

// WithErrorCodec sets which errors of the work are final, recorded and
// replayed, and how (see [ErrorCodec]). Without one (the default) no error
// is final: every error of the work rolls back and nothing is recorded; a
// replayed result with a non-zero Code comes back
// without an error.
func WithErrorCodec(codec ErrorCodec) Option {
	return option("WithErrorCodec", func(c *config) error {
		if codec == nil {
			return errors.New("codec must not be nil")
		}
		c.codec = codec
		return nil
	})
}

// WithClaimAtCommit runs the other order of the ledger's protocol: the
// work first, then the operation recorded already completed as the last
// statement before COMMIT (ledger.Recorder's Record, one statement instead
// of a claim and a completion; a replay reads the stored entry with one
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
// transaction (see docs/txmiddleware.md). The ledger must implement
// ledger.Recorder.
func WithClaimAtCommit() Option {
	return option("WithClaimAtCommit", func(c *config) error {
		c.atCommit = true
		return nil
	})
}

// WithOnRetry sets a function called before each retry with the attempt
// that failed (1 for the first), its error and the delay before the next
// one: a place for metrics or logs. It must be safe for concurrent use.
func WithOnRetry(f func(ctx context.Context, attempt int, err error, delay time.Duration)) Option {
	return option("WithOnRetry", func(c *config) error {
		c.onRetry = f
		return nil
	})
}

// delay returns the jittered backoff after the given number of failed
// attempts (1 or more).
func (c *config) delay(failed int) time.Duration {
	d := c.base
	for i := 1; i < failed && d < c.cap; i++ {
		d *= 2
	}
	d = min(d, c.cap)
	half := d / 2
	return half + time.Duration(c.random()*float64(d-half))
}
