package grpcint

import (
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// Metadata keys the kit reads and writes. gRPC metadata keys are lower case.
const (
	// KeyHeader carries the caller's idempotency key on a keyed call. The
	// same key must be sent on every attempt of one logical call.
	KeyHeader = "idempotency-key"
	// ResolveHeader, set to "1" on a keyed call, asks the server for the
	// stored outcome of the key instead of running the handler.
	ResolveHeader = "idempotency-resolve"
	// ReplayedHeader is set to "true" in the response trailer when the
	// response is a stored outcome (a replay or a resolve), not a new
	// execution.
	ReplayedHeader = "idempotency-replayed"
	// ReplayedCodeHeader comes with ReplayedHeader and holds the status
	// code of the replayed outcome in decimal ("0" for a stored response),
	// so that a client can tell a replayed error from a replayed response
	// whose answer was lost below it.
	ReplayedCodeHeader = "idempotency-replayed-code"
)

// ErrorDomain is the ErrorInfo domain of every error detail the kit adds.
const ErrorDomain = "opledger.grpcint"

// Reason is the stable ErrorInfo reason of a status the kit returns. The
// string values do not change between releases. [ErrorMap] gives each
// reason's status code, cause and what a client does next; docs/grpc.md
// prints that table.
type Reason string

// Reasons the server interceptor returns.
const (
	// ReasonMissingKey: a keyed method was called without an
	// idempotency-key header (INVALID_ARGUMENT). Fix the client.
	ReasonMissingKey Reason = "MISSING_IDEMPOTENCY_KEY"
	// ReasonInvalidKey: the key is empty, too long, not printable ASCII,
	// or sent more than once (INVALID_ARGUMENT). Fix the client.
	ReasonInvalidKey Reason = "INVALID_IDEMPOTENCY_KEY"
	// ReasonInvalidRequest: the request cannot be fingerprinted, or a
	// resolve names a method that is not keyed (INVALID_ARGUMENT).
	ReasonInvalidRequest Reason = "INVALID_KEYED_REQUEST"
	// ReasonNoCaller: no caller fingerprint could be established for a
	// keyed call (UNAUTHENTICATED). Authenticate the channel.
	ReasonNoCaller Reason = "CALLER_NOT_IDENTIFIED"
	// ReasonKeyReused: the key was used before, by the same caller on the
	// same method, with a different request (FAILED_PRECONDITION). Use a
	// new key for a new request; never retry with this one.
	ReasonKeyReused Reason = "IDEMPOTENCY_KEY_REUSED"
	// ReasonInProgress: another attempt with the same key is still running
	// (ABORTED, with grpc-retry-pushback-ms). Retry with the same key after
	// the pushback: the retry waits for that attempt or replays it.
	ReasonInProgress Reason = "OPERATION_IN_PROGRESS"
	// ReasonIncomplete: the key's entry was committed without a result, so
	// its outcome is unknown until the entry expires (FAILED_PRECONDITION).
	ReasonIncomplete Reason = "OPERATION_INCOMPLETE"
	// ReasonTransactionAborted: serialization failures or deadlocks
	// outlasted the server's transaction attempts; nothing was committed
	// (ABORTED). Retry with the same key.
	ReasonTransactionAborted Reason = "TRANSACTION_ABORTED"
	// ReasonStorageBusy: the transaction could not begin within the
	// lock-wait bound (every pooled connection in use; on SQLite, another
	// transaction held the write lock) while no other attempt with the
	// same key was in flight on the server; nothing was committed
	// (UNAVAILABLE, with grpc-retry-pushback-ms). Retry with the same key
	// after the pushback.
	ReasonStorageBusy Reason = "STORAGE_BUSY"
	// ReasonStorageUnavailable: the database failed before COMMIT was
	// sent; nothing was committed (UNAVAILABLE). Retry with the same key.
	ReasonStorageUnavailable Reason = "STORAGE_UNAVAILABLE"
	// ReasonOutcomeUnknown: the commit was sent but its outcome is unknown
	// (UNAVAILABLE). Resolve with the same key before running it again.
	ReasonOutcomeUnknown Reason = "COMMIT_OUTCOME_UNKNOWN"
	// ReasonResultNotStorable: the handler's response cannot be stored
	// (over the ledger's size limit); nothing was committed, and running
	// the call again would fail again (INTERNAL).
	ReasonResultNotStorable Reason = "RESULT_NOT_STORABLE"
	// ReasonLedgerMisuse: the ledger refused to complete a claim it had
	// returned, a defect of the ledger implementation; nothing was
	// committed (INTERNAL).
	ReasonLedgerMisuse Reason = "LEDGER_MISUSE"
	// ReasonResultUnreadable: a stored result cannot be decoded, e.g. its
	// message type is not linked into the server (INTERNAL).
	ReasonResultUnreadable Reason = "STORED_RESULT_UNREADABLE"
	// ReasonNotFound: a resolve found nothing committed for the key
	// (NOT_FOUND). Running the call again with the same key is safe.
	ReasonNotFound Reason = "OPERATION_NOT_FOUND"
	// ReasonKeyedStream: the catalog marks the method keyed but the
	// server serves it as a stream, which the kit cannot protect; the
	// call is refused without running (UNIMPLEMENTED). Fix the server:
	// register the method as unary, or the catalog (see
	// [Server.CheckRegistered]).
	ReasonKeyedStream Reason = "KEYED_METHOD_SERVED_AS_STREAM"
	// ReasonNotExecuted: an interceptor in front of the handler refused
	// the call without running it (see [NotExecuted]). Retry with the
	// same key when you like.
	ReasonNotExecuted Reason = "REQUEST_NOT_EXECUTED"
)

// Reasons the client interceptor gives the error it returns for a keyed
// call when the last attempt's status carries no reason of the kit's.
const (
	// ReasonNotSent: the last attempt never left the client, and no
	// earlier attempt can have committed. Nothing was committed.
	ReasonNotSent Reason = "REQUEST_NOT_SENT"
	// ReasonHandlerError: the server answered with a status of its own:
	// the handler's error (recorded and replayed to every retry when it
	// is final) or gRPC's (UNIMPLEMENTED, …). It is the answer.
	ReasonHandlerError Reason = "SERVER_ANSWERED"
	// ReasonCallOutcomeUnknown: the deadline (without one, the resolve
	// window) or a cancellation ended the call before its outcome could be
	// learned, or the channel's owner (mesh, none) does not resolve.
	// Resolve later with the key (see [CallInfo]).
	ReasonCallOutcomeUnknown Reason = "CALL_OUTCOME_UNKNOWN"
)

// NotExecuted returns an error with code c, message msg and reason
// [ReasonNotExecuted], for an interceptor that runs before the kit's server
// interceptor and refuses a keyed call without running it (load shedding,
// maintenance, rate limits). The kit's client then knows that nothing was
// committed and needs no resolve. Never return it after the handler ran.
func NotExecuted(c codes.Code, msg string) error {
	return newStatus(c, ReasonNotExecuted, msg, nil).Err()
}

// newStatus builds a status with an ErrorInfo detail. meta may be nil.
func newStatus(c codes.Code, reason Reason, msg string, meta map[string]string) *status.Status {
	st := status.New(c, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: ErrorDomain, Metadata: meta}); err == nil {
		return d
	}
	return st
}

// statusErr builds the server's error for outcome o: the code and the
// reason its rendering gives it.
func statusErr(o keyed.Outcome, msg string) error {
	c := codeOf(o)
	if c == codes.Unknown {
		c = codes.Internal // an outcome the server never answers itself
	}
	return newStatus(c, Reason(o.Row().Reason), msg, nil).Err()
}

// kitInfos returns the kit's ErrorInfo details in err's status, in order.
func kitInfos(err error) []*errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain {
			out = append(out, ei)
		}
	}
	return out
}

// ReasonOf returns the kit's ErrorInfo reason in err's status, or "" if
// err carries none. For an error the client interceptor returned it is the
// client's reading of the call (see [CallInfo]); for a status the server
// returned, the server's reason.
func ReasonOf(err error) Reason {
	infos := kitInfos(err)
	if len(infos) == 0 {
		return ""
	}
	return Reason(infos[len(infos)-1].GetReason())
}

// CallInfo is what the client interceptor adds to the error it returns
// for a call it retried or resolved, and to every error of a keyed call.
type CallInfo struct {
	// Reason is the kit's reading of the call (as ReasonOf returns it).
	Reason Reason
	// Outcome is the same reading in package keyed's classification.
	Outcome keyed.Outcome
	// Next is what the caller can do: policy.Retry (nothing was
	// committed: calling again with Key is safe), policy.ResolveFirst
	// (the outcome is unknown: resolve with Key before anything else, see
	// [Resolve]) or policy.DoNotRetry (the error is the answer).
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

// CallInfoOf returns what the client interceptor recorded in err, and
// false when err did not come from it.
func CallInfoOf(err error) (CallInfo, bool) {
	infos := kitInfos(err)
	for i := len(infos) - 1; i >= 0; i-- {
		ri, ok := retry.InfoOf(infos[i].GetReason(), infos[i].GetMetadata())
		if !ok {
			continue
		}
		return CallInfo{Reason: Reason(infos[i].GetReason()), Outcome: ri.Outcome, Next: retry.Action(ri.Next), Key: ri.Key,
			Attempts: ri.Attempts, Resolves: ri.Resolves, Decision: ri.Decision}, true
	}
	return CallInfo{}, false
}

// withCallInfo returns err (its code and details, its message followed by
// the attempt count and the decision) with the client's ErrorInfo
// appended.
func withCallInfo(err error, ci retry.Info) error {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	p := st.Proto()
	if suffix := ci.Suffix(); !strings.HasSuffix(p.GetMessage(), suffix) {
		p.Message = p.GetMessage() + suffix
	}
	st = status.FromProto(p)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ci.Outcome.Row().Reason, Domain: ErrorDomain, Metadata: ci.Metadata()}); derr == nil {
		st = d
	}
	return st.Err()
}

// ErrInvalidConfig is returned (wrapped) by constructors given a
// configuration that cannot work: a keyed method without a ledger, a keyed
// streaming method, a retry entry on a channel the service config does not
// own, a missing caller function.
var ErrInvalidConfig = errors.New("grpcint: invalid configuration")
