package httpint

import (
	"context"
	"net/http"

	"github.com/opledger/opledger/internal/keyedcore"
)

// judgeRetries has the core judge the retry headers of a request to a
// keyed route (every keyed route may be retried: the ledger replays).
func (m *Middleware) judgeRetries(ctx context.Context, op string, h http.Header) {
	rh := keyedcore.HTTPRetryHeaders(h)
	if rh.Attempt == nil && rh.EnvoyAttempt == nil && rh.PreviousAttempts == nil {
		return
	}
	m.core.Retries(ctx, op, rh, true)
}
