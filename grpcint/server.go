package grpcint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultLockWait is how long a keyed call waits for another attempt with
// the same key that is still in flight before it answers ABORTED (and a
// resolve before it answers ABORTED), unless WithTxOptions sets
// txmiddleware.WithLockWait.
const DefaultLockWait = 2 * time.Second

// ServerOption configures a Server.
type ServerOption func(*Server) error

// WithDB sets the database that holds the ledger's table and the
// service's own tables: the handler's writes and the claim commit in one
// transaction on it.
func WithDB(db *sql.DB) ServerOption {
	return func(s *Server) error { s.db = db; return nil }
}

// WithLedger sets the operation ledger. When l is a *ledger.Store its
// dialect is used unless WithDialect says otherwise.
func WithLedger(l ledger.Ledger) ServerOption {
	return func(s *Server) error { s.ledger = l; return nil }
}

// WithDialect sets the database dialect, needed when the ledger is not a
// *ledger.Store.
func WithDialect(d dialects.Dialect) ServerOption {
	return func(s *Server) error { s.dialect = d; return nil }
}

// WithCatalog sets the method catalog: which methods are keyed. Methods
// that are not keyed, or not in the catalog, pass through untouched.
func WithCatalog(c *policy.Catalog) ServerOption {
	return func(s *Server) error { s.catalog = c; return nil }
}

// WithCaller sets the function that fingerprints the authenticated
// caller (see CallerFromPeerCertificate, CallerFromPrincipal,
// CallerFromTrustedHeader). A keyed call without a caller is refused with
// UNAUTHENTICATED.
func WithCaller(f CallerFunc) ServerOption {
	return func(s *Server) error { s.caller = f; return nil }
}

// WithTxOptions passes options to the txmiddleware runner: isolation,
// attempts on transient failures, the in-progress wait bound, the rule
// for final errors.
func WithTxOptions(opts ...txmiddleware.Option) ServerOption {
	return func(s *Server) error { s.txOpts = append(s.txOpts, opts...); return nil }
}

// WithInProgressPushback sets the grpc-retry-pushback-ms sent with
// ABORTED when another attempt with the same key is still running
// (default 200ms).
func WithInProgressPushback(d time.Duration) ServerOption {
	return func(s *Server) error {
		if d < 0 {
			return fmt.Errorf("%w: negative pushback", ErrInvalidConfig)
		}
		s.pushback = d
		return nil
	}
}

// WithTypeResolver sets where stored responses find their message type
// by full name (default protoregistry.GlobalTypes).
func WithTypeResolver(r protoregistry.MessageTypeResolver) ServerOption {
	return func(s *Server) error { s.types = r; return nil }
}

// ServerStats are the counters of a Server.
type ServerStats struct {
	// Executed counts keyed calls whose handler ran and committed (a
	// success or a recorded final error).
	Executed int64
	// Replayed counts keyed calls answered from a stored outcome.
	Replayed int64
	// Resolves counts resolve requests, whatever they found.
	Resolves int64
	// Refused counts keyed calls refused before the handler: no key, no
	// caller, key reused, in progress.
	Refused int64
	// Failed counts keyed calls that failed without committing (the
	// handler's non-final error, storage trouble, an unknown commit).
	Failed int64
}

// Server is the server side of the kit: it runs each keyed unary method's
// handler inside one transaction with its ledger claim, replays stored
// outcomes and answers resolve requests. A Server is safe for concurrent
// use.
type Server struct {
	db       *sql.DB
	ledger   ledger.Ledger
	dialect  dialects.Dialect
	catalog  *policy.Catalog
	caller   CallerFunc
	txOpts   []txmiddleware.Option
	pushback time.Duration
	types    protoregistry.MessageTypeResolver
	runner   *txmiddleware.Runner
	probe    *txmiddleware.Runner
	keyed    bool

	executed, replayed, resolves, refused, failed atomic.Int64
}

// NewServer builds a Server. A configuration that cannot work is an
// error wrapping ErrInvalidConfig: no catalog; a keyed streaming method;
// a keyed method but no database, ledger, dialect or caller function.
func NewServer(opts ...ServerOption) (*Server, error) {
	s := &Server{pushback: 200 * time.Millisecond, types: protoregistry.GlobalTypes}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.catalog == nil {
		return nil, fmt.Errorf("%w: no method catalog (WithCatalog)", ErrInvalidConfig)
	}
	for _, p := range s.catalog.Methods() {
		if p.Kind != policy.KindKeyed {
			continue
		}
		if p.Shape != policy.ShapeUnary {
			return nil, fmt.Errorf("%w: keyed method %s is %s; only unary methods can be keyed", ErrInvalidConfig, p.FullMethod, p.Shape)
		}
		s.keyed = true
	}
	if !s.keyed {
		return s, nil
	}
	if s.dialect == nil {
		if st, ok := s.ledger.(*ledger.Store); ok && st != nil {
			s.dialect = st.Dialect()
		}
	}
	switch {
	case s.ledger == nil:
		return nil, fmt.Errorf("%w: the catalog has keyed methods but no ledger was given (WithLedger)", ErrInvalidConfig)
	case s.db == nil:
		return nil, fmt.Errorf("%w: the catalog has keyed methods but no database was given (WithDB)", ErrInvalidConfig)
	case s.dialect == nil:
		return nil, fmt.Errorf("%w: the ledger is not a *ledger.Store; give its dialect (WithDialect)", ErrInvalidConfig)
	case s.caller == nil:
		return nil, fmt.Errorf("%w: the catalog has keyed methods but no caller function was given (WithCaller)", ErrInvalidConfig)
	}
	if _, ok := s.dialect.(dialects.LockWaiter); ok {
		// A bound on the wait for an attempt in flight, so that a duplicate
		// gets ABORTED with pushback instead of blocking until its
		// deadline; a WithLockWait in WithTxOptions comes later and wins.
		s.txOpts = append([]txmiddleware.Option{txmiddleware.WithLockWait(DefaultLockWait)}, s.txOpts...)
	}
	r, err := txmiddleware.New(s.db, s.ledger, s.dialect, s.txOpts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.runner = r
	noFinal := txmiddleware.WithFinalErrors(func(error) (*status.Status, bool) { return nil, false })
	p, err := txmiddleware.New(s.db, s.ledger, s.dialect, append(append([]txmiddleware.Option(nil), s.txOpts...), noFinal, txmiddleware.WithMaxAttempts(3))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.probe = p
	return s, nil
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{Executed: s.executed.Load(), Replayed: s.replayed.Load(), Resolves: s.resolves.Load(),
		Refused: s.refused.Load(), Failed: s.failed.Load()}
}

// UnaryServerInterceptor builds a Server with opts and returns its unary
// interceptor.
func UnaryServerInterceptor(opts ...ServerOption) (grpc.UnaryServerInterceptor, error) {
	s, err := NewServer(opts...)
	if err != nil {
		return nil, err
	}
	return s.UnaryServerInterceptor(), nil
}

// StreamServerInterceptor builds a Server with opts and returns its stream
// interceptor.
func StreamServerInterceptor(opts ...ServerOption) (grpc.StreamServerInterceptor, error) {
	s, err := NewServer(opts...)
	if err != nil {
		return nil, err
	}
	return s.StreamServerInterceptor(), nil
}

// StreamServerInterceptor returns an interceptor that passes streams
// through: NewServer already refused a catalog with a keyed streaming
// method, so no stream needs the ledger.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, ss)
	}
}

// UnaryServerInterceptor returns the interceptor. For a keyed method it:
//
//  1. reads the idempotency-key header (INVALID_ARGUMENT without one) and
//     the caller fingerprint (UNAUTHENTICATED without one);
//  2. fingerprints the request (SHA-256 of its deterministic encoding);
//  3. for a resolve request (idempotency-resolve: 1) answers with the
//     stored outcome, NOT_FOUND or ABORTED, without running the handler;
//  4. otherwise runs the handler inside txmiddleware, with the transaction
//     reachable from the handler's context (TxFromContext), storing its
//     response (deterministic bytes and full message name) or its final
//     error with the claim in the same transaction;
//  5. on a replay returns the stored response or error, with response
//     metadata idempotency-replayed: true.
//
// Every refusal carries an ErrorInfo with a stable reason (see Reason).
// Other methods pass through, except a resolve request, which never runs
// a handler (INVALID_ARGUMENT).
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.keyed {
			if p, ok := s.catalog.Lookup(info.FullMethod); ok && p.Kind == policy.KindKeyed {
				return s.keyedCall(ctx, req, info.FullMethod, handler)
			}
		}
		// A resolve must never run a handler, keyed or not.
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md[ResolveHeader]) > 0 {
			return nil, statusErr(codes.InvalidArgument, ReasonInvalidRequest, info.FullMethod+" is not a keyed method; there is nothing to resolve")
		}
		return handler(ctx, req)
	}
}

// TxFromContext returns the transaction a keyed handler runs in: write
// the business data through it so that it commits with the ledger claim.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) { return txmiddleware.TxFromContext(ctx) }

func (s *Server) keyedCall(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	keys := md.Get(KeyHeader)
	resolve := len(md.Get(ResolveHeader)) > 0
	if resolve {
		s.resolves.Add(1)
	}
	switch {
	case len(keys) == 0:
		s.refused.Add(1)
		return nil, statusErr(codes.InvalidArgument, ReasonMissingKey, method+" needs an idempotency-key header")
	case len(keys) > 1:
		s.refused.Add(1)
		return nil, statusErr(codes.InvalidArgument, ReasonInvalidKey, "more than one idempotency-key header")
	}
	caller, ok := s.caller(ctx)
	if !ok {
		s.refused.Add(1)
		return nil, statusErr(codes.Unauthenticated, ReasonNoCaller, "no authenticated caller for a keyed call")
	}
	id, err := ledger.NewIdentity(caller, method, keys[0])
	if err != nil {
		s.refused.Add(1)
		var ie *ledger.InputError
		if errors.As(err, &ie) && ie.Field == "caller" {
			return nil, statusErr(codes.Unauthenticated, ReasonNoCaller, "caller fingerprint is not usable: "+ie.Reason)
		}
		if errors.As(err, &ie) && ie.Field == "key" {
			return nil, statusErr(codes.InvalidArgument, ReasonInvalidKey, "idempotency key "+ie.Reason)
		}
		return nil, statusErr(codes.InvalidArgument, ReasonInvalidRequest, "cannot build the operation identity")
	}
	fp, err := RequestFingerprint(req)
	if err != nil {
		s.refused.Add(1)
		return nil, statusErr(codes.InvalidArgument, ReasonInvalidRequest, "request cannot be fingerprinted")
	}
	creq := ledger.ClaimRequest{Identity: id, Fingerprint: fp}
	if resolve {
		return s.resolve(ctx, creq)
	}

	var (
		workErr error
		resp    any
	)
	out, err := s.runner.Run(ctx, creq, func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
		r, herr := handler(ctx, req)
		if herr != nil {
			workErr = herr
			return ledger.Result{}, herr
		}
		resp = r
		return encodeResponse(r)
	})
	switch {
	case out.Replayed:
		s.replayed.Add(1)
		return s.replay(ctx, out.Result)
	case out.Executed:
		s.executed.Add(1)
		if err != nil {
			return nil, err // a recorded final error, as the handler returned it
		}
		return resp, nil
	}
	return nil, s.failure(ctx, err, workErr)
}

// failure maps an error of an unfinished keyed call to its status.
func (s *Server) failure(ctx context.Context, err, workErr error) error {
	switch {
	case errors.Is(err, ledger.ErrKeyReused):
		s.refused.Add(1)
		return statusErr(codes.FailedPrecondition, ReasonKeyReused, "idempotency key already used for a different request")
	case errors.Is(err, ledger.ErrInProgress):
		s.refused.Add(1)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(policy.PushbackHeader, strconv.FormatInt(s.pushback.Milliseconds(), 10)))
		return statusErr(codes.Aborted, ReasonInProgress, "another attempt with this idempotency key is in progress")
	case errors.Is(err, ledger.ErrIncomplete):
		s.refused.Add(1)
		return statusErr(codes.FailedPrecondition, ReasonIncomplete, "an earlier attempt committed without a result; its outcome is unknown")
	}
	s.failed.Add(1)
	switch {
	case workErr != nil && errors.Is(err, workErr):
		// The handler's own non-final error: nothing was recorded. A bare
		// database error is not passed on to the client as it is.
		if _, ok := status.FromError(workErr); !ok && s.dialect.Classify(workErr) != dialects.ClassOther {
			return statusErr(codes.Unavailable, ReasonStorageUnavailable, "the database failed; retry with the same idempotency key")
		}
		return workErr
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		return statusErr(codes.Unavailable, ReasonOutcomeUnknown, "commit outcome unknown; resolve with the same idempotency key before retrying")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if cerr := ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
	}
	return statusErr(codes.Unavailable, ReasonStorageUnavailable, "the operation ledger's database failed; retry with the same idempotency key")
}

// resolve answers a resolve request without running the handler.
func (s *Server) resolve(ctx context.Context, creq ledger.ClaimRequest) (any, error) {
	e, err := s.ledger.Lookup(ctx, s.db, creq.Identity)
	switch {
	case err == nil && e.State == ledger.Completed:
		return s.replay(ctx, e.Result)
	case err == nil:
		return nil, statusErr(codes.FailedPrecondition, ReasonIncomplete, "an earlier attempt committed without a result; its outcome is unknown")
	case !errors.Is(err, ledger.ErrNotFound):
		return nil, s.failure(ctx, err, nil)
	}
	// Nothing committed. An attempt may still be in flight, invisible to
	// Lookup: probe with a claim that is always rolled back. It waits for
	// an in-flight attempt (up to the wait bound) and never records.
	out, err := s.probe.Run(ctx, creq, func(context.Context, *sql.Tx) (ledger.Result, error) {
		return ledger.Result{}, errProbe
	})
	switch {
	case errors.Is(err, errProbe):
		return nil, statusErr(codes.NotFound, ReasonNotFound, "nothing was committed for this idempotency key; running the call again with it is safe")
	case out.Replayed:
		return s.replay(ctx, out.Result)
	case errors.Is(err, ledger.ErrKeyReused):
		// Committed meanwhile by a request with another fingerprint.
		if e, lerr := s.ledger.Lookup(ctx, s.db, creq.Identity); lerr == nil && e.State == ledger.Completed {
			return s.replay(ctx, e.Result)
		}
	}
	return nil, s.failure(ctx, err, nil)
}

var errProbe = errors.New("grpcint: resolve probe")

// replay returns a stored outcome, marked as replayed.
func (s *Server) replay(ctx context.Context, r ledger.Result) (any, error) {
	// In the trailer, not the header: response headers sent ahead of an
	// error would commit the call for grpc-go's retries (and for the
	// kit's evidence), so a replay lost on the way back could not be
	// retried.
	_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedHeader, "true"))
	if r.Code != 0 {
		return nil, txmiddleware.ReplayError(r)
	}
	return s.decode(r)
}

// decode rebuilds a stored response message.
func (s *Server) decode(r ledger.Result) (any, error) {
	mt, err := s.types.FindMessageByName(protoreflect.FullName(r.TypeName))
	if err != nil {
		return nil, statusErr(codes.Internal, ReasonResultUnreadable, "stored response type "+strconv.Quote(r.TypeName)+" is not known to this server")
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Response, m); err != nil {
		return nil, statusErr(codes.Internal, ReasonResultUnreadable, "stored response does not decode as "+r.TypeName)
	}
	return m, nil
}

// encodeResponse is the stored form of a handler's response.
func encodeResponse(resp any) (ledger.Result, error) {
	m, ok := resp.(proto.Message)
	if !ok || m == nil {
		return ledger.Result{}, status.Errorf(codes.Internal, "grpcint: response of type %T is not a protobuf message", resp)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return ledger.Result{}, status.Errorf(codes.Internal, "grpcint: encode response: %v", err)
	}
	return ledger.Result{Response: b, TypeName: string(m.ProtoReflect().Descriptor().FullName())}, nil
}
