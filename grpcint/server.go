package grpcint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// Server is the server side of the kit: it runs each keyed unary method's
// handler inside one transaction with its ledger claim, replays stored
// outcomes and answers resolve requests; a gRPC rendering of package
// keyed's core. A Server is safe for concurrent use.
type Server struct {
	catalog *policy.Catalog
	caller  CallerFunc
	core    *keyedcore.Server
	reply   keyedproto.Reply[any]
	keyed   bool
}

// NewServer returns the server side of the kit for the keyed methods of
// catalog: their handlers write through the transaction in db that holds
// the claim in l (see txmiddleware.TxFromContext), and caller fingerprints
// who calls (see CallerFromPeerCertificate, CallerFromPrincipal,
// CallerFromTrustedHeader); a keyed call without a caller is refused with
// UNAUTHENTICATED. Methods that are not keyed, or not in the catalog, pass
// through untouched. A keyed method must be registered as a unary method:
// StreamServerInterceptor refuses one served as a stream, and
// CheckRegistered finds it at start-up. It is NewServerFor with
// keyed.SQL(db, l).
//
// A configuration that cannot work is an error wrapping ErrInvalidConfig:
// a nil argument, a keyed streaming method, a lock-wait bound on a dialect
// without dialects.LockWaiter, a bad option.
func NewServer(db *sql.DB, l ledger.Ledger, catalog *policy.Catalog, caller CallerFunc, opts ...keyed.ServerOption) (*Server, error) {
	return keyedcore.ViaSQL(db, l, ErrInvalidConfig, func(tx keyed.Transactions) (*Server, error) {
		return NewServerFor(tx, catalog, caller, opts...)
	})
}

// NewServerFor is NewServer on the transactions of tx, any transaction
// API's (see keyed.Transactions): keyed.SQL for database/sql, or
// another API's, whose handlers find their transaction with that API's
// function. Everything else is as for NewServer.
func NewServerFor(tx keyed.Transactions, catalog *policy.Catalog, caller CallerFunc, opts ...keyed.ServerOption) (*Server, error) {
	core, cfg, err := keyedcore.NewRPCServer(tx, catalog, caller == nil, keyedcore.RPC{Transport: "grpcint", Noun: "method",
		Codec:     StatusCodec(DefaultFinalCodes()...),
		Answered:  func(err error) bool { _, ok := status.FromError(err); return ok },
		KeyHeader: KeyHeader, Invalid: ErrInvalidConfig}, opts)
	if err != nil {
		return nil, err
	}
	s := &Server{catalog: catalog, caller: caller, core: core, reply: reply(cfg.Types, cfg.Pushback)}
	for _, p := range catalog.Methods() {
		s.keyed = s.keyed || p.Kind == policy.KindKeyed
	}
	return s, nil
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() keyed.Stats { return s.core.Stats() }

// StreamServerInterceptor returns the streaming interceptor. NewServer
// refuses a catalog with a keyed streaming method, so a stream never
// needs the ledger, and streams pass through, with two exceptions that
// never run a handler:
//
//   - a method the catalog marks keyed that the server serves as a
//     stream (its service registered it among its streams, not as a
//     unary method): the kit cannot protect it, so instead of running it
//     with no key, no caller and no ledger, the call is refused with
//     UNIMPLEMENTED, reason ReasonKeyedStream. Server.CheckRegistered
//     finds such a method at start-up;
//
// A resolve is a unary request: the idempotency-resolve header on a stream
// (a tool such as grpcurl -H sends its headers to every call, the server
// reflection stream included) is ignored, and the stream served as if it
// were absent.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		if tr := s.judgeRetries(ctx, info.FullMethod, false); tr != nil {
			ss.SetTrailer(tr)
		}
		if s.keyed {
			if p, ok := s.catalog.Lookup(info.FullMethod); ok && p.Kind == policy.KindKeyed {
				ctx, call := s.core.Begin(ctx, info.FullMethod, false)
				ans := keyedcore.Answer{Outcome: keyed.KeyedStream, Detail: info.FullMethod + " is keyed in the method catalog but the server serves it as a stream, which the kit cannot protect; it is refused (register it as a unary method)"}
				err := statusErr(ans.Outcome, ans.Detail)
				call.End(ctx, ans, telemetry.GRPCStatus.String(codeName(err)))
				return err
			}
		}
		// A resolve is a unary request: a stream carrying the header (a
		// tool that sends its headers to every call, grpcurl -H to the
		// reflection stream) is served as if it were absent.
		return handler(srv, ss)
	}
}

// ServiceInfoProvider is what Server.CheckRegistered reads the registered
// services from: *grpc.Server implements it.
type ServiceInfoProvider interface {
	// GetServiceInfo returns the registered services by full name, with
	// their methods' names and streaming flags.
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// CheckRegistered compares the services registered on srv (usually the
// *grpc.Server the kit's interceptors are installed on, once every
// service is registered) with the catalog, and returns an error wrapping
// ErrInvalidConfig that names every keyed method of a registered service
// that the kit cannot protect:
//
//   - registered as a streaming method: served that way it would run
//     with no key, no caller and no ledger, and StreamServerInterceptor
//     refuses every call of it;
//   - missing from its registered service (a method renamed in the proto
//     but not in the catalog): its new name is not keyed and passes
//     through unprotected.
//
// Keyed methods of services that srv does not register are not checked:
// they may be served elsewhere. Call it at start-up, before Serve:
//
//	if err := kit.CheckRegistered(srv); err != nil {
//		log.Fatal(err)
//	}
func (s *Server) CheckRegistered(srv ServiceInfoProvider) error {
	if srv == nil {
		return fmt.Errorf("%w: CheckRegistered: nil server", ErrInvalidConfig)
	}
	services := srv.GetServiceInfo()
	var errs []error
	for _, p := range s.catalog.Methods() {
		if p.Kind != policy.KindKeyed {
			continue
		}
		service, method, err := methodname.Split(p.FullMethod)
		if err != nil {
			continue // the catalog checked its names
		}
		info, ok := services[service]
		if !ok {
			continue
		}
		found := false
		for _, m := range info.Methods {
			if m.Name != method {
				continue
			}
			found = true
			if shape := policy.ShapeOf(m.IsClientStream, m.IsServerStream); shape != policy.ShapeUnary {
				errs = append(errs, fmt.Errorf("keyed method %s is registered as a %s method; only unary methods can be keyed, and the kit refuses every call of it", p.FullMethod, shape))
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("keyed method %s is not a method of the registered service %s (renamed?); the method that replaced it is not keyed", p.FullMethod, service))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// UnaryServerInterceptor returns the interceptor. For a keyed method it:
//
//  1. reads the idempotency-key header or, without one, the request's
//     AIP-155 request_id (INVALID_ARGUMENT without either, or with two
//     different keys; see keyedproto.Identify) and the caller fingerprint
//     (UNAUTHENTICATED without one);
//  2. fingerprints the request (SHA-256 of its deterministic encoding);
//  3. for a resolve request (idempotency-resolve: 1, or true in any
//     case) answers with the stored outcome, NOT_FOUND or ABORTED, without
//     running the handler; any other value of the header is refused
//     (INVALID_ARGUMENT, INVALID_KEYED_REQUEST: request-unreadable) before
//     the key is read;
//  4. otherwise runs the handler inside txmiddleware, with the transaction
//     reachable from the handler's context (txmiddleware.TxFromContext), storing its
//     response (deterministic bytes and full message name) or its final
//     error with the claim in the same transaction;
//  5. on a replay returns the stored response or error, with response
//     metadata idempotency-replayed: true.
//
// Every refusal and failure carries an ErrorInfo with a stable reason,
// its code as ErrorMap gives it.
// Other methods pass through, except a resolve request, which never runs
// a handler (INVALID_ARGUMENT, route-not-keyed), and a request with a
// malformed resolve header (INVALID_ARGUMENT, request-unreadable).
//
// Before any of this, a call of a catalog method (keyed or not; not a
// resolve request) is judged by its retry headers: a retry by grpc-go
// (grpc-previous-rpc-attempts), by the mesh (x-envoy-attempt-count) or by
// the kit's client (opledger-attempt) counts in
// opledger.server.retries_by_layer, and one by a layer that is not the
// channel's owner (the one its client declares in opledger-retry-owner,
// else keyed.WithRetryOwner's, else judged by the method's kind) is a second
// owner, logged once per method and layer (see keyedcore.Server.Retries),
// and named in the answer's trailer opledger-second-retry-owner (the
// layers, "service-config", "mesh", comma-separated), so that a client
// sees it too. The stream interceptor judges streams alike.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if tr := s.judgeRetries(ctx, info.FullMethod, true); tr != nil {
			_ = grpc.SetTrailer(ctx, tr)
		}
		if s.keyed {
			if p, ok := s.catalog.Lookup(info.FullMethod); ok && p.Kind == policy.KindKeyed {
				return s.keyedCall(ctx, req, info.FullMethod, handler)
			}
		}
		// A resolve must never run a handler, keyed or not, nor a request
		// whose resolve header is malformed.
		md, _ := metadata.FromIncomingContext(ctx)
		switch resolve, refusal := keyedcore.ParseResolve(md.Get(ResolveHeader)); {
		case refusal.Outcome != 0:
			return nil, statusErr(refusal.Outcome, info.FullMethod+": "+refusal.Detail)
		case resolve:
			return nil, statusErr(keyed.NotKeyed, info.FullMethod+" is not a keyed method; there is nothing to resolve")
		}
		return handler(ctx, req)
	}
}

func (s *Server) keyedCall(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	resolve, refusal := keyedcore.ParseResolve(md.Get(ResolveHeader))
	ctx, call := s.core.Begin(ctx, method, resolve)
	if refusal.Outcome != 0 {
		err := statusErr(refusal.Outcome, refusal.Detail)
		call.End(ctx, refusal, telemetry.GRPCStatus.String(codeName(err)))
		return nil, err
	}
	var resp any
	caller, ok := s.caller(ctx)
	ans := keyedproto.Serve(ctx, call, caller, ok, md.Get(KeyHeader), md.Get(firstSentHeader), req, resolve, RequestFingerprint, func(ctx context.Context) (ledger.Result, error) {
		r, herr := handler(ctx, req)
		if herr != nil {
			return ledger.Result{}, herr
		}
		resp = r
		return encodeResponse(r)
	})
	if ans.Lifetime > 0 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(lifetimeHeader, strconv.FormatInt(int64(ans.Lifetime/time.Second), 10)))
	}
	out, err := s.reply.Answer(ctx, &ans, resp)
	call.End(ctx, ans, telemetry.GRPCStatus.String(codeName(err)))
	return out, err
}

// reply is the gRPC rendering of a keyed call's answer (see
// keyedproto.Reply.Answer): a replay is marked in the trailer, not the
// header (response headers sent ahead of an error would commit the call
// for grpc-go's retries, and for the kit's evidence, so a replay lost on
// the way back could not be retried); a refusal is the status the error
// map gives its outcome, with the server's grpc-retry-pushback-ms in the
// trailer when the outcome comes with it.
func reply(types protoregistry.MessageTypeResolver, pushback time.Duration) keyedproto.Reply[any] {
	return keyedproto.Reply[any]{Types: types,
		Replaying: func(ctx context.Context, c uint32) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedHeader, "true", ReplayedCodeHeader, strconv.FormatUint(uint64(c), 10)))
		},
		StoredError: func(c uint32, err error) error {
			if err == nil {
				return status.Error(codes.Code(c), "")
			}
			return err
		},
		Stored: func(m proto.Message) any { return m },
		Ended:  func(err error) error { return status.FromContextError(err).Err() },
		Refusal: func(ctx context.Context, a keyedcore.Answer) error {
			if a.Row().Pushback {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(policy.PushbackHeader, strconv.FormatInt(pushback.Milliseconds(), 10)))
			}
			return statusErr(a.Outcome, a.Detail)
		},
	}
}

// encodeResponse is the stored form of a handler's response.
func encodeResponse(resp any) (ledger.Result, error) {
	r, err := keyedproto.EncodeResponse(resp)
	if err != nil {
		return ledger.Result{}, status.Errorf(codes.Internal, "grpcint: %v", err)
	}
	return r, nil
}
