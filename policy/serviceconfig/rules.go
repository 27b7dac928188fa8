package serviceconfig

import (
	"math"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/policy"
)

// The ranges grpc-go accepts for the fields of a retry policy and of
// retryThrottling. Each rule is written once, here, and applied both by the
// typed structs' Validate methods (RetryPolicy.Validate,
// RetryThrottling.Validate, hence Parse and Config.JSON) and by the
// JSON-tree validator (Validate), which words its findings around the
// rule's problem.

// minAttempts is the smallest maxAttempts grpc-go accepts: it counts the
// original call.
const minAttempts = 2

// grpcMaxAttempts is grpc-go's default cap on attempts per call; larger
// maxAttempts values are clamped to it without error.
const grpcMaxAttempts = 5

// rule is the range check of one field.
type rule[T any] struct {
	field string       // the JSON key
	ok    func(T) bool // reports whether a value is in range
	want  string       // what a value in range is, after "must": "be positive"
}

// problem returns "" if v is in range, and otherwise the problem, naming the
// field and, if text is not empty, the value as text shows it:
// "maxAttempts 1 must be at least 2 (it counts the original call)".
func (r rule[T]) problem(v T, text string) string {
	if r.ok(v) {
		return ""
	}
	if text == "" {
		return r.field + " must " + r.want
	}
	return r.field + " " + text + " must " + r.want
}

func positiveDuration(d time.Duration) bool { return d > 0 }

// positiveFinite rejects zero, negative numbers, NaN and the infinities.
func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// The rules of a retry policy. grpc-go requires every field.
var (
	maxAttemptsRule = rule[int64]{"maxAttempts",
		func(n int64) bool { return n >= minAttempts }, "be at least 2 (it counts the original call)"}
	initialBackoffRule    = rule[time.Duration]{"initialBackoff", positiveDuration, "be positive"}
	maxBackoffRule        = rule[time.Duration]{"maxBackoff", positiveDuration, "be positive"}
	backoffMultiplierRule = rule[float64]{"backoffMultiplier", positiveFinite, "be a positive number"}
	retryableCodesRule    = rule[int]{"retryableStatusCodes", // the number of codes listed
		func(n int) bool { return n > 0 }, "list at least one code"}
)

// The rules of retryThrottling. grpc-go requires both fields.
var (
	maxTokensRule = rule[float64]{"maxTokens",
		func(x float64) bool { return x > 0 && x <= 1000 }, "be in (0, 1000]"}
	tokenRatioRule = rule[float64]{"tokenRatio", positiveFinite, "be positive"}
)

// attemptsClamped reports whether grpc-go silently lowers maxAttempts n to
// its cap. It is not an error for grpc-go; Validate reports it and
// Generate refuses such settings.
func attemptsClamped(n int64) bool { return n > grpcMaxAttempts }

// retryable is the decision policy.Eligible makes for code on an idempotent
// method after the request was sent: a retryable status code that policy
// does not retry is one a retry cannot change (Validate reports it,
// Generate refuses it).
func retryable(c codes.Code) policy.Decision {
	return policy.Eligible(policy.MethodPolicy{Kind: policy.KindIdempotent}, policy.Evidence{Sent: true}, c)
}

// problems returns the non-empty problems, in order.
func problems(probs ...string) []string {
	out := probs[:0]
	for _, p := range probs {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}
