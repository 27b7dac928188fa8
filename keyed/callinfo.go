package keyed

import "github.com/opledger/opledger/policy"

// CallInfo is what the kit's client (grpcint's, connectint's) adds to the
// error it returns for a call it retried or resolved, and to every error
// of a keyed call; grpcint.CallInfoOf and connectint.CallInfoOf read it
// back.
type CallInfo struct {
	// Reason is the kit's reading of the call, as the transport's
	// ReasonOf returns it: the reason of Outcome.
	Reason string
	// Outcome is the same reading in the classification.
	Outcome Outcome
	// Next is what the caller can do: policy.Retry (nothing was
	// committed: calling again with Key is safe), policy.ResolveFirst
	// (the outcome is unknown: resolve with Key before anything else, see
	// grpcint.Resolve, connectint.Resolve) or policy.DoNotRetry (the error
	// is the answer).
	Next policy.Action
	// Key is the call's idempotency key ("" for a method that is not
	// keyed). It is never part of the error's message.
	Key string
	// Attempts counts the attempts made, resolves included.
	Attempts int
	// Resolves counts the resolve requests among them.
	Resolves int
	// Decision says why the client stopped: a policy.DecisionReason
	// ("code-not-retryable", …) or "budget-exhausted", "max-attempts",
	// "deadline", "pushback-stop", "resolved", "canceled".
	Decision string
}
