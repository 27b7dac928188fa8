package txmiddleware

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults for a Runner's options.
const (
	DefaultMaxAttempts = 10
	DefaultBackoffBase = 5 * time.Millisecond
	DefaultBackoffCap  = 500 * time.Millisecond
)

// SavepointMode says when the work runs inside a savepoint, which is what
// lets a final error be recorded without the work's partial writes.
type SavepointMode int

const (
	// SavepointAlways takes a savepoint before every run of the work: one
	// extra statement on every acquired call. A final error is recorded by
	// the attempt that produced it. The default.
	SavepointAlways SavepointMode = iota + 1
	// SavepointOnFinalError runs the work without a savepoint. When it
	// returns a final error, the whole attempt is rolled back and the unit
	// runs once more with a savepoint, so the work runs twice on that path
	// (both runs inside transactions; only the second can commit). This
	// saves the savepoint's round trip on every successful call.
	SavepointOnFinalError
)

// String returns "always" or "on final error".
func (m SavepointMode) String() string {
	switch m {
	case SavepointAlways:
		return "always"
	case SavepointOnFinalError:
		return "on final error"
	}
	return fmt.Sprintf("SavepointMode(%d)", int(m))
}

// Option configures a Runner.
type Option func(*config) error

type config struct {
	iso         sql.IsolationLevel
	maxAttempts int
	base, cap   time.Duration
	random      func() float64
	lockWait    time.Duration
	final       FinalRule
	savepoint   SavepointMode
	onRetry     func(ctx context.Context, attempt int, err error, delay time.Duration)

	// beforeCommit, set by tests only, runs after Complete and before the
	// context check that precedes COMMIT.
	beforeCommit func(ctx context.Context)
}

func defaults() config {
	return config{
		iso:         sql.LevelDefault,
		maxAttempts: DefaultMaxAttempts,
		base:        DefaultBackoffBase,
		cap:         DefaultBackoffCap,
		random:      rand.Float64,
		final:       DefaultFinal,
		savepoint:   SavepointAlways,
	}
}

// WithIsolation sets the isolation level of every transaction (default
// sql.LevelDefault, the database's own: READ COMMITTED on PostgreSQL,
// REPEATABLE READ on MySQL, serializable on SQLite). Under PostgreSQL's
// REPEATABLE READ and SERIALIZABLE a concurrent duplicate that commits
// first surfaces as a serialization failure, which the runner retries; the
// retry replays.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(c *config) error {
		c.iso = level
		return nil
	}
}

// WithMaxAttempts bounds how many times the unit runs when it keeps
// failing transiently (default 10). n must be at least 1; 1 disables
// retries.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return errors.New("txmiddleware: max attempts must be at least 1")
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBackoff sets the delay before a retry: base doubled for each attempt
// already made, at most max, then jittered to between half and all of it
// (defaults 5ms and 500ms). A retry whose delay would end past the
// context's deadline is not made.
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) error {
		if base <= 0 || max < base {
			return errors.New("txmiddleware: backoff needs 0 < base <= max")
		}
		c.base, c.cap = base, max
		return nil
	}
}

// WithRandom replaces the jitter source, a function returning a number in
// [0, 1) that must be safe for concurrent use (default math/rand/v2's
// Float64). Tests pass a fixed function.
func WithRandom(f func() float64) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("txmiddleware: random source must not be nil")
		}
		c.random = f
		return nil
	}
}

// WithLockWait bounds how long a claim waits for another transaction that
// holds the same identity uncommitted; past it the call returns an error
// matching ledger.ErrInProgress. The dialect must implement
// dialects.LockWaiter. Zero (the default) sets nothing: the wait is then
// bounded by the database's own setting (the busy timeout in SQLite's DSN,
// PostgreSQL's lock_timeout, MySQL's innodb_lock_wait_timeout) and by the
// context. The bound applies to every statement of the transaction,
// including the work's own.
func WithLockWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return errors.New("txmiddleware: lock wait must not be negative")
		}
		c.lockWait = d
		return nil
	}
}

// WithFinalErrors replaces the rule that decides which errors of the work
// are final, that is recorded and replayed (default [DefaultFinal]). Nil
// records no error at all: every error of the work rolls back, and no
// savepoint is taken.
func WithFinalErrors(rule FinalRule) Option {
	return func(c *config) error {
		c.final = rule
		return nil
	}
}

// WithSavepoint chooses when the work runs inside a savepoint (default
// [SavepointAlways]). It has no effect when no error is final.
func WithSavepoint(m SavepointMode) Option {
	return func(c *config) error {
		if m != SavepointAlways && m != SavepointOnFinalError {
			return fmt.Errorf("txmiddleware: unknown savepoint mode %d", int(m))
		}
		c.savepoint = m
		return nil
	}
}

// WithOnRetry sets a function called before each retry with the attempt
// that failed (1 for the first), its error and the delay before the next
// one: a place for metrics or logs. It must be safe for concurrent use.
func WithOnRetry(f func(ctx context.Context, attempt int, err error, delay time.Duration)) Option {
	return func(c *config) error {
		c.onRetry = f
		return nil
	}
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
