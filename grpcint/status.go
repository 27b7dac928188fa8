package grpcint

import (
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/retry"
	"github.com/opledger/opledger/keyed"
)

// Metadata keys the kit reads and writes. gRPC metadata keys are lower case.
const (
	// KeyHeader carries the caller's idempotency key on a keyed call. The
	// same key must be sent on every attempt of one logical call.
	KeyHeader = "idempotency-key"
	// ResolveHeader, set to "1" (or "true", in any case) on a unary keyed
	// call, asks the server for the stored outcome of the key instead of
	// running the handler. Any other value is refused (INVALID_ARGUMENT,
	// INVALID_KEYED_REQUEST) without running anything; on a stream the
	// header is ignored.
	ResolveHeader = "idempotency-resolve"
	// ReplayedHeader is set to "true" in the response trailer when the
	// response is a stored outcome (a replay or a resolve), not a new
	// execution.
	ReplayedHeader = "idempotency-replayed"
	// ReplayedCodeHeader comes with ReplayedHeader and holds the status
	// code of the replayed outcome in decimal ("0" for a stored response),
	// so that a client can tell a replayed error from a replayed response
	// whose answer was lost below it.
	ReplayedCodeHeader = "idempotency-replayed-code"
)

// The window's metadata keys (keybirth.FirstSentHeader and
// keyedcore.LifetimeHeader, in gRPC's lower case); docs/grpc.md describes
// them.
const (
	// firstSentHeader carries, beside a key with no birth of its own (not
	// a UUIDv7), the time its call was first sent: an IMF-fixdate. It is
	// part of the identity: every attempt and resolve must send the same.
	firstSentHeader = "idempotency-key-first-sent"
	// lifetimeHeader, in the trailer of an answer that reached the
	// ledger, is how long a key of the method is honoured from its birth,
	// in whole seconds.
	lifetimeHeader = "idempotency-key-lifetime"
)

// ErrorDomain is the ErrorInfo domain of every error detail the kit adds.
const ErrorDomain = "opledger.grpcint"

// NotExecuted returns an error with code c, message msg and reason
// REQUEST_NOT_EXECUTED (keyed.NotExecuted), for an interceptor that runs before the kit's server
// interceptor and refuses a keyed call without running it (load shedding,
// maintenance, rate limits). The kit's client then knows that nothing was
// committed and needs no resolve. Never return it after the handler ran.
func NotExecuted(c codes.Code, msg string) error {
	return newStatus(c, keyed.NotExecuted.Row().Reason, msg, nil).Err()
}

// newStatus builds a status with an ErrorInfo detail. meta may be nil.
func newStatus(c codes.Code, reason string, msg string, meta map[string]string) *status.Status {
	st := status.New(c, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); err == nil {
		return d
	}
	return st
}

// statusErr builds the server's error for outcome o: the code and the
// reason its rendering gives it.
func statusErr(o keyed.Outcome, msg string) error {
	c := codeOf(o)
	if c == codes.Unknown {
		c = codes.Internal // an outcome the server never answers itself
	}
	return newStatus(c, o.Row().Reason, msg, nil).Err()
}

// kitInfos returns the kit's ErrorInfo details in err's status, in order.
func kitInfos(err error) []*errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	return retry.KitInfos(st.Details(), ErrorDomain)
}

// ReasonOf returns the kit's ErrorInfo reason in err's status, or "" if
// err carries none. For an error the client interceptor returned it is the
// client's reading of the call (see keyed.CallInfo); for a status the server
// returned, the server's reason. The reasons are those of keyed's
// outcomes (keyed.OfReason reads one back), stable between releases;
// docs/grpc.md lists each with its status code.
func ReasonOf(err error) string {
	return retry.LastReason(kitInfos(err))
}

// CallInfoOf returns what the client interceptor recorded in err, and
// false when err did not come from it.
func CallInfoOf(err error) (keyed.CallInfo, bool) { return retry.CallInfoOf(kitInfos(err)) }

// withCallInfo returns err (its code and details, its message followed by
// the attempt count and the decision) with the client's ErrorInfo
// appended.
func withCallInfo(err error, ci retry.Info) error {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	p := st.Proto()
	if suffix := ci.Suffix(); !strings.HasSuffix(p.GetMessage(), suffix) {
		p.Message = p.GetMessage() + suffix
	}
	st = status.FromProto(p)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: ci.Outcome.Row().Reason, Domain: ErrorDomain, Metadata: ci.Metadata()}); derr == nil {
		st = d
	}
	return st.Err()
}

// ErrInvalidConfig is returned (wrapped) by constructors given a
// configuration that cannot work: a keyed method without a ledger, a keyed
// streaming method, a retry entry on a channel the service config does not
// own, a missing caller function.
var ErrInvalidConfig = errors.New("grpcint: invalid configuration")
