package connectint

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultFinalCodes returns the codes the server treats as final by
// default, grpcint's: answers that running the request again would give
// again (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, NOT_FOUND,
// ALREADY_EXISTS, PERMISSION_DENIED).
func DefaultFinalCodes() []connect.Code {
	return []connect.Code{connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange,
		connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodePermissionDenied}
}

// ErrorCodec returns the txmiddleware.ErrorCodec for connect handlers: a
// *connect.Error (errors.As, so wrapped errors count) with one of the final
// codes is recorded as a google.rpc.Status (keyedproto.StatusTypeName,
// the form grpcint records too) and replayed with the same code, message
// and details. With no codes nothing is final, but stored statuses still
// decode. The server uses ErrorCodec(DefaultFinalCodes()...) unless told
// otherwise (see keyed.WithErrorCodec).
func ErrorCodec(final ...connect.Code) txmiddleware.ErrorCodec {
	return errorCodec{final: slices.DeleteFunc(slices.Clone(final), func(c connect.Code) bool { return c == 0 })}
}

type errorCodec struct{ final []connect.Code }

// Encode records an error with a final code.
func (c errorCodec) Encode(err error) (ledger.Result, bool) {
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) || !slices.Contains(c.final, ce.Code()) {
		return ledger.Result{}, false
	}
	p := &statuspb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return keyedproto.EncodeStatus(p)
}

// Decode rebuilds a recorded error; a non-zero code stored without a
// status becomes an error with that code and no message.
func (errorCodec) Decode(r ledger.Result) error {
	if r.Code == 0 {
		return nil
	}
	p, err := keyedproto.DecodeStatus(r)
	if err != nil {
		return fmt.Errorf("connectint: %w", err)
	}
	return statusError(p)
}

// statusError is the connect error of a google.rpc.Status.
func statusError(p *statuspb.Status) *connect.Error {
	ce := connect.NewError(connect.Code(p.GetCode()), errors.New(p.GetMessage()))
	for _, a := range p.GetDetails() {
		if !strings.Contains(a.GetTypeUrl(), "/") {
			continue
		}
		if d, err := connect.NewErrorDetail(a); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// grpcCode is the gRPC code with c's number (connect's codes are gRPC's).
func grpcCode(c connect.Code) codes.Code { return codes.Code(c) }
