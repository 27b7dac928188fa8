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
