package chaos

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/connectpay"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/keyed"
)

type connectReplica struct{ *http.Server }

func (c connectReplica) stop() { c.Close() }

// connectServer is the replica on connect-go (chaos --transport connect):
// the Payments procedures behind connectint's interceptor, with the
// commit watch and the tokens (and, with breakKeys, fresh keys) in front
// of it and the handler runs noted inside it, as on gRPC; served on
// HTTP/1.1 and h2c, so that both the Connect and the gRPC protocol reach
// it.
func (rc replicaConfig) connectServer() (replicaServer, error) {
	cat, err := payments.Catalog()
	if err != nil {
		return nil, err
	}
	opts := []keyed.ServerOption{keyed.WithLockWait(rc.lockWait)}
	if rc.atCommit {
		opts = append(opts, keyed.WithClaimAtCommit(paymentspb.TransferMethod))
	}
	kit, err := connectint.NewServerFor(rc.txs, cat, connectint.CallerFromPrincipal(payments.Principal), opts...)
	if err != nil {
		return nil, err
	}
	chain := []connect.Interceptor{connectAfterCommit(rc.watch), connectpay.Authenticate(rc.tokens)}
	if rc.breakKeys {
		chain = append(chain, connectFreshKeys)
	}
	chain = append(chain, kit.Interceptor(), connectMarkExecuted)
	path, h := connectpay.NewHandler(rc.svc, connect.WithInterceptors(chain...))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	return connectReplica{connectpay.NewHTTPServer(mux)}, nil
}

// connectAfterCommit is afterCommit for connect-go: w sees every
// successful Transfer.
func connectAfterCommit(w *commitWatch) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().Procedure != paymentspb.TransferMethod {
				return next(ctx, req)
			}
			ran := new(executedTransfer)
			resp, err := next(context.WithValue(ctx, executedKey{}, ran), req)
			if err != nil {
				return resp, err
			}
			r, _ := resp.Any().(*paymentspb.TransferReply)
			w.committed(ran, r)
			return resp, err
		}
	})
}

// connectFreshKeys is freshKeys for connect-go (--break-keys).
var connectFreshKeys = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(connectint.KeyHeader, keyed.NewKey())
		return next(ctx, req)
	}
})

// connectMarkExecuted is markExecuted for connect-go: the innermost
// interceptor, inside the kit's.
var connectMarkExecuted = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err == nil && resp != nil {
			noteRun(ctx, resp.Any())
		}
		return resp, err
	}
})
