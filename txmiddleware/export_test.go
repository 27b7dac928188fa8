package txmiddleware

import (
	"context"
	"time"

	"github.com/opledger/opledger/internal/txrun"
)

// WithBeforeCommit sets a function that runs after Complete and just
// before the context check that precedes COMMIT (tests only).
func WithBeforeCommit(f func(ctx context.Context)) Option {
	return option("WithBeforeCommit", func(c *txrun.Config) error {
		c.BeforeCommit = f
		return nil
	})
}

// WithAfterFinalRollback sets a function that runs after the transaction
// of a work that returned a final error was rolled back, before the fresh
// transaction that records it begins (tests only).
func WithAfterFinalRollback(f func(ctx context.Context)) Option {
	return option("WithAfterFinalRollback", func(c *txrun.Config) error {
		c.AfterFinalRollback = f
		return nil
	})
}

// WithRandom replaces the jitter source (txrun.WithRandom).
var WithRandom = txrun.WithRandom

// BackoffDelay returns the delay after the given number of failed
// attempts under opts.
func BackoffDelay(failed int, opts ...Option) (time.Duration, error) {
	c, err := txrun.Apply(opts)
	if err != nil {
		return 0, err
	}
	return c.Delay(failed), nil
}
