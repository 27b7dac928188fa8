package httpint

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// Headers of run-time retry detection (see docs/retry-ownership.md,
// "Detecting a second owner at run time"): keyed's, in canonical form.
// The middleware also reads X-Envoy-Attempt-Count
// (keyedcore.EnvoyAttemptCountHeader) and Grpc-Previous-Rpc-Attempts
// (keyedcore.PreviousAttemptsHeader).
const (
	// RetryOwnerHeader is the retry owner a client declares: "application",
	// "service-config", "mesh" or "none" (see keyedcore.Declaration).
	RetryOwnerHeader = "Opledger-Retry-Owner"
	// AttemptHeader is the attempt number of a client's own retry loop (1
	// for the first).
	AttemptHeader = "Opledger-Attempt"
)

var (
	envoyAttemptKey     = http.CanonicalHeaderKey(keyedcore.EnvoyAttemptCountHeader)
	previousAttemptsKey = http.CanonicalHeaderKey(keyedcore.PreviousAttemptsHeader)
)

// WithRetryOwner sets the retry owner of the clients that call the keyed
// routes, against which the middleware judges a
// request that declares none: a retry by another layer is reported as a
// second owner (see Middleware.Handler). Without it such a request has
// one owner, whichever layer retried it, unless two layers did.
func WithRetryOwner(owner policy.RetryOwner) Option {
	return option("WithRetryOwner", func(c *config) error {
		if !owner.Valid() {
			return fmt.Errorf("%w: %v", policy.ErrInvalidOwner, owner)
		}
		c.retryOwner = owner
		return nil
	})
}

// WithMeterProvider, WithTracerProvider and WithLogger give the middleware
// its telemetry, package keyed's (the same as grpcint's and connectint's
// servers), with the attributes opledger.method (the route, "POST
// /transfers") and http.response.status_code: opledger.server.calls and
// opledger.server.resolves by outcome and reason, a span per keyed
// request, a log event per refusal before the claim and per resolve, and
// opledger.server.retries_by_layer with its warning per route and layer
// that is a second owner; the runner gets the same (see
// txmiddleware.WithMeterProvider): giving txmiddleware's telemetry options
// in WithTxOptions as well is an error. Never a key, a caller, a request
// or a response. Without any of the three the middleware records nothing
// of its own. A nil provider is the global one; a nil logger discards.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option("WithMeterProvider", func(c *config) error { c.telemetry().MeterProvider = mp; return nil })
}

// WithTracerProvider: see WithMeterProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option("WithTracerProvider", func(c *config) error { c.telemetry().TracerProvider = tp; return nil })
}

// WithLogger: see WithMeterProvider.
func WithLogger(l *slog.Logger) Option {
	return option("WithLogger", func(c *config) error { c.telemetry().Logger = l; return nil })
}

// telemetry returns the middleware's telemetry, made on first use.
func (c *config) telemetry() *keyedcore.Telemetry {
	if c.tel == nil {
		c.tel = &keyedcore.Telemetry{}
	}
	return c.tel
}

// judgeRetries has the core judge the retry headers of a request to a
// keyed route (every keyed route may be retried: the ledger replays).
func (m *Middleware) judgeRetries(ctx context.Context, op string, h http.Header) {
	rh := keyedcore.RetryHeaders{Attempt: h[AttemptHeader], EnvoyAttempt: h[envoyAttemptKey], PreviousAttempts: h[previousAttemptsKey]}
	if rh.Attempt == nil && rh.EnvoyAttempt == nil && rh.PreviousAttempts == nil {
		return
	}
	rh.Owner = h[RetryOwnerHeader]
	m.core.Retries(ctx, op, rh, true)
}
