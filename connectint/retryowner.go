package connectint

import (
	"context"
	"net/http"
	"strconv"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// Headers of run-time retry detection (see docs/retry-ownership.md,
// "Detecting a second owner at run time"): keyed's, as grpcint sends and
// reads them. The server also reads X-Envoy-Attempt-Count
// (keyedcore.EnvoyAttemptCountHeader) and, on the gRPC protocol,
// Grpc-Previous-Rpc-Attempts (keyedcore.PreviousAttemptsHeader).
const (
	// RetryOwnerHeader is the client's retry owner, which the client
	// interceptor declares on every call: "application", "mesh" or "none"
	// (see keyedcore.Declaration).
	RetryOwnerHeader = "Opledger-Retry-Owner"
	// AttemptHeader is the attempt number of the client interceptor's own
	// retry loop (1 for the first), sent on every attempt when the
	// application owns the client's retries.
	AttemptHeader = "Opledger-Attempt"
)

// The canonical forms of keyed's lower-case names, to index an
// http.Header.
var (
	envoyAttemptKey     = http.CanonicalHeaderKey(keyedcore.EnvoyAttemptCountHeader)
	previousAttemptsKey = http.CanonicalHeaderKey(keyedcore.PreviousAttemptsHeader)
)

// judgeRetries has the core judge the retry headers of a call of a
// catalog procedure (resolve requests are not judged).
func (s *Server) judgeRetries(ctx context.Context, proc string, h http.Header) {
	rh := keyedcore.RetryHeaders{Attempt: h[AttemptHeader], EnvoyAttempt: h[envoyAttemptKey], PreviousAttempts: h[previousAttemptsKey]}
	if rh.Attempt == nil && rh.EnvoyAttempt == nil && rh.PreviousAttempts == nil || len(h[ResolveHeader]) > 0 {
		return
	}
	p, known := s.catalog.Lookup(proc)
	if !known {
		return
	}
	rh.Owner = h[RetryOwnerHeader]
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
	owner, attempt := h[RetryOwnerHeader], h[AttemptHeader]
	h.Set(RetryOwnerHeader, keyedcore.Declaration{Owner: c.owner}.String())
	return func() {
		for k, v := range map[string][]string{RetryOwnerHeader: owner, AttemptHeader: attempt} {
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
		h.Set(AttemptHeader, strconv.Itoa(attempt))
	}
}
