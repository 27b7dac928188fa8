package keyedproto

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedtx"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// Serve reads a keyed call of a protobuf transport and has the core run or
// resolve it: the key (keys, the key header's values, or req's
// request_id; see Identify), its first-sent values (firstSent) and the
// caller (caller, ok: the transport's caller function's), then, unless
// the call is a resolve request, the request's fingerprint (the
// transport's fingerprint function, whose error is the answer's Err) and
// the run of work with the claim.
func Serve(ctx context.Context, call *keyedcore.Call, caller string, ok bool, keys, firstSent []string, req any, resolve bool,
	fingerprint func(req any) (ledger.Fingerprint, error), work keyedtx.Work) keyedcore.Answer {
	id, refusal := Identify(call, caller, ok, keys, firstSent, req, resolve)
	switch {
	case refusal.Outcome != 0:
		return refusal
	case resolve:
		return call.Resolve(ctx, id)
	}
	fp, err := fingerprint(req)
	if err != nil {
		return keyedcore.Answer{Outcome: keyed.RequestUnreadable, Err: err, Detail: "request cannot be fingerprinted"}
	}
	return call.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: fp}, work)
}

// Reply is how a protobuf transport answers a keyed call, in its own
// types: R is its response. Every field but Replaying must be set.
type Reply[R any] struct {
	// Types resolves the message type of a stored response.
	Types protoregistry.MessageTypeResolver
	// Replaying, when set, marks a replay of a stored answer with status
	// code c, before the answer is read.
	Replaying func(ctx context.Context, c uint32)
	// StoredError is the replay of a stored error with status code c: err
	// is the stored error as the core decoded it, or nil.
	StoredError func(c uint32, err error) error
	// Stored is the replay of a stored response m.
	Stored func(m proto.Message) R
	// Ended is the error of a call whose context ended with err.
	Ended func(err error) error
	// Refusal is the kit's own error for answer a, with the server's
	// pushback when a's outcome comes with one.
	Refusal func(ctx context.Context, a keyedcore.Answer) error
}

// Answer renders a keyed call's answer: resp (the handler's response, for
// an executed call) or the stored answer, or the error the transport's
// rendering gives its outcome. A stored response that cannot be decoded
// changes the answer's outcome to keyed.ResultUnreadable.
func (r Reply[R]) Answer(ctx context.Context, a *keyedcore.Answer, resp R) (R, error) {
	var none R
	switch a.Outcome {
	case keyed.Executed:
		if a.Err != nil {
			return none, a.Err // a recorded final error, as the handler returned it
		}
		return resp, nil
	case keyed.Replayed:
		if r.Replaying != nil {
			r.Replaying(ctx, a.Result.Code)
		}
		if a.Result.Code != 0 {
			return none, r.StoredError(a.Result.Code, a.Err)
		}
		m, err := DecodeResponse(a.Result, r.Types)
		if err != nil {
			*a = keyedcore.Answer{Outcome: keyed.ResultUnreadable, Err: err, Detail: strings.TrimPrefix(err.Error(), ErrUnreadable.Error()+": ")}
			break
		}
		return r.Stored(m), nil
	case keyed.NotStored:
		return none, a.Err
	case keyed.RequestEnded:
		if cerr := ctx.Err(); cerr != nil {
			return none, r.Ended(cerr)
		}
	}
	return none, r.Refusal(ctx, *a)
}
