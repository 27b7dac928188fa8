package connectint

import (
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/opledger/opledger/internal/keyedoption"
	"github.com/opledger/opledger/policy"
)

// CatalogFromSpecs builds a method catalog from connect-go's
// descriptions of procedures: each Spec's Procedure ("/pkg.Service/Method",
// gRPC's full method name, so one catalog serves both transports), its
// StreamType (the shape) and its IdempotencyLevel (the kind:
// IdempotencyNoSideEffects gives policy.KindNoSideEffects,
// IdempotencyIdempotent policy.KindIdempotent, IdempotencyUnknown
// policy.KindNonIdempotent). When IdempotencyLevel is unknown and Schema is
// the procedure's protoreflect.MethodDescriptor, its idempotency_level
// option decides. A procedure whose Schema carries the method option
// (opledger.v1.keyed) of proto/opledger/v1 is policy.KindKeyed with
// DurableLedger set (and the option's Retention and UnknownBirth), and so
// is, without the option, a non-idempotent unary procedure whose Schema's
// request message has Google's AIP-155 request identifier (a top-level
// `string request_id`; see policy.KeyedByRequestID), as
// policy.CatalogFromFiles reads them; mark other procedures keyed with
// Catalog.WithKeyed. A malformed procedure name, one given twice, or the
// option misused (on a streaming or read-only procedure, or with a
// key_field the request does not have as AIP-155's request_id) is an
// error matching policy.ErrInvalidConfig.
func CatalogFromSpecs(specs ...connect.Spec) (*policy.Catalog, error) {
	return CatalogWithSpecs(nil, specs...)
}

// CatalogWithSpecs returns a copy of base (nil: an empty catalog) with the
// procedures of specs added, or replacing the policies of the same names,
// as CatalogFromSpecs reads them. A procedure that base marks keyed stays
// keyed (with its DurableLedger) when its spec says it is not read-only.
func CatalogWithSpecs(base *policy.Catalog, specs ...connect.Spec) (*policy.Catalog, error) {
	ps := make([]policy.MethodPolicy, 0, len(specs))
	for _, s := range specs {
		p := policy.MethodPolicy{FullMethod: s.Procedure, Kind: kindOf(s), Shape: shapeOf(s.StreamType)}
		if md, ok := s.Schema.(protoreflect.MethodDescriptor); ok {
			if err := markKeyed(&p, md); err != nil {
				return nil, fmt.Errorf("connectint: catalog from specs: %w: %w", policy.ErrInvalidConfig, err)
			}
		}
		if old, ok := base.Lookup(s.Procedure); ok && old.Kind == policy.KindKeyed && p.Kind != policy.KindNoSideEffects {
			p.Kind, p.DurableLedger = policy.KindKeyed, old.DurableLedger
		}
		ps = append(ps, p)
	}
	c, err := base.With(ps...)
	if err != nil {
		return nil, fmt.Errorf("connectint: catalog from specs: %w", err)
	}
	return c, nil
}

// markKeyed makes p, the policy of a procedure as its Spec gives it, a
// keyed mutation backed by a durable ledger when its Schema md declares it
// so, as policy.CatalogFromFiles reads a descriptor: with the
// (opledger.v1.keyed) option, or with AIP-155's request_id.
func markKeyed(p *policy.MethodPolicy, md protoreflect.MethodDescriptor) error {
	opt, ok, err := keyedoption.Of(md, p.Kind == policy.KindNoSideEffects)
	switch {
	case err != nil:
		return err
	case ok && p.Shape != policy.ShapeUnary:
		return fmt.Errorf("%w: procedure %s is served as a stream", keyedoption.ErrInvalid, p.FullMethod)
	case ok:
		p.Kind, p.DurableLedger, p.Retention = policy.KindKeyed, true, opt.Retention
		if opt.RefuseUnknownBirth {
			p.UnknownBirth = policy.RefuseUnknownBirth
		}
	case p.Shape == policy.ShapeUnary && policy.KeyedByRequestID(md, p.Kind):
		p.Kind, p.DurableLedger = policy.KindKeyed, true
	}
	return nil
}

// ServiceSpecs returns the Specs of every method of a service, as
// connect-go's generated code describes its handlers and clients: the
// procedure, the method descriptor as Schema, the stream type and the
// idempotency level of the method's idempotency_level option.
func ServiceSpecs(sd protoreflect.ServiceDescriptor) []connect.Spec {
	if sd == nil {
		return nil
	}
	ms := sd.Methods()
	out := make([]connect.Spec, 0, ms.Len())
	for i := range ms.Len() {
		md := ms.Get(i)
		st := connect.StreamTypeUnary
		if md.IsStreamingClient() {
			st |= connect.StreamTypeClient
		}
		if md.IsStreamingServer() {
			st |= connect.StreamTypeServer
		}
		out = append(out, connect.Spec{StreamType: st, Schema: md, Procedure: "/" + string(sd.FullName()) + "/" + string(md.Name()),
			IdempotencyLevel: levelOf(md)})
	}
	return out
}

func levelOf(md protoreflect.MethodDescriptor) connect.IdempotencyLevel {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return connect.IdempotencyUnknown
	}
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		return connect.IdempotencyNoSideEffects
	case descriptorpb.MethodOptions_IDEMPOTENT:
		return connect.IdempotencyIdempotent
	}
	return connect.IdempotencyUnknown
}

func kindOf(s connect.Spec) policy.Kind {
	level := s.IdempotencyLevel
	if level == connect.IdempotencyUnknown {
		if md, ok := s.Schema.(protoreflect.MethodDescriptor); ok {
			level = levelOf(md)
		}
	}
	switch level {
	case connect.IdempotencyNoSideEffects:
		return policy.KindNoSideEffects
	case connect.IdempotencyIdempotent:
		return policy.KindIdempotent
	}
	return policy.KindNonIdempotent
}

func shapeOf(st connect.StreamType) policy.Shape {
	return policy.ShapeOf(st&connect.StreamTypeClient != 0, st&connect.StreamTypeServer != 0)
}
