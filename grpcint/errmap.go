package grpcint

import (
	"strings"

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

// notes are what gRPC adds to a core outcome's cause.
var notes = map[keyed.Outcome]string{
	keyed.KeyMissing:  "the idempotency-key header",
	keyed.KeyedStream: "see Server.CheckRegistered",
	keyed.NotExecuted: "grpcint.NotExecuted, from an interceptor in front of the kit's",
}

// grpcOwn says, in grpc-go's terms, whose status some outcomes end with.
var grpcOwn = map[keyed.Outcome]string{
	keyed.RequestTooLarge: "grpc-go's RESOURCE_EXHAUSTED (MaxRecvMsgSize), before the interceptor",
	keyed.HandlerPanic:    "none: the panic goes on to grpc-go, which does not recover it (an interceptor in front of the kit's may)",
	keyed.Replayed:        "the stored answer's, with idempotency-replayed and its code in the trailer",
}

// cause is a core outcome's cause with gRPC's note.
func cause(r keyed.Row) string {
	if n := notes[r.Outcome]; n != "" {
		return r.Cause + "; in gRPC: " + n
	}
	return r.Cause
}

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

// rendering returns how gRPC renders the outcome o: the status code and
// ErrorInfo reason of the kit's own status (own ""), or whose status the
// call ends with instead (the handler's, the context's, grpc-go's, the
// last attempt's), and whether grpc-retry-pushback-ms comes with it.
func rendering(o keyed.Outcome) (code codes.Code, reason string, own string, pushback bool) {
	r := o.Row()
	rr, _ := keyedproto.Render(o)
	if rr.Own != "" {
		own = rr.Own
		if g, ok := grpcOwn[o]; ok {
			own = g
		}
		return codes.Unknown, r.Reason, own, false
	}
	return codes.Code(rr.Code), r.Reason, "", r.Pushback
}

// tableCells renders an outcome as docs/grpc.md's table prints it.
func tableCells(r keyed.Row) []string {
	code, reason, own, pushback := rendering(r.Outcome)
	c := own
	if own == "" {
		c = "`" + codeName(status.Error(code, "")) + "`"
		if pushback {
			c += " + grpc-retry-pushback-ms"
		}
	}
	rs := "—"
	if reason != "" {
		rs = "`" + string(reason) + "`"
	}
	return []string{"`" + r.Name + "`", c, rs, string(r.Side), strings.ReplaceAll(cause(r), "|", "\\|"), string(r.Committed), r.Next.String()}
}
