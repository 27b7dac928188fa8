package keyedproto

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/opledger/opledger/keyed"
)

// Rendering is how the transports with google.rpc status codes (gRPC, and
// connect-go, whose codes are the same numbers) render an outcome: with a
// status of the kit's own, Code and an ErrorInfo with the outcome's reason;
// or, when Own is set, with a status that is not the kit's (the handler's,
// the context's, the transport's), which Own names.
type Rendering struct {
	// Code is the status code of the kit's own status; code.Code_OK when
	// Own is set.
	Code code.Code
	// Own names whose status the call ends with when it is not the kit's.
	Own string
}

// renderings is the one table of the RPC renderings, by outcome.
var renderings = map[keyed.Outcome]Rendering{
	keyed.Executed:           {Own: "the handler's: its response, or its recorded final status"},
	keyed.Replayed:           {Own: "the stored answer's, with the replay marker"},
	keyed.NotStored:          {Own: "the handler's"},
	keyed.HandlerPanic:       {Own: "none: the panic goes on to the transport's server"},
	keyed.CallerMissing:      {Code: code.Code_UNAUTHENTICATED},
	keyed.KeyMissing:         {Code: code.Code_INVALID_ARGUMENT},
	keyed.KeyInvalid:         {Code: code.Code_INVALID_ARGUMENT},
	keyed.RequestTooLarge:    {Own: "the transport's RESOURCE_EXHAUSTED (its message size limit), before the kit sees the call"},
	keyed.RequestUnreadable:  {Code: code.Code_INVALID_ARGUMENT},
	keyed.NotKeyed:           {Code: code.Code_INVALID_ARGUMENT},
	keyed.KeyedStream:        {Code: code.Code_UNIMPLEMENTED},
	keyed.KeyReused:          {Code: code.Code_FAILED_PRECONDITION},
	keyed.InProgress:         {Code: code.Code_ABORTED},
	keyed.Incomplete:         {Code: code.Code_FAILED_PRECONDITION},
	keyed.KeyExpired:         {Code: code.Code_FAILED_PRECONDITION},
	keyed.TxAborted:          {Code: code.Code_ABORTED},
	keyed.StorageBusy:        {Code: code.Code_UNAVAILABLE},
	keyed.StorageUnavailable: {Code: code.Code_UNAVAILABLE},
	keyed.CommitUnknown:      {Code: code.Code_UNAVAILABLE},
	keyed.RequestEnded:       {Own: "the context's (CANCELLED or DEADLINE_EXCEEDED)"},
	keyed.ResponseTooLarge:   {Own: "never: a response message is bounded by the ledger's limit alone (result-not-storable)"},
	keyed.NotStorable:        {Code: code.Code_INTERNAL},
	keyed.LedgerMisuse:       {Code: code.Code_INTERNAL},
	keyed.ResultUnreadable:   {Code: code.Code_INTERNAL},
	keyed.NotFound:           {Code: code.Code_NOT_FOUND},
	keyed.NotExecuted:        {Code: code.Code_UNAVAILABLE},
	keyed.NotSent:            {Own: "the last attempt's"},
	keyed.ServerAnswered:     {Own: "the last attempt's"},
	keyed.CallOutcomeUnknown: {Own: "the last attempt's"},
}

// Render returns the RPC rendering of o, and false for an outcome the
// table does not render (a test keeps it total).
func Render(o keyed.Outcome) (Rendering, bool) {
	r, ok := renderings[o]
	return r, ok
}

// Dialect is what an RPC transport adds to the shared rendering: its name
// in the causes' notes, its notes, whose status some outcomes end with in
// its own terms, and how it writes a code's name in its docs' table.
type Dialect struct {
	// Name is the transport's in a cause's note ("; in Name: note").
	Name string
	// Notes are what the transport adds to some outcomes' causes.
	Notes map[keyed.Outcome]string
	// Own says, in the transport's terms, whose status some outcomes end
	// with, instead of the table's Own.
	Own map[keyed.Outcome]string
	// CodeName is a code's name as the docs' table prints it.
	CodeName func(code.Code) string
}

// Cause is a core outcome's cause with the dialect's note.
func (d Dialect) Cause(r keyed.Row) string {
	if n := d.Notes[r.Outcome]; n != "" {
		return r.Cause + "; in " + d.Name + ": " + n
	}
	return r.Cause
}

// Rendering returns how the dialect renders the outcome o: the code and
// ErrorInfo reason of the kit's own status (own ""), or whose status the
// call ends with instead (the handler's, the context's, the transport's,
// the last attempt's; the code is then code.Code_OK), and whether
// grpc-retry-pushback-ms comes with it.
func (d Dialect) Rendering(o keyed.Outcome) (c code.Code, reason string, own string, pushback bool) {
	r := o.Row()
	rr, _ := Render(o)
	if rr.Own != "" {
		own = rr.Own
		if t, ok := d.Own[o]; ok {
			own = t
		}
		return code.Code_OK, r.Reason, own, false
	}
	return rr.Code, r.Reason, "", r.Pushback
}

// TableCells renders an outcome as the transport's docs' table prints it.
func (d Dialect) TableCells(r keyed.Row) []string {
	c, reason, own, pushback := d.Rendering(r.Outcome)
	cell := own
	if own == "" {
		cell = "`" + d.CodeName(c) + "`"
		if pushback {
			cell += " + grpc-retry-pushback-ms"
		}
	}
	rs := "—"
	if reason != "" {
		rs = "`" + reason + "`"
	}
	return []string{"`" + r.Name + "`", cell, rs, string(r.Side), strings.ReplaceAll(d.Cause(r), "|", "\\|"), string(r.Committed), r.Next.String()}
}
