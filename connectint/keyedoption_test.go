package connectint_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/policy"
	opledgerv1 "github.com/opledger/opledger/proto/opledger/v1"
)

// keyedMethod is a method of the test service of keyedSpecs: its options,
// its streaming and its request ("Req", or "RidReq" with AIP-155's
// request_id).
type keyedMethod struct {
	name, input string
	opts        *descriptorpb.MethodOptions
	stream      bool
}

// keyedSpecs builds the connect Specs of a service
// opledger.test.connect.v1.S with methods.
func keyedSpecs(t *testing.T, methods ...keyedMethod) []connect.Spec {
	t.Helper()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name: proto.String("keyedspecs.proto"), Package: proto.String("opledger.test.connect.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("item"), Number: proto.Int32(1), Type: str, Label: opt}}},
			{Name: proto.String("RidReq"), Field: []*descriptorpb.FieldDescriptorProto{{Name: proto.String("request_id"), Number: proto.Int32(1), Type: str, Label: opt}}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("S")}},
	}
	for _, m := range methods {
		in := ".opledger.test.connect.v1." + m.input
		fdp.Service[0].Method = append(fdp.Service[0].Method, &descriptorpb.MethodDescriptorProto{Name: proto.String(m.name),
			InputType: proto.String(in), OutputType: proto.String(in), Options: m.opts, ServerStreaming: proto.Bool(m.stream)})
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return connectint.ServiceSpecs(fd.Services().Get(0))
}

// withKeyed returns method options carrying k as the linked extension.
func withKeyed(k *opledgerv1.Keyed, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodOptions {
	o := &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()}
	proto.SetExtension(o, opledgerv1.E_Keyed, k)
	return o
}

// TestCatalogFromSpecsKeyedOption: a procedure whose Schema carries
// (opledger.v1.keyed), as the linked extension or as the unknown fields
// of a descriptor read without it, is keyed with a durable ledger and the
// option's retention and birth policy; the option on a streaming or
// read-only procedure, or with a key_field the request does not have, is
// an error naming the procedure.
func TestCatalogFromSpecsKeyedOption(t *testing.T) {
	t.Parallel()
	unknown := protowire.AppendBytes(protowire.AppendTag(nil, 51155, protowire.BytesType), nil)
	raw := &descriptorpb.MethodOptions{}
	raw.ProtoReflect().SetUnknown(unknown)
	specs := keyedSpecs(t,
		keyedMethod{name: "Place", input: "Req", opts: withKeyed(&opledgerv1.Keyed{}, descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN)},
		keyedMethod{name: "PlaceByID", input: "RidReq", opts: withKeyed(&opledgerv1.Keyed{KeyField: "request_id",
			Retention: durationpb.New(time.Minute), RefuseUnknownBirth: true}, descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN)},
		keyedMethod{name: "Raw", input: "Req", opts: raw},
		keyedMethod{name: "Cancel", input: "Req"},
	)
	c, err := connectint.CatalogFromSpecs(specs...)
	if err != nil {
		t.Fatal(err)
	}
	const svc = "/opledger.test.connect.v1.S/"
	for m, want := range map[string]policy.MethodPolicy{
		"Place":     {Kind: policy.KindKeyed, DurableLedger: true},
		"PlaceByID": {Kind: policy.KindKeyed, DurableLedger: true, Retention: time.Minute, UnknownBirth: policy.RefuseUnknownBirth},
		"Raw":       {Kind: policy.KindKeyed, DurableLedger: true},
		"Cancel":    {Kind: policy.KindNonIdempotent},
	} {
		want.FullMethod, want.Shape = svc+m, policy.ShapeUnary
		if got, ok := c.Lookup(want.FullMethod); !ok || got != want {
			t.Errorf("%s: %+v (found %v), want %+v", m, got, ok, want)
		}
	}

	for name, tc := range map[string]struct {
		m    keyedMethod
		edit func(*connect.Spec)
		want string
	}{
		"stream": {keyedMethod{name: "M", input: "Req", stream: true, opts: withKeyed(&opledgerv1.Keyed{}, 0)}, nil, "streaming"},
		"served as a stream": {keyedMethod{name: "M", input: "Req", opts: withKeyed(&opledgerv1.Keyed{}, 0)},
			func(s *connect.Spec) { s.StreamType = connect.StreamTypeServer }, "stream"},
		"read-only": {keyedMethod{name: "M", input: "Req", opts: withKeyed(&opledgerv1.Keyed{}, descriptorpb.MethodOptions_NO_SIDE_EFFECTS)}, nil, "read-only"},
		"read-only spec": {keyedMethod{name: "M", input: "Req", opts: withKeyed(&opledgerv1.Keyed{}, 0)},
			func(s *connect.Spec) { s.IdempotencyLevel = connect.IdempotencyNoSideEffects }, "read-only"},
		"other key field":    {keyedMethod{name: "M", input: "Req", opts: withKeyed(&opledgerv1.Keyed{KeyField: "item"}, 0)}, nil, `key_field "item"`},
		"request_id unnamed": {keyedMethod{name: "M", input: "RidReq", opts: withKeyed(&opledgerv1.Keyed{}, 0)}, nil, "request_id"},
	} {
		s := keyedSpecs(t, tc.m)
		if tc.edit != nil {
			tc.edit(&s[0])
		}
		_, err := connectint.CatalogFromSpecs(s...)
		if !errors.Is(err, policy.ErrInvalidConfig) || !strings.Contains(err.Error(), svc+"M") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want policy.ErrInvalidConfig naming %sM and saying %q", name, err, svc, tc.want)
		}
	}
}
