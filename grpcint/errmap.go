package grpcint

import (
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// mapping is one row of the kit's error map: a reason the kit puts in an
// ErrorInfo (domain [ErrorDomain]), the status code it always comes with,
// what produces it, and what a client does next. The map is package
// keyed's classification as gRPC renders it, one row per reason.
type mapping struct {
	// Reason is the ErrorInfo reason.
	Reason string
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

// dialect is gRPC's rendering of the core's outcomes: its notes, and
// whose status some outcomes end with in grpc-go's terms.
var dialect = keyedproto.Dialect{Name: "gRPC",
	Notes: map[keyed.Outcome]string{
		keyed.KeyMissing:  "the idempotency-key header",
		keyed.KeyedStream: "see Server.CheckRegistered",
		keyed.NotExecuted: "grpcint.NotExecuted, from an interceptor in front of the kit's",
	},
	Own: map[keyed.Outcome]string{
		keyed.RequestTooLarge: "grpc-go's RESOURCE_EXHAUSTED (MaxRecvMsgSize), before the interceptor",
		keyed.HandlerPanic:    "none: the panic goes on to grpc-go, which does not recover it (an interceptor in front of the kit's may)",
		keyed.Replayed:        "the stored answer's, with idempotency-replayed and its code in the trailer",
	},
	CodeName: func(c code.Code) string { return codeName(status.Error(codes.Code(c), "")) },
}

// cause is a core outcome's cause with gRPC's note.
func cause(r keyed.Row) string { return dialect.Cause(r) }

// codeOf is the status code gRPC answers outcome o with when the status
// is the kit's own; codes.Unknown for the others.
func codeOf(o keyed.Outcome) codes.Code {
	if r, ok := keyedproto.Render(o); ok && r.Own == "" {
		return codes.Code(r.Code)
	}
	return codes.Unknown
}

// errorMap derives the error map from the classification: one row per
// reason, in the classification's order; two outcomes with one reason
// (INVALID_KEYED_REQUEST) share a row, their causes joined.
func errorMap() []mapping {
	var out []mapping
	at := map[string]int{}
	for _, r := range keyed.Outcomes() {
		if r.Reason == "" {
			continue
		}
		if i, ok := at[r.Reason]; ok {
			out[i].Cause += "; or " + cause(r)
			continue
		}
		at[r.Reason] = len(out)
		out = append(out, mapping{Reason: r.Reason, Code: codeOf(r.Outcome), Side: string(r.Side), Cause: cause(r),
			Next: retry.Action(r.Next), Committed: string(r.Committed)})
	}
	return out
}

// tableCells renders an outcome as docs/grpc.md's table prints it.
func tableCells(r keyed.Row) []string { return dialect.TableCells(r) }
