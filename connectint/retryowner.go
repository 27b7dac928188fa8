package connectint

import (
	"context"
	"net/http"
	"strconv"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// judgeRetries has the core judge the retry headers of a call of a
// catalog procedure (unary resolve requests, and unary requests with a
// malformed resolve header, are not judged; a stream's resolve header is
// ignored).
func (s *Server) judgeRetries(ctx context.Context, proc string, h http.Header, unary bool) {
	s.core.RetriesOf(ctx, s.catalog, proc, keyedcore.HTTPRetryHeaders(h), unary && len(h.Values(ResolveHeader)) > 0)
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
