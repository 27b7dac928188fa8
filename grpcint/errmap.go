package grpcint

import (
	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/policy"
)

// Mapping is one row of the kit's error map: a reason the kit puts in an
// ErrorInfo (domain [ErrorDomain]), the status code it always comes with,
// what produces it, and what a client does next.
type Mapping struct {
	// Reason is the ErrorInfo reason.
	Reason Reason
	// Code is the status code that always comes with a server reason. An
	// error with a client reason keeps the code of the attempt it ends
	// with; Code is then codes.Unknown.
	Code codes.Code
	// Side is "server" for reasons the server interceptor returns and
	// "client" for the ones the client interceptor adds to the error it
	// returns.
	Side string
	// Cause says what produces it.
	Cause string
	// Next is what a client does after an attempt that ended with it:
	// policy.Retry (run the call again with the same key: nothing was
	// committed, or a retry replays), policy.ResolveFirst (the outcome is
	// unknown: resolve with the same key before anything else) or
	// policy.DoNotRetry (the answer is final). The answer to a resolve
	// request is read differently (see [Resolve]).
	Next policy.Action
	// Committed says what the reason tells about the key's operation:
	// "no" (nothing was committed), "answer" (a final answer is recorded
	// and every retry with the key gets it back), "unknown", or "n/a"
	// (the call never reached the ledger: a refusal before the claim).
	Committed string
}

// errorMap is the one table. The server's statuses, the client's decisions
// and docs/grpc.md's table all come from it (a test compares the doc with
// it).
var errorMap = []Mapping{
	{ReasonMissingKey, codes.InvalidArgument, "server", "a keyed method called without an idempotency-key header", policy.DoNotRetry, "n/a"},
	{ReasonInvalidKey, codes.InvalidArgument, "server", "the key is empty, longer than 255 bytes, not printable ASCII, or sent twice", policy.DoNotRetry, "n/a"},
	{ReasonInvalidRequest, codes.InvalidArgument, "server", "the request cannot be fingerprinted, or a resolve names a method that is not keyed", policy.DoNotRetry, "n/a"},
	{ReasonNoCaller, codes.Unauthenticated, "server", "no caller fingerprint for a keyed call", policy.DoNotRetry, "n/a"},
	{ReasonKeyReused, codes.FailedPrecondition, "server", "ledger.ErrKeyReused: the key was used by the same caller on the same method for another request", policy.DoNotRetry, "answer"},
	{ReasonInProgress, codes.Aborted, "server", "ledger.ErrInProgress: another attempt with the key holds it past the wait bound (with grpc-retry-pushback-ms)", policy.Retry, "unknown"},
	{ReasonIncomplete, codes.FailedPrecondition, "server", "ledger.ErrIncomplete: the key's entry was committed without a result", policy.DoNotRetry, "unknown"},
	{ReasonTransactionAborted, codes.Aborted, "server", "ledger.ErrRetryable: serialization failures or deadlocks outlasted the transaction's attempts; rolled back", policy.Retry, "no"},
	{ReasonStorageBusy, codes.Unavailable, "server", "txmiddleware.ErrBusy: the transaction could not begin within the wait bound (no free pooled connection; on SQLite, another key held the write lock); rolled back (with grpc-retry-pushback-ms)", policy.Retry, "no"},
	{ReasonStorageUnavailable, codes.Unavailable, "server", "the database failed before COMMIT was sent (a ledger.DBError, a lost connection, the handler's own database error); rolled back", policy.Retry, "no"},
	{ReasonOutcomeUnknown, codes.Unavailable, "server", "txmiddleware.ErrCommitUnknown: the connection broke while COMMIT was in flight", policy.ResolveFirst, "unknown"},
	{ReasonResultNotStorable, codes.Internal, "server", "ledger.ErrInvalid from Complete: the response is over the ledger's size limit or its type name is not storable; rolled back", policy.DoNotRetry, "no"},
	{ReasonLedgerMisuse, codes.Internal, "server", "ledger.ErrNotAcquired: the ledger refused to complete its own claim", policy.DoNotRetry, "no"},
	{ReasonResultUnreadable, codes.Internal, "server", "a stored result cannot be decoded (its message type is not linked into the server)", policy.DoNotRetry, "answer"},
	{ReasonNotFound, codes.NotFound, "server", "a resolve found nothing committed for the key", policy.Retry, "no"},
	{ReasonKeyedStream, codes.Unimplemented, "server", "a method the catalog marks keyed is served as a stream (see Server.CheckRegistered); refused without running", policy.DoNotRetry, "n/a"},
	{ReasonNotExecuted, codes.Unavailable, "server", "NotExecuted: an interceptor in front of the handler refused the call without running it (load shedding, maintenance)", policy.Retry, "no"},
	{ReasonNotSent, codes.Unknown, "client", "the last attempt never left the client and no earlier attempt can have committed", policy.Retry, "no"},
	{ReasonHandlerError, codes.Unknown, "client", "the server answered with a status of its own: the handler's error (recorded and replayed when final) or gRPC's own (UNIMPLEMENTED, …)", policy.DoNotRetry, "answer"},
	{ReasonCallOutcomeUnknown, codes.Unknown, "client", "the deadline (without one, the resolve window) or a cancellation ended the call before its outcome could be learned, or the channel's owner (mesh, none) does not resolve; resolve later with CallInfo's key", policy.ResolveFirst, "unknown"},
}

// ErrorMap returns the kit's error map, one row per reason, in a stable
// order: the server interceptor's statuses and the client interceptor's
// decisions both come from it, and docs/grpc.md prints it.
func ErrorMap() []Mapping { return append([]Mapping(nil), errorMap...) }

// mapping returns the row of reason r.
func mapping(r Reason) (Mapping, bool) {
	for _, m := range errorMap {
		if m.Reason == r {
			return m, true
		}
	}
	return Mapping{}, false
}
