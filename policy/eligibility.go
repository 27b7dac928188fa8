package policy

import (
	"fmt"

	"google.golang.org/grpc/codes"
)

// Evidence is what the caller knows about a failed attempt beyond its status.
type Evidence struct {
	// Sent reports that the request may have reached the server: some of it
	// was written to a connection. False means the attempt provably never
	// left the client (no connection, picker failure, refused stream).
	// HeadersReceived or MessageReceived imply it.
	Sent bool
	// HeadersReceived reports that response headers reached the client. For
	// a streaming method the caller may have acted on them, so they are a
	// delivered prefix; for a unary method they are not (see Eligible).
	HeadersReceived bool
	// MessageReceived reports that at least one response message reached
	// the client. For a streaming method a retry would deliver it again; a
	// unary call that failed after it returned nothing to its caller.
	MessageReceived bool
	// HasKey reports that the caller attached an idempotency key to the call.
	HasKey bool
}

// Action is what to do about a failed attempt.
type Action uint8

// Actions.
const (
	// DoNotRetry: return the error to the caller. Decision.Reason says why.
	DoNotRetry Action = iota
	// Retry: the attempt may be repeated (subject to budget and backoff).
	Retry
	// ResolveFirst: a keyed mutation may or may not have committed; ask the
	// server for the outcome under the same key before deciding to run it
	// again.
	ResolveFirst
)

// String returns "do-not-retry", "retry" or "resolve-first".
func (a Action) String() string {
	switch a {
	case DoNotRetry:
		return "do-not-retry"
	case Retry:
		return "retry"
	case ResolveFirst:
		return "resolve-first"
	default:
		return fmt.Sprintf("Action(%d)", uint8(a))
	}
}

// DecisionReason explains a Decision with a stable, machine-readable
// string.
type DecisionReason string

// Reasons.
const (
	// reasonSucceeded: the status is OK; there is nothing to retry.
	reasonSucceeded DecisionReason = "succeeded"
	// ReasonPrefixDelivered: part of the response already reached the
	// caller: a response message, or the headers of a streaming call.
	ReasonPrefixDelivered DecisionReason = "prefix-delivered"
	// reasonNonIdempotent: the method is not idempotent.
	reasonNonIdempotent DecisionReason = "non-idempotent"
	// reasonNoKey: a keyed mutation was called without a key.
	reasonNoKey DecisionReason = "no-key"
	// reasonNoLedger: a keyed mutation has no durable ledger behind it.
	reasonNoLedger DecisionReason = "no-ledger"
	// reasonNotRetryable: the code will not change on a retry (a caller
	// error, a permission problem, a cancelled call…).
	reasonNotRetryable DecisionReason = "code-not-retryable"
	// reasonNotExecuted: the request never reached the server.
	reasonNotExecuted DecisionReason = "not-executed"
	// reasonIdempotent: the call may have run, and running it again is safe.
	reasonIdempotent DecisionReason = "idempotent"
	// reasonKeyedReplay: the call may have failed before committing; the
	// ledger turns a repeat of a committed call into a replay.
	reasonKeyedReplay DecisionReason = "keyed-replay"
	// reasonMayHaveRun: the keyed call may still be running or may have
	// committed; resolve its outcome before running it again.
	reasonMayHaveRun DecisionReason = "may-have-run"
)

// Decision is the outcome of Eligible.
type Decision struct {
	// Action is what to do.
	Action Action
	// Reason says why.
	Reason DecisionReason
}

// String returns "action (reason)".
func (d Decision) String() string { return d.Action.String() + " (" + string(d.Reason) + ")" }

// Eligible decides whether an attempt that ended with code may be retried.
// The rules, in order:
//
//  1. OK is never retried (reasonSucceeded).
//  2. A streaming call that delivered response headers or a message is
//     never retried (ReasonPrefixDelivered). For a unary method they only
//     prove that the request was sent (docs/retry-ownership.md, "Response
//     headers are not a delivered prefix for unary calls").
//  3. A non-idempotent method is never retried (reasonNonIdempotent).
//  4. A keyed mutation without a key (reasonNoKey) or without a durable
//     ledger (reasonNoLedger) is never retried.
//  5. Codes that will not change on a retry are not retried
//     (reasonNotRetryable): CANCELLED, INVALID_ARGUMENT, NOT_FOUND,
//     ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE,
//     UNIMPLEMENTED, DATA_LOSS, UNAUTHENTICATED and any unknown value.
//  6. UNAVAILABLE for a request that was never sent (neither Sent nor any
//     response headers or message) means "not executed" and is retried for
//     every kind that passed rules 3 and 4 (reasonNotExecuted).
//  7. A keyed mutation that failed with DEADLINE_EXCEEDED, or with
//     UNAVAILABLE after the request was sent, may still be running or may
//     have committed: resolve first (reasonMayHaveRun).
//  8. The codes that mean "may have run" — UNAVAILABLE after sending,
//     DEADLINE_EXCEEDED, UNKNOWN, INTERNAL, ABORTED, RESOURCE_EXHAUSTED —
//     are retried for no-side-effects and idempotent methods
//     (reasonIdempotent), and for keyed mutations with key and ledger
//     (reasonKeyedReplay; DEADLINE_EXCEEDED and sent UNAVAILABLE excepted by
//     rule 7).
//
// Eligible does not consult a budget, the attempt count or the deadline; see
// Budget and Backoff.
func Eligible(p MethodPolicy, ev Evidence, code codes.Code) Decision {
	if code == codes.OK {
		return Decision{DoNotRetry, reasonSucceeded}
	}
	if (ev.MessageReceived || ev.HeadersReceived) && p.Shape != ShapeUnary {
		return Decision{DoNotRetry, ReasonPrefixDelivered}
	}
	sent := ev.Sent || ev.HeadersReceived || ev.MessageReceived
	keyed := false
	switch p.Kind {
	case KindNoSideEffects, KindIdempotent:
	case KindKeyed:
		if !ev.HasKey {
			return Decision{DoNotRetry, reasonNoKey}
		}
		if !p.DurableLedger {
			return Decision{DoNotRetry, reasonNoLedger}
		}
		keyed = true
	default:
		return Decision{DoNotRetry, reasonNonIdempotent}
	}
	switch code {
	case codes.Unavailable:
		if !sent {
			return Decision{Retry, reasonNotExecuted}
		}
		if keyed {
			return Decision{ResolveFirst, reasonMayHaveRun}
		}
		return Decision{Retry, reasonIdempotent}
	case codes.DeadlineExceeded:
		if keyed {
			return Decision{ResolveFirst, reasonMayHaveRun}
		}
		return Decision{Retry, reasonIdempotent}
	case codes.Unknown, codes.Internal, codes.Aborted, codes.ResourceExhausted:
		if keyed {
			return Decision{Retry, reasonKeyedReplay}
		}
		return Decision{Retry, reasonIdempotent}
	default:
		return Decision{DoNotRetry, reasonNotRetryable}
	}
}
