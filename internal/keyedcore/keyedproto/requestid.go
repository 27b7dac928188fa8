package keyedproto

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/requestid"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// RequestIDField is the name of the request identifier field of Google's
// AIP-155 (https://google.aip.dev/155). A request message has one when it
// has a top-level field of that name of type string, singular and not in
// a oneof (a proto3 optional field counts); a field of that name of
// another form is not the key.
const RequestIDField = string(requestid.Name)

// RequestID returns the value of req's request_id field (see
// [RequestIDField]) and whether req's message has one; "" and false for a
// request that is not a protobuf message.
func RequestID(req any) (id string, has bool) {
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return "", false
	}
	r := m.ProtoReflect()
	fd := requestid.Field(r.Descriptor())
	if fd == nil {
		return "", false
	}
	return r.Get(fd).String(), true
}

// WithRequestID returns req with its request_id set to key when its
// message has the field (see [RequestIDField]) and the field is empty: a
// copy of req (proto.Clone) with the field set, so that the caller's
// message never changes. Otherwise (no such field, a request_id already
// set, an empty key, a nil message, not a protobuf message) it returns req
// itself.
func WithRequestID(req any, key string) any {
	id, has := RequestID(req)
	if !has || id != "" || key == "" {
		return req
	}
	if !req.(proto.Message).ProtoReflect().IsValid() {
		return req // a nil message: nothing to copy
	}
	m := proto.Clone(req.(proto.Message))
	r := m.ProtoReflect()
	r.Set(requestid.Field(r.Descriptor()), protoreflect.ValueOfString(key))
	return m
}

// Identify is call.Identify for a keyed call whose request is the protobuf
// message req, with the values of its key header in keys: a request whose
// message has a request_id field (see [RequestIDField]) carries its key
// there too (AIP-155).
//
//   - No key header: a non-empty request_id is the key; an empty one is
//     keyed.KeyMissing.
//   - One key header and a non-empty request_id: they must be the same key;
//     two different ones are keyed.KeyInvalid (INVALID_ARGUMENT), whichever
//     the server took the other's guarantee would break (the same
//     request_id with two header keys would run twice).
//   - A resolve request (resolve) with a key header: the header is the key,
//     whatever the request carries, since a resolve's request is not
//     compared.
//
// Everything else (the caller, more than one key header, the key's form,
// the first-sent values firstSent) is call.Identify's.
func Identify(call *keyedcore.Call, caller string, ok bool, keys, firstSent []string, req any, resolve bool) (ledger.Identity, keyedcore.Answer) {
	id, has := RequestID(req)
	switch {
	case !has || !ok || caller == "" || len(keys) > 1 || (resolve && len(keys) > 0):
	case len(keys) == 0 && id == "":
		return ledger.Identity{}, keyedcore.Answer{Outcome: keyed.KeyMissing,
			Detail: "a keyed call needs an idempotency key: in the key header or in the request's " + RequestIDField}
	case len(keys) == 0:
		keys = []string{id}
	case id != "" && keys[0] != id:
		return ledger.Identity{}, keyedcore.Answer{Outcome: keyed.KeyInvalid,
			Detail: "the key header and the request's " + RequestIDField + " differ; send one key, or the same key in both"}
	}
	return call.Identify(caller, ok, keys, firstSent, nil)
}
