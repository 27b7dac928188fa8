package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func TestOwnerStringParse(t *testing.T) {
	for _, o := range []RetryOwner{OwnerApplication, OwnerServiceConfig, OwnerMesh, OwnerNone} {
		got, err := parseRetryOwner(o.String())
		if err != nil || got != o {
			t.Errorf("parseRetryOwner(%q) = %v, %v", o.String(), got, err)
		}
		b, err := o.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back RetryOwner
		if err := back.UnmarshalText(b); err != nil || back != o {
			t.Errorf("text round trip of %v: %v, %v", o, back, err)
		}
	}
	if o, err := parseRetryOwner("Service_Config"); err != nil || o != OwnerServiceConfig {
		t.Errorf("case-insensitive parse: %v, %v", o, err)
	}
	for _, bad := range []string{"", "grpc", "meshes"} {
		if _, err := parseRetryOwner(bad); !errors.Is(err, ErrInvalidOwner) {
			t.Errorf("parseRetryOwner(%q) error %v, want ErrInvalidOwner", bad, err)
		}
	}
	var zero RetryOwner
	if zero.Valid() || RetryOwner(5).Valid() {
		t.Error("zero or out-of-range owner is valid")
	}
	if _, err := zero.MarshalText(); !errors.Is(err, ErrInvalidOwner) {
		t.Errorf("MarshalText of zero owner: %v", err)
	}
	if s := RetryOwner(9).String(); s != "RetryOwner(9)" {
		t.Errorf("String = %q", s)
	}
}

func TestNewCatalog(t *testing.T) {
	c, err := NewCatalog(
		MethodPolicy{FullMethod: "/a.B/Get", Kind: KindNoSideEffects},
		MethodPolicy{FullMethod: "/a.B/Put", Kind: KindKeyed, DurableLedger: true, Shape: ShapeUnary},
		MethodPolicy{FullMethod: "/C/Do"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if c.size() != 3 {
		t.Fatalf("Len = %d", c.size())
	}
	p, ok := c.Lookup("/a.B/Put")
	if !ok || p.Kind != KindKeyed || !p.DurableLedger || p.Service() != "a.B" || p.Method() != "Put" {
		t.Errorf("Lookup = %+v, %v", p, ok)
	}
	if _, ok := c.Lookup("/a.B/put"); ok {
		t.Error("lookup must be case-sensitive")
	}
	if got := c.serviceNames(); len(got) != 2 || got[0] != "C" || got[1] != "a.B" {
		t.Errorf("Services = %v", got)
	}
	if ms := c.Methods(); len(ms) != 3 || ms[0].FullMethod != "/C/Do" || ms[0].Kind != KindNonIdempotent {
		t.Errorf("Methods = %+v", ms)
	}
	for _, bad := range []string{"", "a.B/Get", "/a.B", "/a.B/", "//Get", "/a..B/Get", "/a.B/Get/x", "/a.B/G-t", "/1a.B/Get"} {
		if _, err := NewCatalog(MethodPolicy{FullMethod: bad}); !errors.Is(err, errInvalidMethodName) {
			t.Errorf("NewCatalog(%q) error %v, want errInvalidMethodName", bad, err)
		}
	}
	// The grammar is the ledger's, including its 512-byte cap.
	longest := "/a.B/" + strings.Repeat("x", 512-len("/a.B/"))
	if _, err := NewCatalog(MethodPolicy{FullMethod: longest}); err != nil {
		t.Errorf("512-byte name: %v", err)
	}
	if _, err := NewCatalog(MethodPolicy{FullMethod: longest + "x"}); !errors.Is(err, errInvalidMethodName) {
		t.Errorf("513-byte name: error %v, want errInvalidMethodName", err)
	}
	if _, _, ok := splitFullMethod(longest + "x"); ok {
		t.Error("splitFullMethod accepts a 513-byte name")
	}
	if _, err := NewCatalog(MethodPolicy{FullMethod: "/a.B/X"}, MethodPolicy{FullMethod: "/a.B/X"}); !errors.Is(err, errDuplicateMethod) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := NewCatalog(MethodPolicy{FullMethod: "/a.B/X", Kind: 9}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad kind: %v", err)
	}
	if _, err := c.WithKeyed("/a.B/Nope", true); !errors.Is(err, errUnknownMethod) {
		t.Errorf("WithKeyed unknown: %v", err)
	}
	var nilCat *Catalog
	if nilCat.size() != 0 || nilCat.Methods() != nil || nilCat.serviceNames() != nil {
		t.Error("nil catalog is not empty")
	}
	if _, ok := nilCat.Lookup("/a.B/Get"); ok {
		t.Error("nil catalog lookup")
	}
}

func TestCatalogFromDescriptors(t *testing.T) {
	c := testCatalog(t)
	want := map[string]MethodPolicy{
		"/shop.v1.Orders/Get":    {Kind: KindNoSideEffects, Shape: ShapeUnary},
		"/shop.v1.Orders/Put":    {Kind: KindIdempotent, Shape: ShapeUnary},
		"/shop.v1.Orders/Create": {Kind: KindKeyed, Shape: ShapeUnary, DurableLedger: true},
		"/shop.v1.Orders/Cancel": {Kind: KindKeyed, Shape: ShapeUnary},
		"/shop.v1.Orders/Watch":  {Kind: KindNoSideEffects, Shape: ShapeServerStream},
		"/shop.v1.Orders/Upload": {Kind: KindNonIdempotent, Shape: ShapeClientStream},
		"/shop.v1.Orders/Chat":   {Kind: KindNonIdempotent, Shape: ShapeBidiStream},
		"/shop.v1.Catalog/List":  {Kind: KindNoSideEffects, Shape: ShapeUnary},
	}
	if c.size() != len(want) {
		t.Fatalf("Len = %d, want %d: %+v", c.size(), len(want), c.Methods())
	}
	for name, w := range want {
		w.FullMethod = name
		if got, ok := c.Lookup(name); !ok || got != w {
			t.Errorf("%s = %+v, want %+v", name, got, w)
		}
	}
	// Unknown idempotency (no option, or IDEMPOTENCY_UNKNOWN) is non-idempotent.
	raw, err := CatalogFromDescriptorSet(testDescriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"/shop.v1.Orders/Create", "/shop.v1.Orders/Cancel"} {
		if p, _ := raw.Lookup(n); p.Kind != KindNonIdempotent {
			t.Errorf("%s kind %v, want non-idempotent", n, p.Kind)
		}
	}

	// The same through protodesc.NewFiles and CatalogFromFiles.
	files, err := protodesc.NewFiles(testDescriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	fc, err := CatalogFromFiles(files)
	if err != nil || fc.size() != len(want) {
		t.Fatalf("CatalogFromFiles: %v, %d", err, fc.size())
	}
	if _, err := CatalogFromFiles(nil); !errors.Is(err, errInvalidDescriptors) {
		t.Errorf("nil files: %v", err)
	}

	// Without --include_imports the dependency is missing: tolerated.
	set := testDescriptorSet()
	set.File = set.File[1:]
	if c2, err := CatalogFromDescriptorSet(set); err != nil || c2.size() != len(want) {
		t.Errorf("set without imports: %v", err)
	}
}

func TestCatalogFromGlobalFiles(t *testing.T) {
	// The test binary links grpc's health service (grpc_health_v1), which
	// registers itself in protoregistry.GlobalFiles.
	c, err := CatalogFromFiles(protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	check, ok := c.Lookup("/grpc.health.v1.Health/Check")
	if !ok || check.Kind != KindNonIdempotent || check.Shape != ShapeUnary {
		t.Errorf("Check = %+v, %v", check, ok)
	}
	if watch, ok := c.Lookup("/grpc.health.v1.Health/Watch"); !ok || watch.Shape != ShapeServerStream {
		t.Errorf("Watch = %+v, %v", watch, ok)
	}
	_ = healthpb.HealthCheckRequest{}
}

func TestLoadDescriptorSetFile(t *testing.T) {
	dir := t.TempDir()
	b, err := proto.Marshal(testDescriptorSet())
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "shop.pb")
	if err := os.WriteFile(good, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadDescriptorSetFile(good)
	if err != nil || c.size() != 8 {
		t.Fatalf("LoadDescriptorSetFile: %v", err)
	}
	if _, err := LoadDescriptorSetFile(filepath.Join(dir, "missing.pb")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.pb")
	if err := os.WriteFile(bad, []byte("{not protobuf"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDescriptorSetFile(bad); !errors.Is(err, errInvalidDescriptors) {
		t.Errorf("garbage file: %v", err)
	}
	dup := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
		{Name: proto.String("a.proto")}, {Name: proto.String("a.proto")},
	}}
	if _, err := CatalogFromDescriptorSet(dup); !errors.Is(err, errInvalidDescriptors) {
		t.Errorf("duplicate file: %v", err)
	}
}
