package txmiddleware

import (
	"context"
	"time"

	"github.com/opledger/opledger/internal/options"
)

// WithBeforeCommit sets a function that runs after Complete and just
// before the context check that precedes COMMIT (tests only).
func WithBeforeCommit(f func(ctx context.Context)) Option {
	return option("WithBeforeCommit", func(c *config) error {
		c.beforeCommit = f
		return nil
	})
}

// WithAfterFinalRollback sets a function that runs after the transaction
// of a work that returned a final error was rolled back, before the fresh
// transaction that records it begins (tests only).
func WithAfterFinalRollback(f func(ctx context.Context)) Option {
	return option("WithAfterFinalRollback", func(c *config) error {
		c.afterFinalRollback = f
		return nil
	})
}

// BackoffDelay returns the delay after the given number of failed
// attempts under opts.
func BackoffDelay(failed int, opts ...Option) (time.Duration, error) {
	c := defaults()
	if err := options.Apply(&c, opts, func(o Option) options.Option[config] { return o.o }); err != nil {
		return 0, err
	}
	return c.delay(failed), nil
}
