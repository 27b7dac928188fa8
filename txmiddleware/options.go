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

// WithLockWait bounds how long a call waits before its claim is decided:
// for a connection of the pool, for BEGIN (on SQLite, for the write lock)
// and for another transaction that holds the same identity uncommitted.
// Past it the call returns an error matching ledger.ErrInProgress when a
// call with the same identity is in flight, or [ErrBusy] when the
// transaction could not begin in time for another reason; the runner
// retries neither. The bound also applies to every later statement of the
// transaction (with [WithClaimAtCommit] on a ledger that bounds its own
// statements, from the Record on). New refuses it, with an error matching
// [ErrInvalidConfig], when neither the ledger (ledger.LockWaitBounder) nor
// the dialect (dialects.LockWaiter) can bound the wait, and refuses a
// negative d. Zero (the default) sets nothing: the database's own setting
// and the context bound the wait. How each database is bounded, and what
// it costs, is in docs/txmiddleware.md ("In-progress duplicates: the wait
// bound").
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
