package policy

import (
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// maxDescriptorSetBytes bounds the size of a descriptor set file read by
// LoadDescriptorSetFile.
const maxDescriptorSetBytes = 64 << 20

// CatalogFromFiles builds a catalog from every service method in a registry
// of file descriptors, such as protoregistry.GlobalFiles (the files linked
// into the binary) or the result of protodesc.NewFiles.
//
// A method's kind comes from its idempotency_level option: NO_SIDE_EFFECTS
// gives KindNoSideEffects, IDEMPOTENT gives KindIdempotent, and
// IDEMPOTENCY_UNKNOWN or no option gives KindNonIdempotent. Descriptors cannot
// say that a method is keyed: use Catalog.WithKeyed.
func CatalogFromFiles(files *protoregistry.Files) (*Catalog, error) {
	if files == nil {
		return nil, fmt.Errorf("%w: nil file registry", ErrInvalidDescriptors)
	}
	m := make(map[string]MethodPolicy)
	var err error
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		err = addFileMethods(m, fd)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return newCatalog(m), nil
}

// CatalogFromDescriptorSet builds a catalog from a FileDescriptorSet, as
// written by protoc --descriptor_set_out or buf build. Imports missing from
// the set are tolerated (only services matter here), so the set need not be
// built with --include_imports.
func CatalogFromDescriptorSet(set *descriptorpb.FileDescriptorSet) (*Catalog, error) {
	if set == nil {
		return nil, fmt.Errorf("%w: nil descriptor set", ErrInvalidDescriptors)
	}
	files, err := protodesc.FileOptions{AllowUnresolvable: true}.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDescriptors, err)
	}
	return CatalogFromFiles(files)
}

// ParseDescriptorSet builds a catalog from the binary encoding of a
// FileDescriptorSet.
func ParseDescriptorSet(data []byte) (*Catalog, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%w: not a binary FileDescriptorSet: %w", ErrInvalidDescriptors, err)
	}
	return CatalogFromDescriptorSet(&set)
}

// LoadDescriptorSetFile reads a binary FileDescriptorSet file and builds a
// catalog from it. Errors reading the file wrap the os error (for example
// fs.ErrNotExist); errors decoding it wrap ErrInvalidDescriptors.
func LoadDescriptorSetFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: reading descriptor set: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDescriptorSetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy: reading descriptor set: %w", err)
	}
	if len(data) > maxDescriptorSetBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidDescriptors, path, maxDescriptorSetBytes)
	}
	c, err := ParseDescriptorSet(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func addFileMethods(m map[string]MethodPolicy, fd protoreflect.FileDescriptor) error {
	svcs := fd.Services()
	for i := 0; i < svcs.Len(); i++ {
		sd := svcs.Get(i)
		methods := sd.Methods()
		for j := 0; j < methods.Len(); j++ {
			md := methods.Get(j)
			p := MethodPolicy{
				FullMethod: "/" + string(sd.FullName()) + "/" + string(md.Name()),
				Kind:       kindOf(md),
				Shape:      ShapeOf(md.IsStreamingClient(), md.IsStreamingServer()),
			}
			if err := checkPolicy(p); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidDescriptors, err)
			}
			if _, dup := m[p.FullMethod]; dup {
				return fmt.Errorf("%w: %w: %q", ErrInvalidDescriptors, ErrDuplicateMethod, p.FullMethod)
			}
			m[p.FullMethod] = p
		}
	}
	return nil
}

func kindOf(md protoreflect.MethodDescriptor) Kind {
	opts, _ := md.Options().(*descriptorpb.MethodOptions)
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		return KindNoSideEffects
	case descriptorpb.MethodOptions_IDEMPOTENT:
		return KindIdempotent
	default:
		return KindNonIdempotent
	}
}
