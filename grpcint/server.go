package grpcint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/methodname"
	"github.com/opledger/opledger/internal/options"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// DefaultLockWait is how long a keyed call waits before its claim can be
// decided (for a pooled connection, for BEGIN, for another attempt with
// the same key that is still in flight) before it answers ABORTED or
// UNAVAILABLE STORAGE_BUSY (see WithLockWait), unless WithLockWait says
// otherwise.
const DefaultLockWait = 2 * time.Second

// DefaultInProgressPushback is the grpc-retry-pushback-ms sent with
// ABORTED when another attempt with the same key is still running, and
// with UNAVAILABLE STORAGE_BUSY.
const DefaultInProgressPushback = 200 * time.Millisecond

// ServerOption configures a Server; the With functions build them. Giving
// the same option twice is an error.
type ServerOption struct{ o options.Option[serverConfig] }

type serverConfig struct {
	txOpts   []txmiddleware.Option
	atCommit []string
	lockWait time.Duration
	codec    txmiddleware.ErrorCodec
	pushback time.Duration
	types    protoregistry.MessageTypeResolver
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	logger   *slog.Logger
}

func serverOption(name string, f func(*serverConfig) error) ServerOption {
	return ServerOption{options.New(name, f)}
}

// WithTxOptions passes options to the server's txmiddleware runner:
// isolation, transaction attempts and backoff, a retry
// hook. The lock-wait bound, the error codec and the telemetry are the
// server's own options (WithLockWait, WithErrorCodec,
// WithServerMeterProvider, WithServerTracerProvider, WithServerLogger);
// giving them here as well is an error.
func WithTxOptions(opts ...txmiddleware.Option) ServerOption {
	return serverOption("WithTxOptions", func(c *serverConfig) error {
		c.txOpts = append(c.txOpts, opts...)
		return nil
	})
}

// WithClaimAtCommit runs the named keyed methods (full gRPC method names,
// "/pkg.Service/Method") claim at commit (see
// txmiddleware.WithClaimAtCommit): the handler first, then the outcome
// recorded as the last statement of its transaction; a retry of a
// completed call, or a concurrent duplicate, runs the handler and rolls
// it back before replaying. Choose it for short handlers whose every
// effect is in the transaction and whose retries are rare. A name that is
// not a keyed method of the catalog is an error, and so is a ledger that
// does not implement ledger.Recorder. The other keyed methods claim first.
func WithClaimAtCommit(methods ...string) ServerOption {
	return serverOption("WithClaimAtCommit", func(c *serverConfig) error {
		if len(methods) == 0 {
			return errors.New("no method named")
		}
		c.atCommit = append([]string(nil), methods...)
		return nil
	})
}

// WithLockWait bounds how long a keyed call (and a resolve) waits before
// its claim is decided (default [DefaultLockWait]): for a connection of
// the pool, for BEGIN (on SQLite, for the database's single write lock)
// and for another attempt with the same key that is still in flight (see
// txmiddleware.WithLockWait). Past it the call answers ABORTED
// ReasonInProgress when an attempt with the same key holds what it waited
// for, and UNAVAILABLE ReasonStorageBusy when the database was busy with
// other keys (a full pool, another writer on SQLite); both with
// grpc-retry-pushback-ms. The dialect must implement dialects.LockWaiter;
// zero sets no bound (the database's own settings and the call's deadline
// bound the wait).
func WithLockWait(d time.Duration) ServerOption {
	return serverOption("WithLockWait", func(c *serverConfig) error {
		if d < 0 {
			return errors.New("lock wait must not be negative")
		}
		c.lockWait = d
		return nil
	})
}

// WithErrorCodec sets which handler errors are final, recorded and
// replayed (default StatusCodec(DefaultFinalCodes()...)). It must decode
// what it encodes: replays and resolves return its Decode.
func WithErrorCodec(codec txmiddleware.ErrorCodec) ServerOption {
	return serverOption("WithErrorCodec", func(c *serverConfig) error {
		if codec == nil {
			return errors.New("codec must not be nil")
		}
		c.codec = codec
		return nil
	})
}

// WithInProgressPushback sets the grpc-retry-pushback-ms sent with
// ABORTED when another attempt with the same key is still running, and
// with UNAVAILABLE STORAGE_BUSY (default [DefaultInProgressPushback]).
func WithInProgressPushback(d time.Duration) ServerOption {
	return serverOption("WithInProgressPushback", func(c *serverConfig) error {
		if d < 0 {
			return errors.New("negative pushback")
		}
		c.pushback = d
		return nil
	})
}

// WithTypeResolver sets where stored responses find their message type
// by full name (default protoregistry.GlobalTypes).
func WithTypeResolver(r protoregistry.MessageTypeResolver) ServerOption {
	return serverOption("WithTypeResolver", func(c *serverConfig) error {
		if r == nil {
			return errors.New("type resolver must not be nil")
		}
		c.types = r
		return nil
	})
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
	codec    txmiddleware.ErrorCodec
	pushback time.Duration
	types    protoregistry.MessageTypeResolver
	runner   *txmiddleware.Runner
	atCommit map[string]*txmiddleware.Runner // WithClaimAtCommit's methods
	probe    *txmiddleware.Runner
	keyed    bool
	obs      *serverObs

	executed, replayed, resolves, refused, failed atomic.Int64
}

// NewServer returns the server side of the kit for the keyed methods of
// catalog: their handlers write through the transaction in db that holds
// the claim in l (see txmiddleware.TxFromContext), and caller fingerprints
// who calls (see CallerFromPeerCertificate, CallerFromPrincipal,
// CallerFromTrustedHeader); a keyed call without a caller is refused with
// UNAUTHENTICATED. Methods that are not keyed, or not in the catalog, pass
// through untouched. A keyed method must be registered as a unary method:
// StreamServerInterceptor refuses one served as a stream, and
// CheckRegistered finds it at start-up.
//
// A configuration that cannot work is an error wrapping ErrInvalidConfig:
// a nil argument, a keyed streaming method, a lock-wait bound on a dialect
// without dialects.LockWaiter, a bad option.
func NewServer(db *sql.DB, l ledger.Ledger, catalog *policy.Catalog, caller CallerFunc, opts ...ServerOption) (*Server, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: nil database", ErrInvalidConfig)
	case l == nil:
		return nil, fmt.Errorf("%w: nil ledger", ErrInvalidConfig)
	case catalog == nil:
		return nil, fmt.Errorf("%w: nil method catalog", ErrInvalidConfig)
	case caller == nil:
		return nil, fmt.Errorf("%w: nil caller function", ErrInvalidConfig)
	case l.Dialect() == nil:
		return nil, fmt.Errorf("%w: the ledger has no dialect", ErrInvalidConfig)
	}
	cfg := serverConfig{lockWait: DefaultLockWait, codec: StatusCodec(DefaultFinalCodes()...),
		pushback: DefaultInProgressPushback, types: protoregistry.GlobalTypes}
	if err := options.Apply(&cfg, opts, func(o ServerOption) options.Option[serverConfig] { return o.o }); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s := &Server{db: db, ledger: l, dialect: l.Dialect(), catalog: catalog, caller: caller,
		codec: cfg.codec, pushback: cfg.pushback, types: cfg.types, obs: newServerObs(&cfg)}
	for _, p := range catalog.Methods() {
		if p.Kind != policy.KindKeyed {
			continue
		}
		if p.Shape != policy.ShapeUnary {
			return nil, fmt.Errorf("%w: keyed method %s is %s; only unary methods can be keyed", ErrInvalidConfig, p.FullMethod, p.Shape)
		}
		s.keyed = true
	}
	base := append([]txmiddleware.Option(nil), cfg.txOpts...)
	if cfg.lockWait > 0 {
		base = append(base, txmiddleware.WithLockWait(cfg.lockWait))
	}
	runnerTel, probeTel := cfg.runnerTelemetry()
	r, err := txmiddleware.New(db, l, append(append(base, runnerTel...), txmiddleware.WithErrorCodec(cfg.codec))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.runner = r
	if len(cfg.atCommit) > 0 {
		rc, err := txmiddleware.New(db, l, append(append(base, runnerTel...), txmiddleware.WithErrorCodec(cfg.codec), txmiddleware.WithClaimAtCommit())...)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		s.atCommit = map[string]*txmiddleware.Runner{}
		for _, m := range cfg.atCommit {
			if p, ok := catalog.Lookup(m); !ok || p.Kind != policy.KindKeyed {
				return nil, fmt.Errorf("%w: WithClaimAtCommit: %q is not a keyed method of the catalog", ErrInvalidConfig, m)
			}
			s.atCommit[m] = rc
		}
	}
	// The resolve probe records nothing (no codec): its claim always
	// rolls back.
	p, err := txmiddleware.New(db, l, append(base, probeTel...)...)
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
//   - a resolve request (INVALID_ARGUMENT, as for a unary method that is
//     not keyed).
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		md, _ := metadata.FromIncomingContext(ctx)
		if s.keyed {
			if p, ok := s.catalog.Lookup(info.FullMethod); ok && p.Kind == policy.KindKeyed {
				key := keyOfIncoming(md)
				ctx, span, rec := s.obs.begin(ctx, info.FullMethod, false, key)
				note(ctx, &s.refused, outcomeRefused)
				err := statusErr(ReasonKeyedStream, info.FullMethod+" is keyed in the method catalog but the server serves it as a stream, which the kit cannot protect; it is refused (register it as a unary method)")
				s.obs.done(ctx, span, rec, info.FullMethod, false, key, err)
				return err
			}
		}
		if len(md[ResolveHeader]) > 0 {
			return statusErr(ReasonInvalidRequest, info.FullMethod+" is not a keyed method; there is nothing to resolve")
		}
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
//  1. reads the idempotency-key header (INVALID_ARGUMENT without one) and
//     the caller fingerprint (UNAUTHENTICATED without one);
//  2. fingerprints the request (SHA-256 of its deterministic encoding);
//  3. for a resolve request (idempotency-resolve: 1) answers with the
//     stored outcome, NOT_FOUND or ABORTED, without running the handler;
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
			return nil, statusErr(ReasonInvalidRequest, info.FullMethod+" is not a keyed method; there is nothing to resolve")
		}
		return handler(ctx, req)
	}
}

func (s *Server) keyedCall(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	resolve, key := len(md.Get(ResolveHeader)) > 0, keyOfIncoming(md)
	ctx, span, rec := s.obs.begin(ctx, method, resolve, key)
	resp, err := s.serveKeyed(ctx, req, method, handler)
	s.obs.done(ctx, span, rec, method, resolve, key, err)
	return resp, err
}

func (s *Server) serveKeyed(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	keys := md.Get(KeyHeader)
	resolve := len(md.Get(ResolveHeader)) > 0
	if resolve {
		s.resolves.Add(1)
	}
	switch {
	case len(keys) == 0:
		note(ctx, &s.refused, outcomeRefused)
		return nil, statusErr(ReasonMissingKey, method+" needs an idempotency-key header")
	case len(keys) > 1:
		note(ctx, &s.refused, outcomeRefused)
		return nil, statusErr(ReasonInvalidKey, "more than one idempotency-key header")
	}
	caller, ok := s.caller(ctx)
	if !ok {
		note(ctx, &s.refused, outcomeRefused)
		return nil, statusErr(ReasonNoCaller, "no authenticated caller for a keyed call")
	}
	id, err := ledger.NewIdentity(caller, method, keys[0])
	if err != nil {
		note(ctx, &s.refused, outcomeRefused)
		var ie *ledger.InputError
		if errors.As(err, &ie) && ie.Field == "caller" {
			return nil, statusErr(ReasonNoCaller, "caller fingerprint is not usable: "+ie.Reason)
		}
		if errors.As(err, &ie) && ie.Field == "key" {
			return nil, statusErr(ReasonInvalidKey, "idempotency key "+ie.Reason)
		}
		return nil, statusErr(ReasonInvalidRequest, "cannot build the operation identity")
	}
	fp, err := RequestFingerprint(req)
	if err != nil {
		note(ctx, &s.refused, outcomeRefused)
		return nil, statusErr(ReasonInvalidRequest, "request cannot be fingerprinted")
	}
	creq := ledger.ClaimRequest{Identity: id, Fingerprint: fp}
	if resolve {
		return s.resolve(ctx, creq)
	}

	var (
		workErr error
		resp    any
	)
	out, err := s.runnerFor(method).Run(ctx, creq, func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
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
		note(ctx, &s.replayed, outcomeReplayed)
		return s.replay(ctx, out.Result)
	case out.Executed:
		note(ctx, &s.executed, outcomeExecuted)
		if err != nil {
			return nil, err // a recorded final error, as the handler returned it
		}
		return resp, nil
	}
	return nil, s.failure(ctx, err, workErr)
}

// runnerFor returns the runner of a keyed method's calls.
func (s *Server) runnerFor(method string) *txmiddleware.Runner {
	if rc, ok := s.atCommit[method]; ok {
		return rc
	}
	return s.runner
}

// failure maps an error of an unfinished keyed call to its status, as
// the error map says.
func (s *Server) failure(ctx context.Context, err, workErr error) error {
	switch {
	case errors.Is(err, ledger.ErrKeyReused):
		note(ctx, &s.refused, outcomeRefused)
		return statusErr(ReasonKeyReused, "idempotency key already used for a different request")
	case errors.Is(err, ledger.ErrInProgress):
		note(ctx, &s.refused, outcomeRefused)
		s.setPushback(ctx)
		return statusErr(ReasonInProgress, "another attempt with this idempotency key is in progress")
	case errors.Is(err, ledger.ErrIncomplete):
		note(ctx, &s.refused, outcomeRefused)
		return statusErr(ReasonIncomplete, "an earlier attempt committed without a result; its outcome is unknown")
	}
	note(ctx, &s.failed, outcomeFailed)
	switch {
	case errors.Is(err, txmiddleware.ErrBusy):
		s.setPushback(ctx)
		return statusErr(ReasonStorageBusy, "the database was busy past the wait bound (no free connection, or another transaction held its write lock); nothing was committed; retry with the same idempotency key after the pushback")
	case workErr != nil && errors.Is(err, workErr):
		// The handler's own non-final error: nothing was recorded. A bare
		// database error is not passed on to the client as it is.
		if _, ok := status.FromError(workErr); !ok && s.dialect.Classify(workErr) != dialects.ClassOther {
			return statusErr(ReasonStorageUnavailable, "the database failed; nothing was committed; retry with the same idempotency key")
		}
		return workErr
	case errors.Is(err, txmiddleware.ErrCommitUnknown):
		return statusErr(ReasonOutcomeUnknown, "commit outcome unknown; resolve with the same idempotency key before retrying")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if cerr := ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
	case errors.Is(err, ledger.ErrInvalid):
		return statusErr(ReasonResultNotStorable, "the response cannot be stored in the operation ledger; nothing was committed")
	case errors.Is(err, ledger.ErrNotAcquired):
		return statusErr(ReasonLedgerMisuse, "the operation ledger refused to complete its own claim; nothing was committed")
	case errors.Is(err, ledger.ErrRetryable) && s.dialect.Classify(err) != dialects.ClassConnection:
		return statusErr(ReasonTransactionAborted, "the transaction kept conflicting with others; nothing was committed; retry with the same idempotency key")
	}
	return statusErr(ReasonStorageUnavailable, "the operation ledger's database failed; nothing was committed; retry with the same idempotency key")
}

// setPushback sets the server's grpc-retry-pushback-ms in the trailer.
func (s *Server) setPushback(ctx context.Context) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(policy.PushbackHeader, strconv.FormatInt(s.pushback.Milliseconds(), 10)))
}

// resolve answers a resolve request without running the handler.
func (s *Server) resolve(ctx context.Context, creq ledger.ClaimRequest) (any, error) {
	e, err := s.runnerFor(creq.Identity.Method()).Lookup(ctx, creq.Identity)
	switch {
	case err == nil && e.State == ledger.Completed:
		setOutcome(ctx, outcomeFound)
		return s.replay(ctx, e.Result)
	case err == nil:
		setOutcome(ctx, outcomeRefused)
		return nil, statusErr(ReasonIncomplete, "an earlier attempt committed without a result; its outcome is unknown")
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
		setOutcome(ctx, outcomeNotFound)
		return nil, statusErr(ReasonNotFound, "nothing was committed for this idempotency key; running the call again with it is safe")
	case out.Replayed:
		setOutcome(ctx, outcomeFound)
		return s.replay(ctx, out.Result)
	case errors.Is(err, ledger.ErrKeyReused):
		// Committed meanwhile by a request with another fingerprint.
		if e, lerr := s.runnerFor(creq.Identity.Method()).Lookup(ctx, creq.Identity); lerr == nil && e.State == ledger.Completed {
			setOutcome(ctx, outcomeFound)
			return s.replay(ctx, e.Result)
		}
	case errors.Is(err, txmiddleware.ErrBusy) && s.runnerFor(creq.Identity.Method()).InFlight(creq.Identity):
		// The probe could not begin in time behind a call with the key that
		// is still in flight here: that is the answer.
		err = fmt.Errorf("%w: %w", ledger.ErrInProgress, err)
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
	_ = grpc.SetTrailer(ctx, metadata.Pairs(ReplayedHeader, "true", ReplayedCodeHeader, strconv.FormatUint(uint64(r.Code), 10)))
	if r.Code != 0 {
		return nil, s.codec.Decode(r)
	}
	return s.decode(r)
}

// decode rebuilds a stored response message.
func (s *Server) decode(r ledger.Result) (any, error) {
	mt, err := s.types.FindMessageByName(protoreflect.FullName(r.TypeName))
	if err != nil {
		return nil, statusErr(ReasonResultUnreadable, "stored response type "+strconv.Quote(r.TypeName)+" is not known to this server")
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(r.Response, m); err != nil {
		return nil, statusErr(ReasonResultUnreadable, "stored response does not decode as "+r.TypeName)
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
