// Package requestid finds a request message's AIP-155 request identifier
// (https://google.aip.dev/155): a top-level field named request_id of type
// string, singular, and not a member of a real oneof (a proto3 optional
// field, whose oneof is synthetic, counts). The descriptor catalogs
// (policy, connectint) mark a mutation with one keyed; the protobuf
// transports (internal/keyedcore/keyedproto) read and fill it.
//
// It keeps no state of its own: a descriptor's Fields().ByName is already
// an index the protobuf runtime builds once per (immutable) descriptor and
// shares safely between goroutines, so a cache here would add state and
// save nothing.
package requestid

import "google.golang.org/protobuf/reflect/protoreflect"

// Name is the field's name, as AIP-155 gives it.
const Name protoreflect.Name = "request_id"

// Field returns md's request_id field when it is AIP-155's, and nil
// otherwise: md nil, no such field, a field of another kind (bytes, a
// message), a repeated field or a map, a member of a real oneof (whose
// value another field can clear), or an extension.
func Field(md protoreflect.MessageDescriptor) protoreflect.FieldDescriptor {
	if md == nil {
		return nil
	}
	fd := md.Fields().ByName(Name)
	switch {
	case fd == nil, fd.Kind() != protoreflect.StringKind, fd.Cardinality() == protoreflect.Repeated, fd.IsExtension():
		return nil
	case fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic():
		return nil
	}
	return fd
}
