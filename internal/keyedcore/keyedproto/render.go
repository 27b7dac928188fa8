package keyedproto

import (
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
