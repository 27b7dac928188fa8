package connectpay

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
)

// ServicePath is the path under which NewHandler's procedures are
// served: the Payments service's full name between slashes.
const ServicePath = "/opledger.examples.payments.v1.Payments/"

// NewHandler returns the Payments service's procedures as connect
// handlers of svc, and the path to mount them on (ServicePath): Transfer,
// the keyed mutation (give the kit's server interceptor in opts), and
// GetTransfer, marked NO_SIDE_EFFECTS. The service's gRPC status errors
// become connect errors with the same code, message and details; any
// other error (the database's) is passed on as it is, for the kit to
// classify.
func NewHandler(svc *payments.Service, opts ...connect.HandlerOption) (string, http.Handler) {
	transfer := connect.NewUnaryHandler(paymentspb.TransferMethod, unary(svc.Transfer), opts...)
	get := connect.NewUnaryHandler(paymentspb.GetTransferMethod, unary(svc.GetTransfer),
		append(opts[:len(opts):len(opts)], connect.WithIdempotency(connect.IdempotencyNoSideEffects))...)
	return ServicePath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case paymentspb.TransferMethod:
			transfer.ServeHTTP(w, r)
		case paymentspb.GetTransferMethod:
			get.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// unary adapts a gRPC-style method of the service to a connect handler.
func unary[Req, Res any](f func(context.Context, *Req) (*Res, error)) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error) {
	return func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		res, err := f(ctx, req.Msg)
		if err != nil {
			return nil, fromStatus(err)
		}
		return connect.NewResponse(res), nil
	}
}

// fromStatus turns a gRPC status error into a connect error with its
// code, message and details; any other error is returned as it is.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		m, err := d.UnmarshalNew()
		if err != nil {
			continue
		}
		if det, err := connect.NewErrorDetail(m); err == nil {
			ce.AddDetail(det)
		}
	}
	return ce
}

// Authenticate is payments.Tokens in front of connect handlers: a call
// without exactly one "Authorization: Bearer <token>" of a token t issued
// is refused with UNAUTHENTICATED, marked not executed
// (connectint.NotExecuted); any other runs with the token's principal in
// its context (payments.Principal finds it, for
// connectint.CallerFromPrincipal). Put it before the kit's interceptor.
func Authenticate(t *payments.Tokens) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				return next(ctx, req)
			}
			actx, ok := t.Authorize(ctx, req.Header().Values("Authorization"))
			if !ok {
				return nil, connectint.NotExecuted(connect.CodeUnauthenticated, "payments: a bearer token the service issued is required")
			}
			return next(actx, req)
		}
	})
}

// ServerFaults is the server side of f in front of connect handlers, as
// payments.Faults.UnaryServerInterceptor is for gRPC: during the outage
// it refuses every call without running it (UNAVAILABLE, marked not
// executed), it delays some calls and loses the answers of others after
// they ran (UNAVAILABLE, as a proxy that lost the response). Put it
// first, before the kit's interceptor, so that it sees committed calls.
func ServerFaults(f *payments.Faults) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient {
				return next(ctx, req)
			}
			if f.RefuseInOutage() {
				return nil, connectint.NotExecuted(connect.CodeUnavailable, "injected: outage; the call was not run")
			}
			if err := f.Delay(ctx); err != nil {
				code := connect.CodeCanceled
				if errors.Is(err, context.DeadlineExceeded) {
					code = connect.CodeDeadlineExceeded
				}
				return nil, connect.NewError(code, err)
			}
			resp, err := next(ctx, req)
			if f.LoseAnswer() {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("injected: response lost after the server ran the call"))
			}
			return resp, err
		}
	})
}

// NewHTTPServer returns a server of h on HTTP/1.1 and h2c (HTTP/2
// without TLS), so that one port serves the Connect protocol to HTTP/1.1
// clients and the gRPC protocol to HTTP/2 ones. It logs nothing.
func NewHTTPServer(h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}
