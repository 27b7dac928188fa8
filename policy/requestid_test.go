package policy

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/internal/testkit/aippb"
)

// TestCatalogKeyedByRequestID: a catalog built from descriptors marks a
// non-idempotent unary mutation whose request has AIP-155's `string
// request_id` keyed with a durable ledger; a read, an idempotent method, a
// stream, a method without the field and the field's other forms (bytes,
// repeated, in a oneof) keep their kinds. The same from a registry and
// from a FileDescriptorSet's bytes.
func TestCatalogKeyedByRequestID(t *testing.T) {
	t.Parallel()
	const svc = "/opledger.testkit.aip.v1.Orders/"
	want := map[string]MethodPolicy{
		"CreateOrder": {Kind: KindKeyed, Shape: ShapeUnary, DurableLedger: true},
		"ShipOrder":   {Kind: KindKeyed, Shape: ShapeUnary, DurableLedger: true}, // proto3 optional
		"GetOrder":    {Kind: KindNoSideEffects, Shape: ShapeUnary},
		"UpdateOrder": {Kind: KindIdempotent, Shape: ShapeUnary},
		"CancelOrder": {Kind: KindNonIdempotent, Shape: ShapeUnary},
		"WatchOrders": {Kind: KindNonIdempotent, Shape: ShapeServerStream},
		"TagOrder":    {Kind: KindNonIdempotent, Shape: ShapeUnary}, // bytes
		"LabelOrder":  {Kind: KindNonIdempotent, Shape: ShapeUnary}, // repeated
		"MarkOrder":   {Kind: KindNonIdempotent, Shape: ShapeUnary}, // in a oneof
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(aippb.File_orders_proto); err != nil {
		t.Fatal(err)
	}
	fromFiles, err := CatalogFromFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(aippb.File_orders_proto)}}
	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	fromSet, err := parseDescriptorSet(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Catalog{"files": fromFiles, "descriptor set": fromSet} {
		if c.size() != len(want) {
			t.Errorf("%s: %d methods, want %d", name, c.size(), len(want))
		}
		for m, w := range want {
			w.FullMethod = svc + m
			if got, ok := c.Lookup(w.FullMethod); !ok || got != w {
				t.Errorf("%s: %s = %+v, want %+v", name, m, got, w)
			}
		}
	}
	// A mark is undone as any policy is replaced.
	p, _ := fromFiles.Lookup(svc + "CreateOrder")
	p.Kind, p.DurableLedger = KindNonIdempotent, false
	undone, err := fromFiles.With(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := undone.Lookup(svc + "CreateOrder"); got.Kind != KindNonIdempotent {
		t.Errorf("after With: %+v", got)
	}
	if KeyedByRequestID(nil, KindNonIdempotent) {
		t.Error("a nil method descriptor is keyed")
	}
}
