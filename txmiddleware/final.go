package txmiddleware

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/ledger"
)

// StatusTypeName is the ledger.Result.TypeName of a recorded final error:
// its Response is a deterministically marshalled google.rpc.Status.
const StatusTypeName = "google.rpc.Status"

// FinalRule decides whether an error returned by the work is final: a
// definite answer to the request that is recorded, committed and replayed
// to every retry, rather than rolled back. It returns the status to record
// and true for a final error. It must be safe for concurrent use.
type FinalRule func(err error) (*status.Status, bool)

// DefaultFinal treats as final an error carrying a gRPC status (read with
// status.FromError, so wrapped errors count) with one of the codes
// InvalidArgument, FailedPrecondition, OutOfRange, NotFound, AlreadyExists
// and PermissionDenied: answers that running the request again would give
// again.
func DefaultFinal(err error) (*status.Status, bool) {
	return finalCodes(err, func(c codes.Code) bool {
		switch c {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange,
			codes.NotFound, codes.AlreadyExists, codes.PermissionDenied:
			return true
		}
		return false
	})
}

// FinalCodes returns a rule that treats as final an error carrying a gRPC
// status with one of the given codes. codes.OK is ignored.
func FinalCodes(cs ...codes.Code) FinalRule {
	set := append([]codes.Code(nil), cs...)
	return func(err error) (*status.Status, bool) {
		return finalCodes(err, func(c codes.Code) bool { return slices.Contains(set, c) })
	}
}

func finalCodes(err error, final func(codes.Code) bool) (*status.Status, bool) {
	if err == nil {
		return nil, false
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK || !final(st.Code()) {
		return nil, false
	}
	return st, true
}

// encodeStatus is the recorded form of a final error.
func encodeStatus(st *status.Status) (ledger.Result, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
	if err != nil {
		return ledger.Result{}, fmt.Errorf("txmiddleware: encode final error: %w", err)
	}
	return ledger.Result{Code: uint32(st.Code()), Response: b, TypeName: StatusTypeName}, nil
}

// ReplayError returns the error a stored result stands for: nil for code
// 0; for a recorded final error (TypeName StatusTypeName), the status
// rebuilt from its bytes, with the same code, message and details; for any
// other non-zero code, a status with that code and no message. Run applies
// it to every replay.
func ReplayError(r ledger.Result) error {
	if r.Code == 0 {
		return nil
	}
	if r.TypeName != StatusTypeName {
		return status.Error(codes.Code(r.Code), "")
	}
	// A fresh google.rpc.Status message to decode into, without importing
	// genproto's package here.
	p := status.New(codes.Unknown, "").Proto()
	if err := proto.Unmarshal(r.Response, p); err != nil {
		return fmt.Errorf("txmiddleware: stored final error (code %d) does not decode: %w", r.Code, err)
	}
	if p.GetCode() == 0 {
		return errors.New("txmiddleware: stored final error has status code OK")
	}
	return status.FromProto(p).Err()
}
