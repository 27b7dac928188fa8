package httpint

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/keyedconf"
	"github.com/opledger/opledger/internal/ledgerkit"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// The defaults of WithRetryAfter and WithMaxRequestBody.
const (
	defaultRetryAfter     = time.Second
	defaultMaxRequestBody = 1 << 20
)

// Defaults of the middleware's options.
const (
	// DefaultMaxResponseBody is the largest response body a keyed
	// route's handler may write, in bytes; past it the request fails with
	// 500 and nothing is stored. It is the ledger's default result limit
	// (1 MiB: ledger.WithMaxResultSize) less StoredHeaderRoom, so that
	// with every default a response at the limit is stored.
	DefaultMaxResponseBody = ledgerkit.DefaultMaxResultSize - StoredHeaderRoom
	// StoredHeaderRoom is the room a stored response keeps beside its
	// body, in bytes: for the encoding and the allow-listed headers (see
	// WithReplayHeaders). New refuses a response body limit that leaves
	// the ledger's result limit less room than this, so a response whose
	// body is within the limit is stored whenever its allow-listed header
	// names and values, with a length prefix of a few bytes each, take at
	// most StoredHeaderRoom less 16 bytes.
	StoredHeaderRoom = 16 << 10
)

// DefaultReplayHeaders returns the response headers stored with a
// response and replayed with it, as canonical names: the representation
// and caching metadata of the body and where it is. Set-Cookie is never
// among them (see WithSetCookieReplay).
func DefaultReplayHeaders() []string {
	return []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Location", "Content-Type", "Etag", "Expires", "Last-Modified", "Link", "Location", "Vary"}
}

// DefaultFinalStatus reports whether an error status is final by default:
// 400 to 499, except 401 (the credentials may be fixed), 408, 425 and 429
// (the same request may succeed later).
func DefaultFinalStatus(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// option returns httpint's own option called name: a keyed.ServerOption
// that only httpint's middleware honours.
func option(name string, f func(*config) error) keyed.ServerOption {
	return keyedconf.OwnServer("httpint", name, f)
}

// refuses are the shared server options the middleware cannot honour.
var refuses = map[string]string{
	"WithErrorCodec":         "the middleware stores responses, not errors (see WithFinalStatus)",
	"WithInProgressPushback": "the middleware sends Retry-After (see WithRetryAfter)",
	"WithTypeResolver":       "the middleware stores no protobuf messages",
}

// config is the middleware's own settings, which its own options set.
type config struct {
	retryAfter  time.Duration
	maxRequest  int64
	maxResponse int
	final       func(int) bool
	replay      []string
	setCookie   bool
	fpHeaders   []string
	canon       func([]byte) ([]byte, error)
	bareKeys    bool
	windows     []policy.MethodPolicy // WithRouteWindow's, FullMethod the route
}

func defaults() config {
	return config{retryAfter: defaultRetryAfter, maxRequest: defaultMaxRequestBody,
		maxResponse: DefaultMaxResponseBody, final: DefaultFinalStatus, replay: DefaultReplayHeaders()}
}

// WithRetryAfter sets the Retry-After of 409 and 503 answers (default
// 1 s), rounded up to whole seconds, at least 1.
func WithRetryAfter(d time.Duration) keyed.ServerOption {
	return option("WithRetryAfter", func(c *config) error {
		if d <= 0 {
			return errors.New("retry-after must be positive")
		}
		c.retryAfter = d
		return nil
	})
}

// WithMaxRequestBody bounds a keyed request's body in bytes (default
// 1 MiB). A larger body is answered 413 before anything
// is claimed: the body is read whole to be fingerprinted.
func WithMaxRequestBody(n int64) keyed.ServerOption {
	return option("WithMaxRequestBody", func(c *config) error {
		if n < 0 {
			return errors.New("request body limit must not be negative")
		}
		c.maxRequest = n
		return nil
	})
}

// WithMaxResponseBody bounds the response body a keyed route's handler
// may write, in bytes (default DefaultMaxResponseBody). The response is
// buffered until the handler returns; a handler that writes more fails
// with 500 and nothing is stored. The ledger's own limit
// (ledger.WithMaxResultSize) must hold it and StoredHeaderRoom more: New
// refuses a limit it cannot store, when the ledger states its limit
// (ledger.Store, or a ledger of your own with a MaxResultSize method).
func WithMaxResponseBody(n int) keyed.ServerOption {
	return option("WithMaxResponseBody", func(c *config) error {
		if n < 0 {
			return errors.New("response body limit must not be negative")
		}
		c.maxResponse = n
		return nil
	})
}

// WithFinalStatus decides which error statuses, 400 and above, are final
// (default DefaultFinalStatus): a final response is stored and replayed
// to every retry with the key, the handler's writes undone. Any other
// error status rolls everything back and stores nothing, so a retry runs
// the handler again. Statuses below 400 are always stored with the
// handler's writes.
func WithFinalStatus(final func(status int) bool) keyed.ServerOption {
	return option("WithFinalStatus", func(c *config) error {
		if final == nil {
			return errors.New("final-status function must not be nil")
		}
		c.final = final
		return nil
	})
}

// WithReplayHeaders sets the response headers stored and replayed
// (default DefaultReplayHeaders()). The first response gets every header
// the handler set; a replay only these. Set-Cookie is refused here: use
// WithSetCookieReplay.
func WithReplayHeaders(names ...string) keyed.ServerOption {
	return option("WithReplayHeaders", func(c *config) error {
		out := make([]string, 0, len(names))
		for _, n := range names {
			canon, err := headerName(n)
			if err != nil {
				return err
			}
			if canon == "Set-Cookie" {
				return errors.New("Set-Cookie is replayed only with WithSetCookieReplay")
			}
			out = append(out, canon)
		}
		c.replay = out
		return nil
	})
}

// WithSetCookieReplay stores Set-Cookie with the response and replays it.
// Without it a replay never sets a cookie: a cookie is often a session
// granted to whoever sent the first request, and a replay may reach a
// different client of the same caller.
func WithSetCookieReplay() keyed.ServerOption {
	return option("WithSetCookieReplay", func(c *config) error {
		c.setCookie = true
		return nil
	})
}

// WithFingerprintHeaders adds request headers to the fingerprint (by
// default it holds the method, the path, the query and the body): a
// request that differs from the first in one of them is a reused key
// (422).
func WithFingerprintHeaders(names ...string) keyed.ServerOption {
	return option("WithFingerprintHeaders", func(c *config) error {
		for _, n := range names {
			canon, err := headerName(n)
			if err != nil {
				return err
			}
			c.fpHeaders = append(c.fpHeaders, canon)
		}
		return nil
	})
}

// WithBodyCanonicalizer transforms the body before it is fingerprinted
// (not what the handler reads), for example CanonicalJSON, so that
// encodings of the same document fingerprint alike. A body it refuses is
// answered 400.
func WithBodyCanonicalizer(canon func(body []byte) ([]byte, error)) keyed.ServerOption {
	return option("WithBodyCanonicalizer", func(c *config) error {
		if canon == nil {
			return errors.New("canonicaliser must not be nil")
		}
		c.canon = canon
		return nil
	})
}

// WithBareKeys also accepts an Idempotency-Key that is not a
// structured-field string: a value without a leading double quote is the
// key as it is, as clients written for Stripe's API send it. Quoted
// values are parsed as strings either way, so "k" and k are one key.
func WithBareKeys() keyed.ServerOption {
	return option("WithBareKeys", func(c *config) error {
		c.bareKeys = true
		return nil
	})
}

// WithRouteWindow gives one keyed route, as given to New ("POST
// /transfers"), the window policy that grpcint's and connectint's keyed
// methods take from their catalog (policy.MethodPolicy's Retention and
// UnknownBirth). A positive retention, shorter than the ledger's
// (ledger.WithRetention), is how long the route's keys are honoured from
// their birth: a key born before the route's window (the retention less
// the ledger's clock skew) is answered 422 idempotency-key-expired
// without running the handler, and a resolve of it too, and the route's
// answers carry that lifetime in Idempotency-Key-Lifetime; zero keeps the
// ledger's. policy.RefuseUnknownBirth answers a key that carries no birth
// (not a UUIDv7, and sent without Idempotency-Key-First-Sent) 400
// idempotency-key-invalid before anything runs; policy.AcceptUnknownBirth
// accepts it, as every route does without the option. Give it once per
// route. New refuses a route that is not keyed, and a retention longer
// than the ledger's, not longer than its clock skew, or given while the
// ledger does not state its window (a ledger.Store does).
func WithRouteWindow(route string, retention time.Duration, unknownBirth policy.BirthPolicy) keyed.ServerOption {
	return option(fmt.Sprintf("WithRouteWindow(%q)", route), func(c *config) error {
		switch {
		case retention < 0:
			return fmt.Errorf("negative retention %v", retention)
		case unknownBirth > policy.RefuseUnknownBirth:
			return fmt.Errorf("unknown birth policy %v", unknownBirth)
		}
		c.windows = append(c.windows, policy.MethodPolicy{FullMethod: route, Kind: policy.KindKeyed,
			Retention: retention, UnknownBirth: unknownBirth})
		return nil
	})
}

func headerName(n string) (string, error) {
	n = strings.TrimSpace(n)
	if n == "" || !validName([]byte(n)) {
		return "", fmt.Errorf("%q is not a header name", n)
	}
	return http.CanonicalHeaderKey(n), nil
}
