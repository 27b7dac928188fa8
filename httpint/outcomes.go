package httpint

import "fmt"

// ProblemTypeBase prefixes the type URI of every problem the middleware
// answers with: ProblemTypeBase + the outcome's name, for example
// ".../docs/http.md#idempotency-key-missing". The URIs are stable between
// releases: compare them as strings. Each one points to its row of the
// outcome table in docs/http.md.
const ProblemTypeBase = "https://github.com/opledger/opledger/blob/main/docs/http.md#"

// Next is what a client does after a response.
type Next int

const (
	// Stop: the response is the answer; send nothing more with this key
	// (fix the request first, when it is a refusal).
	Stop Next = iota + 1
	// Retry: send the same request with the same key again (after
	// Retry-After, when there is one). Nothing was committed, or a retry
	// replays what was.
	Retry
	// Resolve: the outcome is unknown; ask for it with the key and
	// Idempotency-Resolve: 1 before anything else (a retry with the same
	// key is safe too: it replays when the first one committed).
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

// Outcome is one row of the middleware's outcome table: what a keyed
// request can end with, the status it is answered with, what it says
// about the key's operation and what a client does next.
type Outcome struct {
	// Name is the outcome's stable name. For a problem it is the end of
	// the problem's type URI (see Type).
	Name string
	// Status is the HTTP status the middleware answers with, or 0 when
	// the response is the handler's own (its status, stored or not).
	Status int
	// Title is the problem's title (RFC 9457), "" for the handler's own
	// responses.
	Title string
	// Cause says what produces it.
	Cause string
	// Committed says what it tells about the key's operation: "no"
	// (nothing was committed), "answer" (a final answer is stored, and
	// every retry with the key gets it back), "unknown", or "n/a" (the
	// request was refused before the ledger was asked).
	Committed string
	// Next is what a client does after it.
	Next Next
	// RetryAfter says whether the response carries Retry-After.
	RetryAfter bool
}

// Type returns the outcome's problem type URI, or "" for the handler's
// own responses.
func (o Outcome) Type() string {
	if o.Status == 0 {
		return ""
	}
	return ProblemTypeBase + o.Name
}

// The names of the outcomes, in the order of the table.
const (
	OutcomeExecuted          = "executed"
	OutcomeReplayed          = "replayed"
	OutcomeNotStored         = "not-stored"
	OutcomePanic             = "handler-panic"
	OutcomeNoCaller          = "caller-not-identified"
	OutcomeMissingKey        = "idempotency-key-missing"
	OutcomeInvalidKey        = "idempotency-key-invalid"
	OutcomeRequestTooLarge   = "request-too-large"
	OutcomeRequestUnreadable = "request-unreadable"
	OutcomeNotKeyed          = "route-not-keyed"
	OutcomeKeyReused         = "idempotency-key-reused"
	OutcomeInProgress        = "operation-in-progress"
	OutcomeIncomplete        = "operation-incomplete"
	OutcomeTxAborted         = "transaction-aborted"
	OutcomeStorageBusy       = "storage-busy"
	OutcomeStorage           = "storage-unavailable"
	OutcomeCommitUnknown     = "commit-outcome-unknown"
	OutcomeRequestEnded      = "request-ended"
	OutcomeResponseTooLarge  = "response-too-large"
	OutcomeNotStorable       = "result-not-storable"
	OutcomeLedgerMisuse      = "ledger-misuse"
	OutcomeUnreadable        = "stored-result-unreadable"
	OutcomeNotFound          = "operation-not-found"
)

// outcomes is the one table: the middleware's responses come from it, and
// docs/http.md prints it (a test compares the two).
var outcomes = []Outcome{
	{OutcomeExecuted, 0, "", "the handler answered with a status below 400, or with a final one (WithFinalStatus; by default 4xx but 401, 408, 425 and 429); stored with the claim and committed, the handler's writes with it (for a final status, without them)", "answer", Stop, false},
	{OutcomeReplayed, 0, "", "an earlier request with the key completed: its stored status, allow-listed headers and body, with Idempotent-Replayed: true; the handler does not run", "answer", Stop, false},
	{OutcomeNotStored, 0, "", "the handler answered with a status that is not final (by default 5xx, 401, 408, 425, 429): sent as it is, everything rolled back", "no", Retry, false},
	{OutcomePanic, 0, "", "the handler panicked: rolled back, nothing stored; the panic goes on to net/http, which aborts the response", "no", Retry, false},
	{OutcomeNoCaller, 401, "Caller not identified", "no caller for a keyed request (the caller function found none, or an unusable one)", "n/a", Stop, false},
	{OutcomeMissingKey, 400, "Idempotency-Key is missing", "a keyed route called without an Idempotency-Key header", "n/a", Stop, false},
	{OutcomeInvalidKey, 400, "Idempotency-Key is invalid", "the header is not one structured-field string of 1 to 255 printable ASCII bytes, or is sent twice", "n/a", Stop, false},
	{OutcomeRequestTooLarge, 413, "Request body too large", "the request body is over the limit (WithMaxRequestBody, default 1 MiB); refused before anything is claimed", "n/a", Stop, false},
	{OutcomeRequestUnreadable, 400, "Request cannot be fingerprinted", "the request body cannot be read, or the body canonicaliser refused it", "n/a", Stop, false},
	{OutcomeNotKeyed, 400, "Route is not keyed", "Idempotency-Resolve on a route that is not keyed: there is nothing to resolve, and the handler does not run", "n/a", Stop, false},
	{OutcomeKeyReused, 422, "Idempotency-Key is already used", "ledger.ErrKeyReused: the same caller used the key on the same route for another request (method, path, query or body differ)", "answer", Stop, false},
	{OutcomeInProgress, 409, "A request is outstanding for this Idempotency-Key", "ledger.ErrInProgress: another request with the key holds it, or the connection or the write lock this one waited for, past the wait bound (WithLockWait)", "unknown", Retry, true},
	{OutcomeIncomplete, 500, "Operation has no result", "ledger.ErrIncomplete: the key's entry was committed without a result, outside the middleware", "unknown", Stop, false},
	{OutcomeTxAborted, 503, "Transaction aborted", "ledger.ErrRetryable: serialization failures or deadlocks outlasted the transaction's attempts; rolled back", "no", Retry, true},
	{OutcomeStorageBusy, 503, "Storage busy", "txmiddleware.ErrBusy: the transaction could not begin within the wait bound (WithLockWait) while no other request with the key was in flight: every pooled connection was in use, or on SQLite another transaction held the write lock; nothing was written", "no", Retry, true},
	{OutcomeStorage, 503, "Storage unavailable", "the database failed before COMMIT was sent (a ledger.DBError, a lost connection, a database error the handler reported with ReportError); rolled back", "no", Retry, true},
	{OutcomeCommitUnknown, 503, "Commit outcome unknown", "txmiddleware.ErrCommitUnknown: the connection broke while COMMIT was in flight", "unknown", Resolve, true},
	{OutcomeRequestEnded, 503, "Request ended", "the request's context ended (the client went away, a server timeout) before COMMIT was sent; rolled back", "no", Retry, true},
	{OutcomeResponseTooLarge, 500, "Response too large", "the handler wrote more than the response limit (WithMaxResponseBody, default 1 MiB less StoredHeaderRoom); rolled back", "no", Stop, false},
	{OutcomeNotStorable, 500, "Response cannot be stored", "ledger.ErrInvalid from Complete: the encoded response is over the ledger's size limit (ledger.WithMaxResultSize): with a body within WithMaxResponseBody, only when its stored headers take more than StoredHeaderRoom; rolled back", "no", Stop, false},
	{OutcomeLedgerMisuse, 500, "Ledger misuse", "ledger.ErrNotAcquired: the ledger refused to complete its own claim", "no", Stop, false},
	{OutcomeUnreadable, 500, "Stored response unreadable", "a stored result is not a response this middleware stored", "answer", Stop, false},
	{OutcomeNotFound, 404, "Nothing committed for this Idempotency-Key", "a resolve found nothing committed for the key: sending the request again with it is safe", "no", Retry, false},
}

// Outcomes returns the middleware's outcome table, one row per outcome,
// in a stable order. docs/http.md prints it.
func Outcomes() []Outcome { return append([]Outcome(nil), outcomes...) }

// OutcomeOf returns the row whose problem type URI is typeURI, for a
// client that read a problem+json body.
func OutcomeOf(typeURI string) (Outcome, bool) {
	for _, o := range outcomes {
		if o.Status != 0 && o.Type() == typeURI {
			return o, true
		}
	}
	return Outcome{}, false
}

func outcome(name string) Outcome {
	for _, o := range outcomes {
		if o.Name == name {
			return o
		}
	}
	return Outcome{Name: name, Status: 500, Title: "Internal error", Committed: "unknown", Next: Stop}
}
