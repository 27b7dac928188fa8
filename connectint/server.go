package connectint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/keyedcore/keyedproto"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// Server is the server side of the kit for connect-go: it runs each keyed
// unary procedure's handler inside one transaction with its ledger claim,
// replays stored outcomes and answers resolve requests; a connect
// rendering of package keyed's core. A Server is safe for concurrent use.
type Server struct {
	catalog *policy.Catalog
	caller  CallerFunc
	core    *keyedcore.Server
	reply   keyedproto.Reply[connect.AnyResponse]
}

// NewServer returns the server side of the kit for the keyed procedures of
// catalog: their handlers write through the transaction in db that holds
// the claim in l (txmiddleware.TxFromContext), and caller fingerprints
// who calls; a keyed call without a caller is refused with
// UNAUTHENTICATED. It is NewServerFor with keyed.SQL(db, l).
func NewServer(db *sql.DB, l ledger.Ledger, catalog *policy.Catalog, caller CallerFunc, opts ...keyed.ServerOption) (*Server, error) {
	return keyedcore.ViaSQL(db, l, ErrInvalidConfig, func(tx keyed.Transactions) (*Server, error) {
		return NewServerFor(tx, catalog, caller, opts...)
	})
}

// NewServerFor is NewServer on the transactions of tx, any transaction
// API's (see keyed.Transactions): keyed.SQL for database/sql,
// pgxledger.Transactions for pgx, whose handlers find their transaction
// with pgxledger.TxFromContext. Procedures that are not keyed, or not in
// the catalog, pass through untouched. A configuration that cannot work is
// an error wrapping ErrInvalidConfig.
func NewServerFor(tx keyed.Transactions, catalog *policy.Catalog, caller CallerFunc, opts ...keyed.ServerOption) (*Server, error) {
	core, cfg, err := keyedcore.NewRPCServer(tx, catalog, caller == nil, keyedcore.RPC{Transport: "connectint", Noun: "procedure",
		Codec:     ErrorCodec(DefaultFinalCodes()...),
		Answered:  func(err error) bool { var ce *connect.Error; return errors.As(err, &ce) },
		KeyHeader: KeyHeader, Invalid: ErrInvalidConfig}, opts)
	if err != nil {
		return nil, err
	}
	return &Server{catalog: catalog, caller: caller, core: core, reply: reply(cfg.Types, cfg.Pushback)}, nil
}

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() keyed.Stats { return s.core.Stats() }

// Interceptor returns the server interceptor; install it on every handler
// of the catalog's services (connect.WithInterceptors). For a keyed unary
// procedure it:
//
//  1. reads the Idempotency-Key header or, without one, the request's
//     AIP-155 request_id (INVALID_ARGUMENT without either, or with two
//     different keys; see keyedproto.Identify) and the caller fingerprint
//     (UNAUTHENTICATED without one);
//  2. fingerprints the request (SHA-256 of its deterministic protobuf
//     encoding, internal/keyedcore/keyedproto's, as grpcint does);
//  3. for a resolve request (Idempotency-Resolve: 1, or true in any
//     case) answers with the stored outcome, NOT_FOUND or ABORTED, without
//     running the handler; any other value of the header is refused
//     (INVALID_ARGUMENT, INVALID_KEYED_REQUEST: request-unreadable) before
//     the key is read;
//  4. otherwise runs the handler with the transaction in its context,
//     storing its response or its final error with the claim in the same
//     transaction;
//  5. on a replay returns the stored response or error, with the trailer
//     Idempotency-Replayed: true and Idempotency-Replayed-Code.
//
// Every refusal and failure carries an ErrorInfo with a stable reason
// (package keyed's). A replayed response is the stored message, not the
// handler's *connect.Response: interceptors outside the kit's see it as a
// connect.AnyResponse whose Any is the message. Other procedures pass
// through, except a resolve request, which never runs a handler
// (INVALID_ARGUMENT, route-not-keyed), and a request with a malformed
// resolve header (INVALID_ARGUMENT, request-unreadable). A keyed
// procedure served by a streaming handler is refused (UNIMPLEMENTED); on
// any other stream the resolve header is ignored (a resolve is a unary
// request).
//
// Before any of this, a call of a catalog procedure (keyed or not; not a
// resolve request) is judged by its retry headers: a retry by the kit's
// client (Opledger-Attempt), by the mesh (X-Envoy-Attempt-Count) or by a
// gRPC client's service config (Grpc-Previous-Rpc-Attempts, on the gRPC
// protocol) counts in opledger.server.retries_by_layer, and one by a
// layer that is not the client's owner (the one it declares in
// Opledger-Retry-Owner, else keyed.WithRetryOwner's, else judged by the
// procedure's kind) is a second owner, logged once per procedure and
// layer (see keyedcore.Server.Retries), and named in the answer's
// Opledger-Second-Retry-Owner (the layers, "service-config", "mesh",
// comma-separated; a trailer, or an error's metadata), so that a client
// sees it too.
func (s *Server) Interceptor() connect.Interceptor { return serverInterceptor{s} }

type serverInterceptor struct{ s *Server }

func (i serverInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	s := i.s
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		proc := req.Spec().Procedure
		second := s.judgeRetries(ctx, proc, req.Header(), true)
		out, err := s.unary(ctx, req, proc, next)
		secondOwner(second, out, err)
		return out, err
	}
}

// unary serves a unary call.
func (s *Server) unary(ctx context.Context, req connect.AnyRequest, proc string, next connect.UnaryFunc) (connect.AnyResponse, error) {
	if p, ok := s.catalog.Lookup(proc); ok && p.Kind == policy.KindKeyed {
		return s.keyedCall(ctx, req, proc, next)
	}
	// A resolve must never run a handler, keyed or not, nor a request
	// whose resolve header is malformed.
	switch resolve, refusal := keyedcore.ParseResolve(req.Header().Values(ResolveHeader)); {
	case refusal.Outcome != 0:
		return nil, outcomeError(refusal.Outcome, proc+": "+refusal.Detail)
	case resolve:
		return nil, outcomeError(keyed.NotKeyed, proc+" is not a keyed procedure; there is nothing to resolve")
	}
	return next(ctx, req)
}

func (serverInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i serverInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	s := i.s
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		proc := conn.Spec().Procedure
		if v := s.judgeRetries(ctx, proc, conn.RequestHeader(), false); v != "" {
			conn.ResponseTrailer().Set(keyedcore.HTTPSecondOwner, v)
		}
		if p, ok := s.catalog.Lookup(proc); ok && p.Kind == policy.KindKeyed {
			ctx, call := s.core.Begin(ctx, proc, false)
			ans := keyedcore.Answer{Outcome: keyed.KeyedStream, Detail: proc + " is keyed in the method catalog but is served by a streaming handler, which the kit cannot protect; it is refused (serve it with connect.NewUnaryHandler)"}
			err := outcomeError(ans.Outcome, ans.Detail)
			call.End(ctx, ans, telemetry.ConnectCode.String(err.Code().String()))
			return err
		}
		// A resolve is a unary request: a stream carrying the header (a
		// tool that sends its headers to every call, server reflection
		// included) is served as if it were absent.
		return next(ctx, conn)
	}
}

func (s *Server) keyedCall(ctx context.Context, req connect.AnyRequest, proc string, next connect.UnaryFunc) (connect.AnyResponse, error) {
	resolve, refusal := keyedcore.ParseResolve(req.Header().Values(ResolveHeader))
	ctx, call := s.core.Begin(ctx, proc, resolve)
	if refusal.Outcome != 0 {
		err := outcomeError(refusal.Outcome, refusal.Detail)
		call.End(ctx, refusal, telemetry.ConnectCode.String(err.Code().String()))
		return nil, err
	}
	var resp connect.AnyResponse
	caller, ok := s.caller(ctx, req.Header())
	ans := keyedproto.Serve(ctx, call, caller, ok, req.Header().Values(KeyHeader), req.Header().Values(firstSentHeader), req.Any(), resolve, keyedproto.Fingerprint, func(ctx context.Context) (ledger.Result, error) {
		r, herr := next(ctx, req)
		if herr != nil {
			return ledger.Result{}, herr
		}
		resp = r
		var msg any
		if r != nil {
			msg = r.Any()
		}
		res, err := keyedproto.EncodeResponse(msg)
		if err != nil {
			return ledger.Result{}, connect.NewError(connect.CodeInternal, fmt.Errorf("connectint: %w", err))
		}
		return res, nil
	})
	lifetime := ans.Lifetime
	out, err := s.reply.Answer(ctx, &ans, resp)
	if lifetime > 0 {
		v := strconv.FormatInt(int64(lifetime/time.Second), 10)
		var ce *connect.Error
		switch {
		case errors.As(err, &ce):
			ce.Meta().Set(lifetimeHeader, v)
		case err == nil && out != nil:
			out.Trailer().Set(lifetimeHeader, v)
		}
	}
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	call.End(ctx, ans, telemetry.ConnectCode.String(code))
	return out, err
}

// reply is the connect rendering of a keyed call's answer (see
// keyedproto.Reply.Answer): a replay is marked in the trailer, as grpcint
// does (headers sent ahead of an error would make a replay lost on the way
// back look delivered); a refusal is the error the rendering gives its
// outcome, with the server's grpc-retry-pushback-ms when the outcome comes
// with it.
func reply(types protoregistry.MessageTypeResolver, pushback time.Duration) keyedproto.Reply[connect.AnyResponse] {
	return keyedproto.Reply[connect.AnyResponse]{Types: types,
		StoredError: func(c uint32, err error) error {
			var ce *connect.Error
			if !errors.As(err, &ce) {
				ce = connect.NewError(connect.Code(c), nil)
			}
			replayMarker(ce.Meta(), c)
			return ce
		},
		Stored: func(m proto.Message) connect.AnyResponse {
			r := &replayedResponse{Response: connect.NewResponse(&struct{}{}), msg: m}
			replayMarker(r.Trailer(), 0)
			return r
		},
		Ended: func(err error) error { return connect.NewError(contextCode(err), err) },
		Refusal: func(_ context.Context, a keyedcore.Answer) error {
			err := outcomeError(a.Outcome, a.Detail)
			if a.Row().Pushback {
				err.Meta().Set(policy.PushbackHeader, strconv.FormatInt(pushback.Milliseconds(), 10))
			}
			return err
		},
	}
}

// replayedResponse is a stored response as connect-go's handler sends it:
// the message it decoded, with the replay marker in the trailer.
type replayedResponse struct {
	*connect.Response[struct{}]
	msg proto.Message
}

// Any returns the stored message.
func (r *replayedResponse) Any() any { return r.msg }
