package policy

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testDescriptorSet returns a descriptor set with two services, as protoc
// --descriptor_set_out --include_imports would write it for:
//
//	package shop.v1;
//	import "google/protobuf/empty.proto";
//	service Orders {
//	  rpc Get(Empty) returns (Empty) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Put(Empty) returns (Empty) { option idempotency_level = IDEMPOTENT; }
//	  rpc Create(Empty) returns (Empty);
//	  rpc Cancel(Empty) returns (Empty) { option idempotency_level = IDEMPOTENCY_UNKNOWN; }
//	  rpc Watch(Empty) returns (stream Empty) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc Upload(stream Empty) returns (Empty);
//	  rpc Chat(stream Empty) returns (stream Empty);
//	}
//	service Catalog { rpc List(Empty) returns (Empty) { option idempotency_level = NO_SIDE_EFFECTS; } }
func testDescriptorSet() *descriptorpb.FileDescriptorSet {
	empty := ".google.protobuf.Empty"
	level := func(l descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodOptions {
		return &descriptorpb.MethodOptions{IdempotencyLevel: l.Enum()}
	}
	m := func(name string, opts *descriptorpb.MethodOptions, cs, ss bool) *descriptorpb.MethodDescriptorProto {
		md := &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: &empty, OutputType: &empty, Options: opts}
		if cs {
			md.ClientStreaming = proto.Bool(true)
		}
		if ss {
			md.ServerStreaming = proto.Bool(true)
		}
		return md
	}
	shop := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("shop/v1/shop.proto"),
		Package:    proto.String("shop.v1"),
		Dependency: []string{"google/protobuf/empty.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{
			{Name: proto.String("Orders"), Method: []*descriptorpb.MethodDescriptorProto{
				m("Get", level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS), false, false),
				m("Put", level(descriptorpb.MethodOptions_IDEMPOTENT), false, false),
				m("Create", nil, false, false),
				m("Cancel", level(descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN), false, false),
				m("Watch", level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS), false, true),
				m("Upload", nil, true, false),
				m("Chat", nil, true, true),
			}},
			{Name: proto.String("Catalog"), Method: []*descriptorpb.MethodDescriptorProto{
				m("List", level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS), false, false),
			}},
		},
	}
	return &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		protodesc.ToFileDescriptorProto(emptypb.File_google_protobuf_empty_proto),
		shop,
	}}
}

// testCatalog is the catalog of testDescriptorSet with Create keyed and
// ledger-backed, and Cancel keyed without a ledger.
func testCatalog(t testing.TB) *Catalog {
	t.Helper()
	c, err := CatalogFromDescriptorSet(testDescriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	if c, err = c.WithKeyed("/shop.v1.Orders/Create", true); err != nil {
		t.Fatal(err)
	}
	if c, err = c.WithKeyed("/shop.v1.Orders/Cancel", false); err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeClock is a manual clock for budget and backoff tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
