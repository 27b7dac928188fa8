package mesh

import (
	"strconv"
	"strings"
)

// envoyConditions are the retry_on values Envoy knows (its router's
// x-envoy-retry-on and x-envoy-retry-grpc-on lists), which Istio's retryOn
// passes through. notSent marks the ones under which the request cannot
// have reached the application: retrying them is safe for any method.
var envoyConditions = map[string]struct{ notSent, grpc bool }{
	"5xx":                        {},
	"gateway-error":              {},
	"reset":                      {},
	"reset-before-request":       {notSent: true},
	"connect-failure":            {notSent: true},
	"envoy-ratelimited":          {notSent: true},
	"retriable-4xx":              {},
	"refused-stream":             {notSent: true},
	"retriable-status-codes":     {},
	"retriable-headers":          {},
	"http3-post-connect-failure": {notSent: true},
	"cancelled":                  {grpc: true},
	"deadline-exceeded":          {grpc: true},
	"internal":                   {grpc: true},
	"resource-exhausted":         {grpc: true},
	"unavailable":                {grpc: true},
}

// grpcConditions are the five gRPC retry conditions, the only ones a
// proxyless xDS channel and Linkerd's retry.linkerd.io/grpc read.
var grpcConditions = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

func isGRPCCondition(c string) bool {
	for _, g := range grpcConditions {
		if c == g {
			return true
		}
	}
	return false
}

// mayHaveRun reports whether a retry condition can be met after the
// application received the request: every condition except the ones that
// prove it was never sent (connect-failure, refused-stream,
// reset-before-request, envoy-ratelimited, http3-post-connect-failure).
func mayHaveRun(cond string) bool {
	name, _, _ := strings.Cut(cond, " ") // "retriable-status-codes (503)"
	if c, ok := envoyConditions[name]; ok {
		return !c.notSent
	}
	return true // HTTP status codes, "connection-error", "isRetryable", timeouts
}

// unsafeConditions returns the conditions under which a call may have run.
func unsafeConditions(conds []string) []string {
	var out []string
	for _, c := range conds {
		if mayHaveRun(c) {
			out = append(out, c)
		}
	}
	return out
}

// splitList splits a comma-separated list, trimming blanks and dropping
// empty elements.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// httpStatus reports whether s is an HTTP status code, 100–599.
func httpStatus(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 100 && n <= 599 && !strings.HasPrefix(s, "+")
}

// union adds the elements of b missing from a, keeping a's order.
func union(a, b []string) []string {
	for _, x := range b {
		found := false
		for _, y := range a {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			a = append(a, x)
		}
	}
	return a
}

// knownHTTPStatus reports whether Go's net/http has a name for the status
// code (http.StatusText is not empty): Istio's validation and its
// conversion of retryOn (pilot's retry.ConvertPolicy) take only those for
// status codes.
func knownHTTPStatus(n int) bool {
	switch {
	case n >= 100 && n <= 103, n >= 200 && n <= 208, n == 226,
		n >= 300 && n <= 308 && n != 306,
		n >= 400 && n <= 418, n >= 421 && n <= 426, n == 428, n == 429, n == 431, n == 451,
		n >= 500 && n <= 508, n == 510, n == 511:
		return true
	}
	return false
}

// effectiveConditions returns the conditions a retry policy really retries
// on, as the layer names them: retriable-status-codes carries its codes
// ("retriable-status-codes (503)"), and is dropped when no code is listed —
// Envoy then retries no status code (only codes a request itself names in
// x-envoy-retriable-status-codes, which the kit never sends); the same
// holds for retriable-headers without retriable_headers.
func effectiveConditions(on []string, codes []int, headers bool) []string {
	out := make([]string, 0, len(on))
	for _, c := range on {
		switch {
		case c == "retriable-status-codes" && len(codes) == 0:
			continue
		case c == "retriable-status-codes":
			cs := make([]string, len(codes))
			for i, n := range codes {
				cs[i] = strconv.Itoa(n)
			}
			c += " (" + strings.Join(cs, ",") + ")"
		case c == "retriable-headers" && !headers:
			continue
		}
		out = append(out, c)
	}
	return out
}
