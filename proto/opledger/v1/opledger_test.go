package opledgerv1_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
	opledgerv1 "github.com/opledger/opledger/proto/opledger/v1"
)

// TestErrorReasonsAreTheTable: ErrorReason's values are exactly the
// ErrorInfo reasons of keyed's classification, besides the zero value,
// so that a client in another language reads every reason the kit sends.
func TestErrorReasonsAreTheTable(t *testing.T) {
	t.Parallel()
	var table []string
	for _, r := range keyed.Outcomes() {
		if r.Reason != "" && !slices.Contains(table, r.Reason) {
			table = append(table, r.Reason)
		}
	}
	var enum []string
	vals := opledgerv1.ErrorReason(0).Descriptor().Values()
	for i := range vals.Len() {
		if v := vals.Get(i); v.Number() != 0 {
			enum = append(enum, string(v.Name()))
		}
	}
	if !slices.Equal(enum, table) {
		t.Errorf("ErrorReason's values (in order) %v\nkeyed.Outcomes()'s reasons (in order) %v", enum, table)
	}
	if opledgerv1.ErrorReason_ERROR_REASON_UNSPECIFIED.String() != "ERROR_REASON_UNSPECIFIED" {
		t.Error("the zero value is not ERROR_REASON_UNSPECIFIED")
	}
}

// TestErrorDomain: the domain the package documents is the one the
// transports send.
func TestErrorDomain(t *testing.T) {
	t.Parallel()
	if opledgerv1.ErrorDomain != grpcint.ErrorDomain {
		t.Errorf("ErrorDomain %q, grpcint sends %q", opledgerv1.ErrorDomain, grpcint.ErrorDomain)
	}
}

// TestCatalogWithTheOptionLinked: with this package linked, a descriptor
// set file holds the option as a known extension, and the catalog reads
// it as it does unlinked (policy's TestCatalogKeyedOption reads the same
// file without it).
func TestCatalogWithTheOptionLinked(t *testing.T) {
	t.Parallel()
	c, err := policy.LoadDescriptorSetFile("../../../policy/testdata/keyed.binpb")
	if err != nil {
		t.Fatal(err)
	}
	const svc = "/opledger.test.keyed.v1.Orders/"
	want := map[string]policy.MethodPolicy{
		"Place":     {Kind: policy.KindKeyed, DurableLedger: true},
		"PlaceByID": {Kind: policy.KindKeyed, DurableLedger: true, Retention: time.Hour, UnknownBirth: policy.RefuseUnknownBirth},
		"Adjust":    {Kind: policy.KindKeyed, DurableLedger: true},
		"Get":       {Kind: policy.KindNoSideEffects},
		"Cancel":    {Kind: policy.KindNonIdempotent},
	}
	for m, p := range want {
		p.FullMethod, p.Shape = svc+m, policy.ShapeUnary
		if got, ok := c.Lookup(p.FullMethod); !ok || got != p {
			t.Errorf("%s: %+v (found %v), want %+v", m, got, ok, p)
		}
	}
}

// TestKeyedExtension: the extension is registered under its number on
// google.protobuf.MethodOptions, and a method's option reads back as a
// typed Keyed.
func TestKeyedExtension(t *testing.T) {
	t.Parallel()
	xd := opledgerv1.E_Keyed.TypeDescriptor()
	if xd.Number() != 51155 || xd.ContainingMessage().FullName() != "google.protobuf.MethodOptions" || xd.FullName() != "opledger.v1.keyed" {
		t.Fatalf("extension %s %d on %s", xd.FullName(), xd.Number(), xd.ContainingMessage().FullName())
	}
	k := &opledgerv1.Keyed{KeyField: "request_id"}
	b, err := proto.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	var back opledgerv1.Keyed
	if err := proto.Unmarshal(b, &back); err != nil || back.GetKeyField() != "request_id" {
		t.Fatalf("round trip: %v %v", &back, err)
	}
	if got := k.ProtoReflect().Descriptor().Fields().ByNumber(1); got == nil || got.Kind() != protoreflect.StringKind {
		t.Fatalf("Keyed's field 1 is %v", got)
	}
}
