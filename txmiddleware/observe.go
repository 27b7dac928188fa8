package txmiddleware

import (
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/internal/txrun"
)

// WithMeterProvider sets where the runner's metrics go (default: the
// global meter provider, a no-op until an SDK is installed):
//
//   - opledger.tx.duration, a histogram of the whole of Run in seconds
//     (every attempt and the waits between them), by opledger.outcome
//     (executed, replayed, idempotency-key-reused, operation-in-progress,
//     storage-busy, operation-incomplete, idempotency-key-expired,
//     commit-outcome-unknown,
//     transaction-aborted, request-ended, failed: the kit's one set of
//     outcome names, which package keyed's table lists);
//   - opledger.tx.attempts, a histogram of the attempts per Run;
//   - opledger.tx.commit_unknown, a counter of commits whose outcome is
//     unknown.
//
// Every measurement carries db.system.name and opledger.method; a
// failure also carries error.type, and a run that recorded a final error
// (outcome executed) error.type final_error. The claims themselves are counted by
// the ledger (see ledger.WithMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option("WithMeterProvider", func(c *txrun.Config) error {
		if mp == nil {
			return errors.New("meter provider must not be nil")
		}
		c.MP = mp
		return nil
	})
}

// WithTracerProvider sets where the runner's span goes (default: the
// global tracer provider): one opledger.tx span per Run, a child of the
// span in its context and the parent of the ledger's claim and complete
// spans, with the outcome, the attempts and the short hash of the key.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option("WithTracerProvider", func(c *txrun.Config) error {
		if tp == nil {
			return errors.New("tracer provider must not be nil")
		}
		c.TP = tp
		return nil
	})
}

// WithLogger sets the logger of the runner's events (default: none; a nil
// logger discards). One event is logged per refusal (key reused, in
// progress, incomplete), take-over of an expired entry and commit whose
// outcome is unknown, with the method, the outcome and the short hash of
// the key (key_hash: the first six bytes of its SHA-256, in hex); never
// the key, the caller, the request or the response.
func WithLogger(l *slog.Logger) Option {
	return option("WithLogger", func(c *txrun.Config) error {
		c.Logger = l
		return nil
	})
}
