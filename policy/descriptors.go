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

	"github.com/opledger/opledger/internal/keyedoption"
	"github.com/opledger/opledger/internal/requestid"
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
// IDEMPOTENCY_UNKNOWN or no option gives KindNonIdempotent.
//
// A method is KindKeyed with DurableLedger set when its .proto declares
// it so: with the method option (opledger.v1.keyed) of the published
// package proto/opledger/v1, whose retention and refuse_unknown_birth
// become the policy's Retention and UnknownBirth (the option is read
// whether or not that Go package is linked); or, without the option, when
// it is a non-idempotent unary method whose request message has a request
// identifier as Google's AIP-155 defines it (a top-level field `string
// request_id`, singular, not in a oneof; see [KeyedByRequestID]), since
// AIP-155 says that providing a request ID must guarantee idempotency,
// which is the durable record's promise. The option on a streaming or
// read-only method is an error naming the method, and so is a key_field
// other than request_id (the only field the kit's servers read a key
// from), request_id where the request has no such field, or no key_field
// where the request has one. Mark other methods keyed with
// Catalog.WithKeyed; undo a mark with Catalog.With.
func CatalogFromFiles(files *protoregistry.Files) (*Catalog, error) {
	if files == nil {
		return nil, fmt.Errorf("%w: nil file registry", errInvalidDescriptors)
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
		return nil, fmt.Errorf("%w: nil descriptor set", errInvalidDescriptors)
	}
	files, err := protodesc.FileOptions{AllowUnresolvable: true}.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidDescriptors, err)
	}
	return CatalogFromFiles(files)
}

// parseDescriptorSet builds a catalog from the binary encoding of a
// FileDescriptorSet.
func parseDescriptorSet(data []byte) (*Catalog, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("%w: not a binary FileDescriptorSet: %w", errInvalidDescriptors, err)
	}
	return CatalogFromDescriptorSet(&set)
}

// LoadDescriptorSetFile reads a binary FileDescriptorSet file and builds a
// catalog from it. Errors reading the file wrap the os error (for example
// fs.ErrNotExist); errors decoding it wrap errInvalidDescriptors.
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
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", errInvalidDescriptors, path, maxDescriptorSetBytes)
	}
	c, err := parseDescriptorSet(data)
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
			if err := markKeyed(&p, md); err != nil {
				return fmt.Errorf("%w: %w", errInvalidDescriptors, err)
			}
			if err := checkPolicy(p); err != nil {
				return fmt.Errorf("%w: %w", errInvalidDescriptors, err)
			}
			if _, dup := m[p.FullMethod]; dup {
				return fmt.Errorf("%w: %w: %q", errInvalidDescriptors, errDuplicateMethod, p.FullMethod)
			}
			m[p.FullMethod] = p
		}
	}
	return nil
}

// markKeyed makes p, the policy of md as its idempotency_level gives it,
// a keyed mutation backed by a durable ledger when md declares it so: with
// the (opledger.v1.keyed) option (and the option's retention and birth
// policy), or with AIP-155's request_id ([KeyedByRequestID]). A misused
// option is an error.
func markKeyed(p *MethodPolicy, md protoreflect.MethodDescriptor) error {
	opt, ok, err := keyedoption.Of(md, p.Kind == KindNoSideEffects)
	switch {
	case err != nil:
		return err
	case ok:
		p.Kind, p.DurableLedger, p.Retention = KindKeyed, true, opt.Retention
		if opt.RefuseUnknownBirth {
			p.UnknownBirth = RefuseUnknownBirth
		}
	case KeyedByRequestID(md, p.Kind):
		p.Kind, p.DurableLedger = KindKeyed, true
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

// KeyedByRequestID reports whether a method of kind k (as its
// idempotency_level gives it) is a keyed mutation by its API definition: a
// non-idempotent unary method whose request message has the request
// identifier of Google's AIP-155 (https://google.aip.dev/155), a top-level
// field named request_id of type string, singular, not in a oneof (a
// proto3 optional field counts). A method that reads or is idempotent
// stays what its option says; a streaming method cannot be keyed. The
// catalogs built from descriptors (CatalogFromFiles, and connectint's from
// connect Specs) mark such methods keyed with it, and read the
// (opledger.v1.keyed) option first.
func KeyedByRequestID(md protoreflect.MethodDescriptor, k Kind) bool {
	if md == nil || k != KindNonIdempotent || md.IsStreamingClient() || md.IsStreamingServer() {
		return false
	}
	return requestid.Field(md.Input()) != nil
}
