package txrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/ledger"
)

// The defaults of a runner's options.
const (
	DefaultMaxTxAttempts = 10
	DefaultTxBackoffBase = 5 * time.Millisecond
	DefaultTxBackoffCap  = 500 * time.Millisecond
)

// Option configures a runner: txmiddleware.Option is it, and the
// txmiddleware With functions build it. Giving the same option twice is
// an error.
type Option struct{ o options.Option[Config] }

// NewOption returns the option named name (for the error of an option
// given twice) that sets what f sets.
func NewOption(name string, f func(*Config) error) Option {
	return Option{options.New(name, f)}
}

// Config is what a runner's options set.
type Config struct {
	Isolation   sql.IsolationLevel
	MaxAttempts int
	Base, Cap   time.Duration
	Random      func() float64
	LockWait    time.Duration
	Codec       Codec
	AtCommit    bool
	OnRetry     func(ctx context.Context, attempt int, err error, delay time.Duration)
	MP          metric.MeterProvider
	TP          trace.TracerProvider
	Logger      *slog.Logger
	SpansOnly   bool

	// BeforeCommit, set by tests only, runs after Complete and before the
	// context check that precedes COMMIT.
	BeforeCommit func(ctx context.Context)
	// AfterFinalRollback, set by tests only, runs after the transaction of
	// a work that returned a final error was rolled back, before the fresh
	// transaction that records the error begins.
	AfterFinalRollback func(ctx context.Context)
}

func defaults() Config {
	return Config{
		Isolation:   sql.LevelDefault,
		MaxAttempts: DefaultMaxTxAttempts,
		Base:        DefaultTxBackoffBase,
		Cap:         DefaultTxBackoffCap,
		Random:      rand.Float64,
	}
}

// Apply returns the configuration opts set over the defaults.
func Apply(opts []Option) (Config, error) {
	c := defaults()
	err := options.Apply(&c, opts, func(o Option) options.Option[Config] { return o.o })
	return c, err
}

// WithRandom replaces the jitter source, a function returning a number in
// [0, 1) that must be safe for concurrent use (default math/rand/v2's
// Float64). Tests pass a fixed function.
func WithRandom(f func() float64) Option {
	return NewOption("WithRandom", func(c *Config) error {
		if f == nil {
			return errors.New("random source must not be nil")
		}
		c.Random = f
		return nil
	})
}

// WithSpansOnly makes the runner record its spans but no metrics and no
// log events, whatever WithMeterProvider and WithLogger say: for a
// transport's resolve probe, whose claim always rolls back and whose
// outcome is the resolve's, not a transaction's to count.
func WithSpansOnly() Option {
	return NewOption("WithSpansOnly", func(c *Config) error {
		c.SpansOnly = true
		return nil
	})
}

// Delay returns the jittered backoff after the given number of failed
// attempts (1 or more).
func (c *Config) Delay(failed int) time.Duration {
	d := c.Base
	for i := 1; i < failed && d < c.Cap; i++ {
		d *= 2
	}
	d = min(d, c.Cap)
	half := d / 2
	return half + time.Duration(c.Random()*float64(d-half))
}

// ErrInvalidConfig is txmiddleware.ErrInvalidConfig.
var ErrInvalidConfig = errors.New("txmiddleware: invalid configuration")

// ErrCommitUnknown is txmiddleware.ErrCommitUnknown.
var ErrCommitUnknown = errors.New("txmiddleware: commit outcome unknown; resolve before retrying")

// ErrBusy is txmiddleware.ErrBusy.
var ErrBusy = errors.New("txmiddleware: the database is busy; nothing was written")

// Codec is txmiddleware.ErrorCodec: which errors of the work are final,
// and their stored form.
type Codec interface {
	Encode(err error) (ledger.Result, bool)
	Decode(r ledger.Result) error
}

// Result is what Run did: txmiddleware.RunResult, which converts from it.
type Result struct {
	Result      ledger.Result
	Executed    bool
	Replayed    bool
	CompletedAt time.Time
	Attempts    int
}

// giveUp wraps the last transient error so that it matches
// ledger.ErrRetryable.
func giveUp(why string, err error) error {
	if errors.Is(err, ledger.ErrRetryable) {
		return fmt.Errorf("txmiddleware: %s: %w", why, err)
	}
	return fmt.Errorf("txmiddleware: %s: %w: %w", why, ledger.ErrRetryable, err)
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

// CtxErr returns an error matching both the context's error and err, or
// nil when ctx is still live.
func CtxErr(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		return nil
	}
	if err == nil || errors.Is(err, cerr) {
		return fmt.Errorf("txmiddleware: %s: %w", op, cerr)
	}
	return fmt.Errorf("txmiddleware: %s: %w (%w)", op, cerr, err)
}
