package httpint

import (
	"context"
	"net/http"

	"github.com/opledger/opledger/internal/keyedcore"
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
