package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// keyedSetFile is a descriptor set whose methods carry the
// (opledger.v1.keyed) option (testdata/keyed.proto says how it is built).
const keyedSetFile = "testdata/keyed.binpb"

// keyedOrders is the full method prefix of keyed.proto's service.
const keyedOrders = "/opledger.test.keyed.v1.Orders/"

// TestCatalogKeyedOption: a catalog read from a descriptor set file whose
// methods carry (opledger.v1.keyed) marks them keyed with a durable
// ledger, the option's retention and birth policy included, while this
// test binary does not link the Go package of the option (so that the
// option is read from unknown fields).
func TestCatalogKeyedOption(t *testing.T) {
	t.Parallel()
	if _, err := protoregistry.GlobalTypes.FindExtensionByNumber("google.protobuf.MethodOptions", 51155); !errors.Is(err, protoregistry.NotFound) {
		t.Fatalf("policy's tests link the (opledger.v1.keyed) extension (%v): this test reads it unlinked", err)
	}
	c, err := LoadDescriptorSetFile(keyedSetFile)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]MethodPolicy{
		"Place":     {Kind: KindKeyed, DurableLedger: true},
		"PlaceByID": {Kind: KindKeyed, DurableLedger: true, Retention: time.Hour, UnknownBirth: RefuseUnknownBirth},
		"Adjust":    {Kind: KindKeyed, DurableLedger: true},
		"Get":       {Kind: KindNoSideEffects},
		"Cancel":    {Kind: KindNonIdempotent},
	}
	if n := len(c.Methods()); n != len(want) {
		t.Errorf("catalog has %d methods, want %d", n, len(want))
	}
	for m, p := range want {
		p.FullMethod, p.Shape = keyedOrders+m, ShapeUnary
		if got, ok := c.Lookup(p.FullMethod); !ok || got != p {
			t.Errorf("%s: %+v (found %v), want %+v", m, got, ok, p)
		}
	}
}

// keyedOption encodes a (opledger.v1.keyed) option with fields, the
// encoding of an opledger.v1.Keyed, as protoc writes it into a method's
// options.
func keyedOption(fields []byte) []byte {
	b := protowire.AppendTag(nil, 51155, protowire.BytesType)
	return protowire.AppendBytes(b, fields)
}

// keyField encodes Keyed's key_field.
func keyField(name string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), name)
}

// TestCatalogKeyedOptionMisuse: the option on a streaming or read-only
// method, with a key_field the request does not have as AIP-155's
// request_id, without one where the request has it, or malformed, is an
// error (ErrInvalidConfig) that names the method.
func TestCatalogKeyedOptionMisuse(t *testing.T) {
	t.Parallel()
	negative := protowire.AppendTag(nil, 2, protowire.BytesType)
	negative = protowire.AppendBytes(negative, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), protowire.EncodeZigZag(0)-1))
	cases := []struct {
		name, method, want string
		edit               func(*descriptorpb.MethodDescriptorProto)
	}{
		{"read-only", "Get", "read-only", func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(keyedOption(nil))
		}},
		{"server stream", "Place", "streaming", func(m *descriptorpb.MethodDescriptorProto) { m.ServerStreaming = proto.Bool(true) }},
		{"client stream", "Place", "streaming", func(m *descriptorpb.MethodDescriptorProto) { m.ClientStreaming = proto.Bool(true) }},
		{"other key field", "Place", `key_field "item"`, func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(keyedOption(keyField("item")))
		}},
		{"no request_id", "Place", "has no top-level singular string field request_id", func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(keyedOption(keyField("request_id")))
		}},
		{"request_id not named", "PlaceByID", `key_field: "request_id"`, func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(keyedOption(nil))
		}},
		{"not a message", "Place", "wire type", func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 51155, protowire.VarintType), 1))
		}},
		{"negative retention", "Place", "negative", func(m *descriptorpb.MethodDescriptorProto) {
			m.Options.ProtoReflect().SetUnknown(keyedOption(negative))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := readKeyedSet(t)
			for _, m := range set.File[0].Service[0].Method {
				if m.GetName() == tc.method {
					if m.Options == nil {
						m.Options = &descriptorpb.MethodOptions{}
					}
					tc.edit(m)
				}
			}
			_, err := CatalogFromDescriptorSet(set)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), keyedOrders+tc.method) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v: want ErrInvalidConfig naming %s and saying %q", err, keyedOrders+tc.method, tc.want)
			}
		})
	}
}

// readKeyedSet reads keyedSetFile into a descriptor set.
func readKeyedSet(t *testing.T) *descriptorpb.FileDescriptorSet {
	t.Helper()
	b, err := os.ReadFile(keyedSetFile)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	return &set
}
