package grpcint

import (
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// StatusTypeName is the ledger.Result.TypeName of a recorded final error:
// its Response is a deterministically marshalled google.rpc.Status.
const StatusTypeName = keyedproto.StatusTypeName

// DefaultFinalCodes returns the codes the server treats as final by
// default: answers that running the request again would give again
// (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, NOT_FOUND,
// ALREADY_EXISTS, PERMISSION_DENIED).
func DefaultFinalCodes() []codes.Code {
	return []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange,
		codes.NotFound, codes.AlreadyExists, codes.PermissionDenied}
}

// StatusCodec returns the txmiddleware.ErrorCodec for gRPC handlers: an
// error that carries a gRPC status (read with status.FromError, so wrapped
// errors count) with one of the final codes is recorded as a
// google.rpc.Status ([StatusTypeName]) and replayed with the same code,
// message and details. With no codes nothing is final, but stored statuses
// still decode. The server uses StatusCodec(DefaultFinalCodes()...) unless
// told otherwise (see keyed.WithErrorCodec).
func StatusCodec(final ...codes.Code) txmiddleware.ErrorCodec {
	return statusCodec{final: slices.DeleteFunc(slices.Clone(final), func(c codes.Code) bool { return c == codes.OK })}
}

type statusCodec struct{ final []codes.Code }

// Encode records an error with a final status code.
func (c statusCodec) Encode(err error) (ledger.Result, bool) {
	st, ok := grpcstatus.FromError(err)
	if err == nil || !ok || !slices.Contains(c.final, st.Code()) {
		return ledger.Result{}, false
	}
	return keyedproto.EncodeStatus(st.Proto())
}

// Decode rebuilds a recorded status; a non-zero code stored without one
// becomes a status with that code and no message.
func (statusCodec) Decode(r ledger.Result) error {
	if r.Code == 0 {
		return nil
	}
	p, err := keyedproto.DecodeStatus(r)
	if err != nil {
		return fmt.Errorf("grpcint: %w", err)
	}
	return grpcstatus.FromProto(p).Err()
}
