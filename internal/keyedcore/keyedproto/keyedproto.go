// Package keyedproto holds the protobuf forms of a keyed call that every
// protobuf transport shares: the request fingerprint, the stored response,
// the stored final error (a google.rpc.Status), and the key a request
// carries in its AIP-155 request_id field (RequestID, WithRequestID,
// Identify). grpcint uses them, and
// so must any other transport of protobuf messages (connect-go's): a
// method called through one transport and retried through another is one
// identity with one fingerprint, and replays the same stored answer.
//
// It imports protobuf, never gRPC.
package keyedproto

import (
	"errors"
	"fmt"
	"strconv"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/ledger"
)

// StatusTypeName is the ledger.Result.TypeName of a recorded final error:
// its Response is a deterministically marshalled google.rpc.Status, its
// Code the status code.
const StatusTypeName = "google.rpc.Status"

// Fingerprint returns the SHA-256 of the deterministic protobuf encoding
// of req: the value the ledger stores to tell a retry of the same request
// from a key reused for another one. Deterministic marshalling is stable
// for one build of the message type; a change to the message's schema
// between a call and its retry can change it (the retry is then refused
// as a reused key, never answered with a wrong replay).
func Fingerprint(req any) (ledger.Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return ledger.Fingerprint{}, fmt.Errorf("request of type %T is not a protobuf message", req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ledger.Fingerprint{}, fmt.Errorf("marshal request: %w", err)
	}
	return ledger.FingerprintOf(b), nil
}

// ErrNotMessage is returned (wrapped) by EncodeResponse for a response
// that is not a protobuf message.
var ErrNotMessage = errors.New("keyedproto: response is not a protobuf message")

// EncodeResponse is the stored form of a handler's response: its
// deterministic encoding, with its message's full name as the TypeName.
func EncodeResponse(resp any) (ledger.Result, error) {
	m, ok := resp.(proto.Message)
	if !ok || m == nil {
		return ledger.Result{}, fmt.Errorf("%w: %T", ErrNotMessage, resp)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ledger.Result{}, fmt.Errorf("keyedproto: encode response: %w", err)
	}
	return ledger.Result{Response: b, TypeName: string(m.ProtoReflect().Descriptor().FullName())}, nil
}

// ErrUnreadable is returned (wrapped) by DecodeResponse and DecodeStatus
// for a stored result they cannot read.
var ErrUnreadable = errors.New("keyedproto: stored result unreadable")

// DecodeResponse rebuilds a stored response message, finding its type by
// full name in types (protoregistry.GlobalTypes when nil).
func DecodeResponse(r ledger.Result, types protoregistry.MessageTypeResolver) (proto.Message, error) {
	if types == nil {
		types = protoregistry.GlobalTypes
	}
	mt, err := types.FindMessageByName(protoreflect.FullName(r.TypeName))
	if err != nil {
		return nil, fmt.Errorf("%w: stored response type %s is not known to this server", ErrUnreadable, strconv.Quote(r.TypeName))
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Response, m); err != nil {
		return nil, fmt.Errorf("%w: stored response does not decode as %s", ErrUnreadable, r.TypeName)
	}
	return m, nil
}

// EncodeStatus is the stored form of a final error with status p (a
// non-zero code): its deterministic encoding, [StatusTypeName].
func EncodeStatus(p *statuspb.Status) (ledger.Result, bool) {
	if p == nil || p.GetCode() == 0 {
		return ledger.Result{}, false
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return ledger.Result{}, false
	}
	return ledger.Result{Code: uint32(p.GetCode()), Response: b, TypeName: StatusTypeName}, true
}

// DecodeStatus rebuilds a stored final error's status. A non-zero code
// stored with another type becomes a status with that code and no
// message.
func DecodeStatus(r ledger.Result) (*statuspb.Status, error) {
	if r.TypeName != StatusTypeName {
		return &statuspb.Status{Code: int32(r.Code)}, nil
	}
	p := &statuspb.Status{}
	if err := proto.Unmarshal(r.Response, p); err != nil {
		return nil, fmt.Errorf("%w: stored final error (code %d) does not decode: %w", ErrUnreadable, r.Code, err)
	}
	if p.GetCode() == 0 {
		return nil, fmt.Errorf("%w: stored final error has status code OK", ErrUnreadable)
	}
	return p, nil
}
