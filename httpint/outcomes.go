package httpint

import (
	"net/http"
	"strconv"
	"time"

	"github.com/opledger/opledger/keyed"
)

// ProblemTypeBase prefixes the type URI of every problem the middleware
// answers with: ProblemTypeBase + the outcome's name, for example
// ".../docs/http.md#idempotency-key-missing". The URIs are stable between
// releases: compare them as strings. Each one points to its row of the
// outcome table in docs/http.md.
const ProblemTypeBase = "https://github.com/opledger/opledger/blob/main/docs/http.md#"

// Rendering is one row of the middleware's outcome table: what a keyed
// request can end with, the status it is answered with, what it says
// about the key's operation and what a client does next. The table is
// package keyed's classification as HTTP renders it.
type Rendering struct {
	// Name is the outcome's stable name, the classification's. For a
	// problem it is the end of the problem's type URI (see Type).
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
	Next keyed.Next
	// RetryAfter says whether the response carries Retry-After.
	RetryAfter bool
}

// Type returns the outcome's problem type URI, or "" for the handler's
// own responses.
func (o Rendering) Type() string {
	if o.Status == 0 {
		return ""
	}
	return ProblemTypeBase + o.Name
}

// rendering is how HTTP renders one of the classification's outcomes:
// with a problem (status, title, Retry-After) or the handler's own
// response (status 0), a note that adds HTTP's terms to the outcome's
// cause; or never, and why.
type rendering struct {
	status     int
	title      string
	retryAfter bool
	note       string
	never      string
}

// renderings is the HTTP rendering of every outcome (a test keeps it
// total).
var renderings = map[keyed.Outcome]rendering{
	keyed.Executed:           {note: "the handler answered with a status below 400, or with a final one (WithFinalStatus; by default 4xx but 401, 408, 425 and 429), stored with the claim"},
	keyed.Replayed:           {note: "its stored status, allow-listed headers and body, with Idempotent-Replayed: true and Idempotency-Replayed: true"},
	keyed.NotStored:          {note: "a status that is not final (by default 5xx, 401, 408, 425, 429), sent as it is"},
	keyed.HandlerPanic:       {note: "net/http aborts the response"},
	keyed.CallerMissing:      {status: 401, title: "Caller not identified"},
	keyed.KeyMissing:         {status: 400, title: "Idempotency-Key is missing", note: "the Idempotency-Key header"},
	keyed.KeyInvalid:         {status: 400, title: "Idempotency-Key is invalid", note: "the header is one structured-field string; WithBareKeys also takes a bare value"},
	keyed.RequestTooLarge:    {status: 413, title: "Request body too large", note: "WithMaxRequestBody, default 1 MiB"},
	keyed.RequestUnreadable:  {status: 400, title: "Request cannot be read", note: "the body cannot be read, or the body canonicaliser refused it, or Idempotency-Resolve is not 1 or true"},
	keyed.NotKeyed:           {status: 400, title: "Route is not keyed", note: "Idempotency-Resolve on a route that is not keyed"},
	keyed.KeyedStream:        {never: "never: a keyed route's response is buffered whole (its ResponseWriter cannot flush, hijack or stream)"},
	keyed.KeyReused:          {status: 422, title: "Idempotency-Key is already used", note: "the method, path, query, body or a header of WithFingerprintHeaders differ"},
	keyed.InProgress:         {status: 409, title: "A request is outstanding for this Idempotency-Key", retryAfter: true, note: "keyed.WithLockWait"},
	keyed.Incomplete:         {status: 500, title: "Operation has no result"},
	keyed.KeyExpired:         {status: 422, title: "Idempotency-Key has expired", note: "the key's birth is its UUIDv7 time or its Idempotency-Key-First-Sent header; the key's lifetime is in Idempotency-Key-Lifetime"},
	keyed.TxAborted:          {status: 503, title: "Transaction aborted", retryAfter: true},
	keyed.StorageBusy:        {status: 503, title: "Storage busy", retryAfter: true, note: "keyed.WithLockWait"},
	keyed.StorageUnavailable: {status: 503, title: "Storage unavailable", retryAfter: true, note: "the handler's own database error is one it reported with ReportError"},
	keyed.CommitUnknown:      {status: 503, title: "Commit outcome unknown", retryAfter: true},
	keyed.RequestEnded:       {status: 503, title: "Request ended", retryAfter: true},
	keyed.ResponseTooLarge:   {status: 500, title: "Response too large", note: "WithMaxResponseBody, default 1 MiB less StoredHeaderRoom"},
	keyed.NotStorable:        {status: 500, title: "Response cannot be stored", note: "ledger.WithMaxResultSize; with a body within WithMaxResponseBody, only when its stored headers take more than StoredHeaderRoom"},
	keyed.LedgerMisuse:       {status: 500, title: "Ledger misuse"},
	keyed.ResultUnreadable:   {status: 500, title: "Stored response unreadable", note: "a stored result that is not a response this middleware stored"},
	keyed.NotFound:           {status: 404, title: "Nothing committed for this Idempotency-Key"},
	keyed.NotExecuted:        {status: 503, title: "Request not executed", retryAfter: true, note: "NotExecuted, from a middleware in front of this one"},
	keyed.NotSent:            {never: "never: a client's reading (httpint has no client)"},
	keyed.ServerAnswered:     {never: "never: a client's reading (httpint has no client)"},
	keyed.CallOutcomeUnknown: {never: "never: a client's reading (httpint has no client)"},
}

// outcomeOf is the HTTP outcome of one of the classification's rows, and
// false when HTTP never ends a request with it.
func outcomeOf(r keyed.Row) (Rendering, bool) {
	h, ok := renderings[r.Outcome]
	if !ok || h.never != "" {
		return Rendering{}, false
	}
	cause := r.Cause
	if h.note != "" {
		cause += "; in HTTP: " + h.note
	}
	return Rendering{Name: r.Name, Status: h.status, Title: h.title, Cause: cause, Committed: string(r.Committed),
		Next: r.Next, RetryAfter: h.retryAfter}, true
}

// Renderings returns the middleware's outcome table, one row per outcome it
// can end a keyed request with, in a stable order (the classification's).
// docs/http.md prints it with the outcomes it never ends one with.
func Renderings() []Rendering {
	var out []Rendering
	for _, r := range keyed.Outcomes() {
		if o, ok := outcomeOf(r); ok {
			out = append(out, o)
		}
	}
	return out
}

// RenderingOf returns the row whose problem type URI is typeURI, for a
// client that read a problem+json body.
func RenderingOf(typeURI string) (Rendering, bool) {
	for _, o := range Renderings() {
		if o.Status != 0 && o.Type() == typeURI {
			return o, true
		}
	}
	return Rendering{}, false
}

// problemOf is the HTTP outcome of the classification's outcome o.
func problemOf(o keyed.Outcome) Rendering {
	if out, ok := outcomeOf(o.Row()); ok && out.Status != 0 {
		return out
	}
	return Rendering{Name: o.String(), Status: 500, Title: "Internal error", Committed: "unknown", Next: keyed.Stop}
}

// tableCells renders an outcome as docs/http.md's table prints it: each
// problem's row has an anchor, the fragment of its type URI.
func tableCells(r keyed.Row) []string {
	name, status := "`"+r.Name+"`", "the handler's"
	o, ok := outcomeOf(r)
	switch {
	case !ok:
		status, o = renderings[r.Outcome].never, Rendering{Cause: r.Cause, Committed: string(r.Committed), Next: r.Next}
	case o.Status != 0:
		name = `<a id="` + o.Name + `"></a>` + name
		status = strconv.Itoa(o.Status)
		if o.RetryAfter {
			status += " + Retry-After"
		}
	}
	return []string{name, status, o.Cause, o.Committed, o.Next.String()}
}

// NotExecuted answers a keyed request that a middleware in front of this
// one refuses without running it (load shedding, maintenance, a rate
// limit): 503 with Retry-After (retryAfter rounded up to whole seconds, at
// least 1) and the problem request-not-executed. A client then knows that
// nothing was committed and needs no resolve; any other 503 may come from
// a proxy that lost a committed answer. Never call it after the handler
// ran.
func NotExecuted(w http.ResponseWriter, retryAfter time.Duration, detail string) {
	writeProblem(w, keyed.NotExecuted, detail, retryAfter)
}
