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
	Sent bool
	// PrefixDelivered reports that response headers or at least one response
	// message already reached the caller, so a retry would deliver them again.
	PrefixDelivered bool
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

// Reason explains a Decision with a stable, machine-readable string.
type Reason string

// Reasons.
const (
	// ReasonSucceeded: the status is OK; there is nothing to retry.
	ReasonSucceeded Reason = "succeeded"
	// ReasonPrefixDelivered: part of the response already reached the caller.
	ReasonPrefixDelivered Reason = "prefix-delivered"
	// ReasonNonIdempotent: the method is not idempotent.
	ReasonNonIdempotent Reason = "non-idempotent"
	// ReasonNoKey: a keyed mutation was called without a key.
	ReasonNoKey Reason = "no-key"
	// ReasonNoLedger: a keyed mutation has no durable ledger behind it.
	ReasonNoLedger Reason = "no-ledger"
	// ReasonNotRetryable: the code will not change on a retry (a caller
	// error, a permission problem, a cancelled call…).
	ReasonNotRetryable Reason = "code-not-retryable"
	// ReasonNotExecuted: the request never reached the server.
	ReasonNotExecuted Reason = "not-executed"
	// ReasonIdempotent: the call may have run, and running it again is safe.
	ReasonIdempotent Reason = "idempotent"
	// ReasonKeyedReplay: the call may have failed before committing; the
	// ledger turns a repeat of a committed call into a replay.
	ReasonKeyedReplay Reason = "keyed-replay"
	// ReasonMayHaveRun: the keyed call may still be running or may have
	// committed; resolve its outcome before running it again.
	ReasonMayHaveRun Reason = "may-have-run"
)

// Decision is the outcome of Eligible.
type Decision struct {
	// Action is what to do.
	Action Action
	// Reason says why.
	Reason Reason
}

// String returns "action (reason)".
func (d Decision) String() string { return d.Action.String() + " (" + string(d.Reason) + ")" }

// Eligible decides whether an attempt that ended with code may be retried.
// The rules, in order:
//
//  1. OK is never retried (ReasonSucceeded).
//  2. A call that delivered part of its response is never retried
//     (ReasonPrefixDelivered).
//  3. A non-idempotent method is never retried (ReasonNonIdempotent); gRPC's
//     transparent retries already cover attempts that never left the client.
//  4. A keyed mutation without a key (ReasonNoKey) or without a durable
//     ledger (ReasonNoLedger) is never retried.
//  5. Codes that will not change on a retry are not retried
//     (ReasonNotRetryable): CANCELLED, INVALID_ARGUMENT, NOT_FOUND,
//     ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE,
//     UNIMPLEMENTED, DATA_LOSS, UNAUTHENTICATED and any unknown value.
//  6. UNAVAILABLE for a request that was never sent means "not executed"
//     and is retried for every kind that passed rules 3 and 4
//     (ReasonNotExecuted).
//  7. A keyed mutation that failed with DEADLINE_EXCEEDED, or with
//     UNAVAILABLE after the request was sent, may still be running or may
//     have committed: resolve first (ReasonMayHaveRun).
//  8. The codes that mean "may have run" — UNAVAILABLE after sending,
//     DEADLINE_EXCEEDED, UNKNOWN, INTERNAL, ABORTED, RESOURCE_EXHAUSTED —
//     are retried for no-side-effects and idempotent methods
//     (ReasonIdempotent), and for keyed mutations with key and ledger
//     (ReasonKeyedReplay; DEADLINE_EXCEEDED and sent UNAVAILABLE excepted by
//     rule 7).
//
// Eligible does not consult a budget, the attempt count or the deadline; see
// Budget, Throttle and Backoff.
func Eligible(p MethodPolicy, ev Evidence, code codes.Code) Decision {
	if code == codes.OK {
		return Decision{DoNotRetry, ReasonSucceeded}
	}
	if ev.PrefixDelivered {
		return Decision{DoNotRetry, ReasonPrefixDelivered}
	}
	keyed := false
	switch p.Kind {
	case KindNoSideEffects, KindIdempotent:
	case KindKeyed:
		if !ev.HasKey {
			return Decision{DoNotRetry, ReasonNoKey}
		}
		if !p.DurableLedger {
			return Decision{DoNotRetry, ReasonNoLedger}
		}
		keyed = true
	default:
		return Decision{DoNotRetry, ReasonNonIdempotent}
	}
	switch code {
	case codes.Unavailable:
		if !ev.Sent {
			return Decision{Retry, ReasonNotExecuted}
		}
		if keyed {
			return Decision{ResolveFirst, ReasonMayHaveRun}
		}
		return Decision{Retry, ReasonIdempotent}
	case codes.DeadlineExceeded:
		if keyed {
			return Decision{ResolveFirst, ReasonMayHaveRun}
		}
		return Decision{Retry, ReasonIdempotent}
	case codes.Unknown, codes.Internal, codes.Aborted, codes.ResourceExhausted:
		if keyed {
			return Decision{Retry, ReasonKeyedReplay}
		}
		return Decision{Retry, ReasonIdempotent}
	default:
		return Decision{DoNotRetry, ReasonNotRetryable}
	}
}
