package httpint

import (
	"context"
	"net/http"

	"github.com/opledger/opledger/internal/keyedcore"
)

// judgeRetries has the core judge the retry headers of a request to a
// keyed route (every keyed route may be retried: the ledger replays).
// A layer that is a second owner is named in the response's
// Opledger-Second-Retry-Owner (keyedcore.SecondOwnerHeader), set on w.
func (m *Middleware) judgeRetries(ctx context.Context, w http.ResponseWriter, op string, h http.Header) {
	rh := keyedcore.HTTPRetryHeaders(h)
	if rh.Attempt == nil && rh.EnvoyAttempt == nil && rh.PreviousAttempts == nil {
		return
	}
	if v := m.core.Retries(ctx, op, rh, true).SecondOwners(); v != "" {
		w.Header().Set(keyedcore.HTTPSecondOwner, v)
	}
}
