package grpcint

import (
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Metadata keys the kit reads and writes. gRPC metadata keys are lower case.
const (
	// KeyHeader carries the caller's idempotency key on a keyed call. The
	// same key must be sent on every attempt of one logical call.
	KeyHeader = "idempotency-key"
	// ResolveHeader, set to "1" on a keyed call, asks the server for the
	// stored outcome of the key instead of running the handler.
	ResolveHeader = "idempotency-resolve"
	// ReplayedHeader is set to "true" in the response trailer when the
	// response is a stored outcome (a replay or a resolve), not a new
	// execution.
	ReplayedHeader = "idempotency-replayed"
)

// ErrorDomain is the ErrorInfo domain of every error detail the kit adds.
const ErrorDomain = "opledger.grpcint"

// Reason is the stable ErrorInfo reason of a status the kit returns. The
// string values do not change between releases; docs/grpc.md lists them
// with what a client should do.
type Reason string

// Reasons, each with the status code it comes with.
const (
	// ReasonMissingKey: a keyed method was called without an
	// idempotency-key header (INVALID_ARGUMENT). Fix the client.
	ReasonMissingKey Reason = "MISSING_IDEMPOTENCY_KEY"
	// ReasonInvalidKey: the key is empty, too long, not printable ASCII,
	// or sent more than once (INVALID_ARGUMENT). Fix the client.
	ReasonInvalidKey Reason = "INVALID_IDEMPOTENCY_KEY"
	// ReasonInvalidRequest: the request cannot be fingerprinted, or a
	// resolve names a method that is not keyed (INVALID_ARGUMENT).
	ReasonInvalidRequest Reason = "INVALID_KEYED_REQUEST"
	// ReasonNoCaller: no caller fingerprint could be established for a
	// keyed call (UNAUTHENTICATED). Authenticate the channel.
	ReasonNoCaller Reason = "CALLER_NOT_IDENTIFIED"
	// ReasonKeyReused: the key was used before, by the same caller on the
	// same method, with a different request (FAILED_PRECONDITION). Use a
	// new key for a new request; never retry with this one.
	ReasonKeyReused Reason = "IDEMPOTENCY_KEY_REUSED"
	// ReasonInProgress: another attempt with the same key is still running
	// (ABORTED, with grpc-retry-pushback-ms). Retry with the same key after
	// the pushback, or resolve.
	ReasonInProgress Reason = "OPERATION_IN_PROGRESS"
	// ReasonIncomplete: the key's entry was committed without a result, so
	// its outcome is unknown until the entry expires (FAILED_PRECONDITION).
	ReasonIncomplete Reason = "OPERATION_INCOMPLETE"
	// ReasonStorageUnavailable: the ledger's database failed (UNAVAILABLE).
	// Retry with the same key; a kit client resolves first, since a
	// driver may not report a connection lost during COMMIT as such.
	ReasonStorageUnavailable Reason = "STORAGE_UNAVAILABLE"
	// ReasonOutcomeUnknown: the commit was sent but its outcome is unknown
	// (UNAVAILABLE). Resolve with the same key before running it again.
	ReasonOutcomeUnknown Reason = "COMMIT_OUTCOME_UNKNOWN"
	// ReasonNotFound: a resolve found nothing committed for the key
	// (NOT_FOUND). Running the call again with the same key is safe.
	ReasonNotFound Reason = "OPERATION_NOT_FOUND"
	// ReasonResultUnreadable: a stored result cannot be decoded, e.g. its
	// message type is not linked into the server (INTERNAL).
	ReasonResultUnreadable Reason = "STORED_RESULT_UNREADABLE"
	// ReasonAttempts is added by the client interceptor to the final error
	// of a call it retried; its metadata holds "attempts" and "decision".
	ReasonAttempts Reason = "CLIENT_ATTEMPTS"
)

// newStatus builds a status with an ErrorInfo detail. meta may be nil.
func newStatus(c codes.Code, reason Reason, msg string, meta map[string]string) *status.Status {
	st := status.New(c, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: ErrorDomain, Metadata: meta}); err == nil {
		return d
	}
	return st
}

func statusErr(c codes.Code, reason Reason, msg string) error {
	return newStatus(c, reason, msg, nil).Err()
}

// ReasonOf returns the kit's ErrorInfo reason in err's status, or "" if
// err carries none. It looks at the last such detail, which is the one
// the server or the client interceptor added.
func ReasonOf(err error) Reason {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	var r Reason
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain && ei.GetReason() != string(ReasonAttempts) {
			r = Reason(ei.GetReason())
		}
	}
	return r
}

// Attempts returns how many attempts the client interceptor made for the
// call that returned err, or 0 if err does not say (the call was not made
// through the kit's retrying interceptor).
func Attempts(err error) int {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == ErrorDomain && ei.GetReason() == string(ReasonAttempts) {
			n, _ := strconv.Atoi(ei.GetMetadata()["attempts"])
			return n
		}
	}
	return 0
}

// withAttempts returns err with its code, message suffixed with the
// attempt count, its details, and an ErrorInfo saying how many attempts
// were made and why the last was not retried.
func withAttempts(err error, attempts int, why string) error {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	p := st.Proto()
	msg := p.GetMessage()
	suffix := " (after " + strconv.Itoa(attempts) + " attempt"
	if attempts != 1 {
		suffix += "s"
	}
	suffix += ": " + why + ")"
	if !strings.HasSuffix(msg, suffix) {
		p.Message = msg + suffix
	}
	out := status.FromProto(p)
	if d, derr := out.WithDetails(&errdetails.ErrorInfo{
		Reason: string(ReasonAttempts), Domain: ErrorDomain,
		Metadata: map[string]string{"attempts": strconv.Itoa(attempts), "decision": why},
	}); derr == nil {
		out = d
	}
	return out.Err()
}

// ErrInvalidConfig is returned (wrapped) by constructors given a
// configuration that cannot work: a keyed method without a ledger, a keyed
// streaming method, a retry entry on a channel the service config does not
// own, a missing caller function.
var ErrInvalidConfig = errors.New("grpcint: invalid configuration")
