package connectint

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/opledger/opledger/internal/keybirth"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
)

// Headers the kit reads and writes, on every protocol (Connect, gRPC and
// gRPC-Web carry them alike: gRPC metadata keys are HTTP headers). They
// are grpcint's metadata keys, so that grpc-go clients and servers of the
// kit read them too.
const (
	// KeyHeader carries the caller's idempotency key on a keyed call. The
	// same key must be sent on every attempt of one logical call.
	KeyHeader = "Idempotency-Key"
	// ResolveHeader, set to "1" (or "true", in any case) on a unary keyed
	// call, asks the server for the stored outcome of the key instead of
	// running the handler. Any other value is refused (invalid_argument,
	// INVALID_KEYED_REQUEST) without running anything; on a stream the
	// header is ignored.
	ResolveHeader = "Idempotency-Resolve"
	// ReplayedHeader is set to "true" in the response trailer (for the
	// Connect protocol's unary calls: the Trailer- headers, or the error's
	// metadata) when the answer is a stored outcome, not a new execution.
	ReplayedHeader = "Idempotency-Replayed"
	// ReplayedCodeHeader comes with ReplayedHeader and holds the code of
	// the replayed outcome in decimal ("0" for a stored response).
	ReplayedCodeHeader = "Idempotency-Replayed-Code"
)

// The window's headers (keybirth.FirstSentHeader and
// keyedcore.LifetimeHeader); docs/connect.md describes them.
const (
	// firstSentHeader carries, beside a key with no birth of its own (not
	// a UUIDv7), the time its call was first sent: an IMF-fixdate. It is
	// part of the identity: every attempt and resolve must send the same.
	firstSentHeader = keybirth.FirstSentHeader
	// lifetimeHeader, in the trailer (an error's metadata) of an answer
	// that reached the ledger, is how long a key of the procedure is
	// honoured from its birth, in whole seconds.
	lifetimeHeader = keyedcore.LifetimeHeader
)

// ErrorDomain is the ErrorInfo domain of every error detail the kit adds.
// It is grpcint's, on purpose: a connect server of the kit and a gRPC one
// answer the same errors, so that the kit's clients of either transport
// read both.
const ErrorDomain = "opledger.grpcint"

// ErrInvalidConfig is returned (wrapped) by constructors given a
// configuration that cannot work: a nil argument, a keyed streaming
// procedure, a retry owner connect-go cannot have, a bad option.
var ErrInvalidConfig = errors.New("connectint: invalid configuration")

// newError builds a connect error with the kit's ErrorInfo detail.
func newError(c connect.Code, reason, msg string, meta map[string]string) *connect.Error {
	e := connect.NewError(c, errors.New(msg))
	if reason != "" {
		if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); err == nil {
			e.AddDetail(d)
		}
	}
	return e
}

// outcomeError is the server's error for outcome o: the code and the
// reason its rendering gives it.
func outcomeError(o keyed.Outcome, msg string) *connect.Error {
	rc, _, own, _ := dialect.Rendering(o)
	c := connect.Code(rc)
	if own != "" {
		c = connect.CodeInternal // an outcome the server never answers itself
	}
	return newError(c, o.Row().Reason, msg, nil)
}

// NotExecuted returns an error with code c, message msg and the reason
// REQUEST_NOT_EXECUTED, for an interceptor that runs before the kit's
// server interceptor and refuses a keyed call without running it (load
// shedding, maintenance, rate limits). The kit's client then knows that
// nothing was committed and needs no resolve. Never return it after the
// handler ran.
func NotExecuted(c connect.Code, msg string) *connect.Error {
	return newError(c, keyed.NotExecuted.Row().Reason, msg, nil)
}

// kitInfos returns the kit's ErrorInfo details in err, in order.
func kitInfos(err error) []*errdetails.ErrorInfo {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var details []any
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			details = append(details, v)
		}
	}
	return retry.KitInfos(details, ErrorDomain)
}

// ReasonOf returns the kit's ErrorInfo reason in err (a *connect.Error,
// possibly wrapped), or "" if it carries none. For an error the client
// interceptor returned it is the client's reading of the call (see
// keyed.CallInfo); for an error the server returned, the server's reason.
func ReasonOf(err error) string {
	return retry.LastReason(kitInfos(err))
}

// CallInfoOf returns what the client interceptor recorded in err, and
// false when err did not come from it.
func CallInfoOf(err error) (keyed.CallInfo, bool) { return retry.CallInfoOf(kitInfos(err)) }

// withCallInfo returns err (its code, details and metadata, its message
// followed by the attempt count and the decision) with the client's
// ErrorInfo appended.
func withCallInfo(err error, ci retry.Info) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = connect.NewError(connect.CodeOf(err), err)
	}
	msg := ce.Message()
	if suffix := ci.Suffix(); !strings.HasSuffix(msg, suffix) {
		msg += suffix
	}
	out := connect.NewError(ce.Code(), errors.New(msg))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	for k, v := range ce.Meta() {
		out.Meta()[k] = append([]string(nil), v...)
	}
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: ci.Outcome.Row().Reason, Domain: ErrorDomain, Metadata: ci.Metadata()}); derr == nil {
		out.AddDetail(d)
	}
	return out
}

// dialect is connect's rendering of the core's outcomes: its notes, and
// whose answer some outcomes end with in connect-go's terms. connect's
// codes are gRPC's, with the same numbers: the rendering is
// internal/keyedcore/keyedproto's.
var dialect = keyedproto.Dialect{Name: "connect",
	Notes: map[keyed.Outcome]string{
		keyed.KeyMissing:  "the Idempotency-Key header",
		keyed.KeyedStream: "a keyed procedure served by a streaming handler",
		keyed.NotExecuted: "connectint.NotExecuted, from an interceptor in front of the kit's",
	},
	Own: map[keyed.Outcome]string{
		keyed.RequestTooLarge: "connect-go's RESOURCE_EXHAUSTED (connect.WithReadMaxBytes), before the interceptor",
		keyed.HandlerPanic:    "none: the panic goes on to connect-go (connect.WithRecover recovers it)",
		keyed.Replayed:        "the stored answer's, with Idempotency-Replayed and its code in the trailer",
	},
	CodeName: func(c code.Code) string { return codeName(connect.Code(c)) },
}

// codeName is the code's name as the gRPC spec writes it: NOT_FOUND.
func codeName(c connect.Code) string {
	return strings.ToUpper(c.String())
}

// tableCells renders an outcome as docs/connect.md's table prints it.
func tableCells(r keyed.Row) []string { return dialect.TableCells(r) }

// replayMarker sets the replay marker of a stored answer with code c.
func replayMarker(h http.Header, c uint32) {
	h.Set(ReplayedHeader, "true")
	h.Set(ReplayedCodeHeader, strconv.FormatUint(uint64(c), 10))
}

// isReplayed reports whether h carries the replay marker.
func isReplayed(h http.Header) bool { return h.Get(ReplayedHeader) == "true" }

// replayedError reports whether err is the server's replay of a stored
// error: the marker in its metadata, with err's code.
func replayedError(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || !isReplayed(ce.Meta()) {
		return false
	}
	if v := ce.Meta().Get(ReplayedCodeHeader); v != "" {
		return v == strconv.FormatUint(uint64(ce.Code()), 10)
	}
	return !retry.MayHaveRun(grpcCode(ce.Code()))
}

// contextCode is connect's code of a context's error.
func contextCode(err error) connect.Code {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeCanceled
}
