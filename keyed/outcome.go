package keyed

import (
	"fmt"

	"github.com/opledger/opledger/internal/outcomes"
)

// Outcome is one outcome of a keyed call: what a call of a keyed method
// (or a resolve request for one) can end with, on the server or, for the
// client's readings, in the kit's client. Every transport renders every
// outcome (see [Outcomes]); the zero Outcome is none.
type Outcome int

// The outcomes, in the order of the table ([Outcomes]).
const (
	// Executed: the handler ran and its answer committed with the claim.
	Executed Outcome = iota + 1
	// Replayed: an earlier call with the key completed; its stored answer
	// is returned.
	Replayed
	// NotStored: the handler answered with an error that is not final:
	// passed on as it is, everything rolled back, nothing recorded.
	NotStored
	// HandlerPanic: the handler panicked; everything rolled back and the
	// panic goes on.
	HandlerPanic
	// CallerMissing: no caller fingerprint for a keyed call.
	CallerMissing
	// KeyMissing: a keyed method called without a key.
	KeyMissing
	// KeyInvalid: the key is malformed, empty, too long or sent twice,
	// its first-sent time is malformed, it has no birth where its method
	// needs one, or it was born in the future.
	KeyInvalid
	// RequestTooLarge: the request is over the transport's limit.
	RequestTooLarge
	// RequestUnreadable: the request cannot be read or fingerprinted.
	RequestUnreadable
	// NotKeyed: a resolve names a method that is not keyed.
	NotKeyed
	// KeyedStream: a keyed method served as a stream; refused.
	KeyedStream
	// KeyReused: the key was used for another request.
	KeyReused
	// InProgress: another attempt with the key held it past the wait
	// bound.
	InProgress
	// Incomplete: the key's entry was committed without a result.
	Incomplete
	// KeyExpired: the key was born before the ledger's window; the ledger
	// no longer remembers it, and whether it ran is not known here.
	KeyExpired
	// TxAborted: serialization failures or deadlocks outlasted the
	// transaction's attempts.
	TxAborted
	// StorageBusy: the transaction could not begin within the wait bound.
	StorageBusy
	// StorageUnavailable: the database failed before COMMIT was sent.
	StorageUnavailable
	// CommitUnknown: the connection broke while COMMIT was in flight.
	CommitUnknown
	// RequestEnded: the call's context ended before COMMIT was sent.
	RequestEnded
	// ResponseTooLarge: the handler wrote more than the transport's
	// response limit.
	ResponseTooLarge
	// NotStorable: the ledger cannot store the answer.
	NotStorable
	// LedgerMisuse: the ledger refused to complete its own claim.
	LedgerMisuse
	// ResultUnreadable: a stored answer cannot be decoded.
	ResultUnreadable
	// NotFound: a resolve found nothing committed for the key.
	NotFound
	// NotExecuted: something in front of the kit refused the call
	// without running it.
	NotExecuted
	// NotSent (client): the last attempt never left the client and no
	// earlier one can have committed.
	NotSent
	// ServerAnswered (client): the server answered with an error of its
	// own.
	ServerAnswered
	// CallOutcomeUnknown (client): the call ended before its outcome
	// could be learned.
	CallOutcomeUnknown

	numOutcomes = int(CallOutcomeUnknown)
)

// Side says who produces an outcome.
type Side string

const (
	// SideServer: outcomes that come from the server side of a
	// transport (or, for NotExecuted, from something in front of it).
	SideServer Side = "server"
	// SideClient: the kit client's readings of a call whose last attempt
	// carried no server outcome.
	SideClient Side = "client"
)

// OutcomeKind is the coarse class of a server outcome: the opledger.outcome.kind
// of the servers' metrics (beside the outcome's name, their
// opledger.outcome) and the counter of their Stats it counts in.
type OutcomeKind string

const (
	// KindExecuted: the handler ran and its answer committed.
	KindExecuted OutcomeKind = "executed"
	// KindReplayed: a stored answer (for a resolve request too).
	KindReplayed OutcomeKind = "replayed"
	// KindRefused: refused without the handler running: before the claim,
	// or by the ledger (key reused, in progress, incomplete, expired).
	KindRefused OutcomeKind = "refused"
	// KindFailed: nothing was committed by this call (the handler's
	// non-final error, storage trouble) or its commit is unknown.
	KindFailed OutcomeKind = "failed"
	// KindNotFound: a resolve found nothing committed.
	KindNotFound OutcomeKind = "not-found"
)

// Committed says what an outcome tells about the key's operation.
type Committed string

const (
	// CommittedNo: nothing was committed.
	CommittedNo Committed = "no"
	// CommittedAnswer: a final answer is recorded, and every retry with the
	// key gets it back (or the error is the server's answer).
	CommittedAnswer Committed = "answer"
	// CommittedUnknown: whether anything was committed is not known.
	CommittedUnknown Committed = "unknown"
	// CommittedNA: the call never reached the ledger (refused before the
	// claim).
	CommittedNA Committed = "n/a"
)

// Nothing reports whether c says that the attempt committed nothing (or
// never reached the ledger).
func (c Committed) Nothing() bool { return c == CommittedNo || c == CommittedNA }

// Next is what a caller does after an attempt that ended with an outcome.
type Next int

const (
	// Stop: the answer is final; send nothing more with this key (fix the
	// request first, when it is a refusal).
	Stop Next = iota + 1
	// Retry: run the call again with the same key (after the pushback,
	// when there is one): nothing was committed, or a retry replays what
	// was.
	Retry
	// Resolve: the outcome is unknown; ask for it with the key before
	// anything else.
	Resolve
)

// String returns "stop", "retry" or "resolve".
func (n Next) String() string {
	switch n {
	case Stop:
		return "stop"
	case Retry:
		return "retry"
	case Resolve:
		return "resolve"
	}
	return fmt.Sprintf("Next(%d)", int(n))
}

// Row is one row of the classification: an outcome, its stable names and
// what it means for the caller.
type Row struct {
	// Outcome is the outcome.
	Outcome Outcome
	// Name is its stable name, in every transport's table, metric
	// (opledger.outcome), log event and document: the HTTP rendering's
	// problem type ends with it.
	Name string
	// Reason is the stable ErrorInfo reason of the renderings that carry
	// one (gRPC, connect), or "" when they pass on the handler's, the
	// context's or the transport's own status instead.
	Reason string
	// Side says who produces it.
	Side Side
	// Kind is its class on the server ("" for a client outcome).
	Kind OutcomeKind
	// Committed says what it tells about the key's operation.
	Committed Committed
	// Next is what the caller does after an attempt that ended with it.
	// After a resolve request the answer is read differently (see
	// package retry).
	Next Next
	// Pushback says the server asks the caller to wait before its next
	// attempt (grpc-retry-pushback-ms; Retry-After).
	Pushback bool
	// Cause says what produces it, in the words of no transport.
	Cause string
}

// table is the one classification. Every transport renders it, its tests
// produce every row, and its document prints it (tests check all three).
// The names of the outcomes a txmiddleware runner reports too are the
// kit's internal outcomes constants (outcomes.Executed, …): one name for
// one outcome in the runner's metrics, the servers' and the clients'.
var table = [...]Row{
	{Executed, outcomes.Executed, "", SideServer, KindExecuted, CommittedAnswer, Stop, false,
		"the handler ran and its answer committed with the claim: its result with its writes, or a final error recorded without them; every retry with the key gets it back"},
	{Replayed, outcomes.Replayed, "", SideServer, KindReplayed, CommittedAnswer, Stop, false,
		"an earlier call with the key completed: its stored answer, marked as a replay; the handler does not run (claim at commit: it ran and was rolled back)"},
	{NotStored, "not-stored", "", SideServer, KindFailed, CommittedNo, Retry, false,
		"the handler answered with an error that is not final: passed on as it is, everything rolled back, nothing recorded; a retry runs the handler again"},
	{HandlerPanic, "handler-panic", "", SideServer, KindFailed, CommittedNo, Retry, false,
		"the handler panicked: everything rolled back, nothing recorded; the panic goes on to the transport's server"},
	{CallerMissing, "caller-not-identified", "CALLER_NOT_IDENTIFIED", SideServer, KindRefused, CommittedNA, Stop, false,
		"no caller for a keyed call (the caller function found none, or an unusable one)"},
	{KeyMissing, "idempotency-key-missing", "MISSING_IDEMPOTENCY_KEY", SideServer, KindRefused, CommittedNA, Stop, false,
		"a keyed method called without an idempotency key"},
	{KeyInvalid, "idempotency-key-invalid", "INVALID_IDEMPOTENCY_KEY", SideServer, KindRefused, CommittedNA, Stop, false,
		"the key is not 1 to 255 bytes of printable ASCII, or is sent more than once; or its first-sent time is not one IMF-fixdate; or it carries no birth (not a UUIDv7, no first-sent time) where the method's policy refuses such keys; or it was born more than the ledger's clock skew in the future"},
	{RequestTooLarge, "request-too-large", "", SideServer, KindRefused, CommittedNA, Stop, false,
		"the request is over the transport's size limit; refused before anything is claimed"},
	{RequestUnreadable, "request-unreadable", "INVALID_KEYED_REQUEST", SideServer, KindRefused, CommittedNA, Stop, false,
		"the request cannot be read or fingerprinted, or its resolve header has a value other than 1 or true"},
	{NotKeyed, "route-not-keyed", "INVALID_KEYED_REQUEST", SideServer, KindRefused, CommittedNA, Stop, false,
		"a resolve names a method that is not keyed: there is nothing to resolve, and the handler does not run"},
	{KeyedStream, "keyed-method-served-as-stream", "KEYED_METHOD_SERVED_AS_STREAM", SideServer, KindRefused, CommittedNA, Stop, false,
		"a method the catalog marks keyed is served as a stream, which the kit cannot protect; refused without running"},
	{KeyReused, outcomes.KeyReused, "IDEMPOTENCY_KEY_REUSED", SideServer, KindRefused, CommittedAnswer, Stop, false,
		"ledger.ErrKeyReused: the same caller used the key on the same method for another request"},
	{InProgress, outcomes.InProgress, "OPERATION_IN_PROGRESS", SideServer, KindRefused, CommittedUnknown, Retry, true,
		"ledger.ErrInProgress: another attempt with the key holds it, or the connection or the write lock this one waited for, past the wait bound"},
	{Incomplete, outcomes.Incomplete, "OPERATION_INCOMPLETE", SideServer, KindRefused, CommittedUnknown, Stop, false,
		"ledger.ErrIncomplete: the key's entry was committed without a result, outside the kit"},
	{KeyExpired, outcomes.KeyExpired, "IDEMPOTENCY_KEY_EXPIRED", SideServer, KindRefused, CommittedUnknown, Stop, false,
		"ledger.ErrKeyExpired: the key was born before the ledger's window (the method's retention minus the clock skew): the ledger no longer remembers it; whether it ran is not known here; do not run the call again with this key"},
	{TxAborted, outcomes.TxAborted, "TRANSACTION_ABORTED", SideServer, KindFailed, CommittedNo, Retry, false,
		"ledger.ErrRetryable: serialization failures or deadlocks outlasted the transaction's attempts; rolled back"},
	{StorageBusy, outcomes.Busy, "STORAGE_BUSY", SideServer, KindFailed, CommittedNo, Retry, true,
		"txmiddleware.ErrBusy: the transaction could not begin within the wait bound while no other attempt with the key was in flight (every pooled connection in use; on SQLite, another transaction held the write lock); nothing was written"},
	{StorageUnavailable, "storage-unavailable", "STORAGE_UNAVAILABLE", SideServer, KindFailed, CommittedNo, Retry, false,
		"the database failed before COMMIT was sent (a ledger.DBError, a lost connection, the handler's own database error); rolled back"},
	{CommitUnknown, outcomes.CommitUnknown, "COMMIT_OUTCOME_UNKNOWN", SideServer, KindFailed, CommittedUnknown, Resolve, false,
		"txmiddleware.ErrCommitUnknown: the connection broke, or the call's context ended, while COMMIT was in flight"},
	{RequestEnded, outcomes.RequestEnded, "", SideServer, KindFailed, CommittedNo, Retry, false,
		"the call's context ended (the client went away, a deadline, a server timeout) before COMMIT was sent; rolled back"},
	{ResponseTooLarge, "response-too-large", "", SideServer, KindFailed, CommittedNo, Stop, false,
		"the handler wrote more than the transport's response limit; rolled back"},
	{NotStorable, "result-not-storable", "RESULT_NOT_STORABLE", SideServer, KindFailed, CommittedNo, Stop, false,
		"ledger.ErrInvalid from Complete: the encoded answer is over the ledger's size limit, or its type name is not storable; rolled back"},
	{LedgerMisuse, "ledger-misuse", "LEDGER_MISUSE", SideServer, KindFailed, CommittedNo, Stop, false,
		"ledger.ErrNotAcquired: the ledger refused to complete its own claim; rolled back"},
	{ResultUnreadable, "stored-result-unreadable", "STORED_RESULT_UNREADABLE", SideServer, KindFailed, CommittedAnswer, Stop, false,
		"a stored answer cannot be decoded by this server (not one this transport stored, or a type it does not link)"},
	{NotFound, "operation-not-found", "OPERATION_NOT_FOUND", SideServer, KindNotFound, CommittedNo, Retry, false,
		"a resolve found nothing committed for the key: running the call again with it is safe"},
	{NotExecuted, "request-not-executed", "REQUEST_NOT_EXECUTED", SideServer, KindFailed, CommittedNo, Retry, false,
		"something in front of the kit (load shedding, maintenance) refused the call without running it"},
	{NotSent, "request-not-sent", "REQUEST_NOT_SENT", SideClient, "", CommittedNo, Retry, false,
		"the last attempt never left the client and no earlier attempt can have committed"},
	{ServerAnswered, "server-answered", "SERVER_ANSWERED", SideClient, "", CommittedAnswer, Stop, false,
		"the server answered with an error of its own: the handler's (recorded and replayed when final) or the transport's"},
	{CallOutcomeUnknown, "call-outcome-unknown", "CALL_OUTCOME_UNKNOWN", SideClient, "", CommittedUnknown, Resolve, false,
		"the deadline (without one, the resolve window) or a cancellation ended the call before its outcome could be learned, or the channel's retry owner does not resolve; resolve later with the key"},
}

// Outcomes returns the classification, one row per outcome, in a stable
// order.
func Outcomes() []Row { return append([]Row(nil), table[:]...) }

// Row returns o's row; the zero Row for an outcome that is not one.
func (o Outcome) Row() Row {
	if o < 1 || int(o) > numOutcomes {
		return Row{}
	}
	return table[o-1]
}

// String returns the outcome's name ([Row].Name).
func (o Outcome) String() string {
	if r := o.Row(); r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Named returns the outcome called name.
func Named(name string) (Outcome, bool) {
	for _, r := range table {
		if r.Name == name {
			return r.Outcome, true
		}
	}
	return 0, false
}

// OfReason returns the first outcome (in table order) whose ErrorInfo
// reason is reason. Two server outcomes share INVALID_KEYED_REQUEST
// (RequestUnreadable and NotKeyed), alike in everything a caller reads.
func OfReason(reason string) (Outcome, bool) {
	if reason == "" {
		return 0, false
	}
	for _, r := range table {
		if r.Reason == reason {
			return r.Outcome, true
		}
	}
	return 0, false
}
