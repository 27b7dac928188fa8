package connectint

import (
	"context"
	"net/http"
	"strconv"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// judgeRetries has the core judge the retry headers of a call of a
// catalog procedure (resolve requests are not judged).
func (s *Server) judgeRetries(ctx context.Context, proc string, h http.Header) {
	rh := keyedcore.HTTPRetryHeaders(h)
	if rh.Attempt == nil && rh.EnvoyAttempt == nil && rh.PreviousAttempts == nil || len(h[ResolveHeader]) > 0 {
		return
	}
	p, known := s.catalog.Lookup(proc)
	if !known {
		return
	}
	s.core.Retries(ctx, proc, rh, retrySafe(p))
}

// retrySafe reports whether a layer may retry a procedure the kit's server
// serves: no side effects, idempotent, or keyed (the server has the
// ledger).
func retrySafe(p policy.MethodPolicy) bool {
	switch p.Kind {
	case policy.KindNoSideEffects, policy.KindIdempotent, policy.KindKeyed:
		return true
	}
	return false
}

// declare sets the client's owner on a request for the call and returns
// what restores the request's retry headers as they came.
func (c *Client) declare(h http.Header) (restore func()) {
	owner, attempt := h[keyedcore.HTTPRetryOwnerHeader], h[keyedcore.HTTPAttemptHeader]
	h.Set(keyedcore.HTTPRetryOwnerHeader, keyedcore.Declaration{Owner: c.owner}.String())
	return func() {
		for k, v := range map[string][]string{keyedcore.HTTPRetryOwnerHeader: owner, keyedcore.HTTPAttemptHeader: attempt} {
			if v != nil {
				h[k] = v
			} else {
				delete(h, k)
			}
		}
	}
}

// numbered sets an attempt's number on the request, on a client whose
// retries the application owns.
func (c *Client) numbered(h http.Header, attempt int) {
	if c.owner == policy.OwnerApplication {
		h.Set(keyedcore.HTTPAttemptHeader, strconv.Itoa(attempt))
	}
}
