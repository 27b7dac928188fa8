package connectint

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/policy"
)

// judgeRetries has the core judge the retry headers of a call of a
// catalog procedure (unary resolve requests, and unary requests with a
// malformed resolve header, are not judged; a stream's resolve header is
// ignored). It returns the value of keyedcore.SecondOwnerHeader: the
// layers that are second owners, "" when there is none.
func (s *Server) judgeRetries(ctx context.Context, proc string, h http.Header, unary bool) string {
	return s.core.RetriesOf(ctx, s.catalog, proc, keyedcore.HTTPRetryHeaders(h), unary && len(h.Values(ResolveHeader)) > 0).SecondOwners()
}

// secondOwner names the second owners (v, when not "") in an answer's
// metadata: an error's (which connect sends as headers or trailers, as
// its protocol does) or a response's trailer.
func secondOwner(v string, out connect.AnyResponse, err error) {
	if v == "" {
		return
	}
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		ce.Meta().Set(keyedcore.HTTPSecondOwner, v)
	case err == nil && out != nil:
		out.Trailer().Set(keyedcore.HTTPSecondOwner, v)
	}
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
