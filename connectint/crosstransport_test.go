package connectint_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// twoTransports serves the Wallet fixture service twice on one
// database, one ledger table and one business table: through grpc-go
// behind grpcint's server, and through connect-go behind connectint's.
type twoTransports struct {
	te         *testdb.Env
	biz        string
	grpcAddr   string
	connectURL string
	h1, h2     *http.Client
	grpcSrv    *grpcint.Server
	connectSrv *connectint.Server
	lose       bool // the grpc-go server loses every Deposit answer after commit
}

// connectDeposit serves the example's Deposit through connect-go: the
// same handler, its gRPC status errors as connect errors.
func connectDeposit(svc *wallet.Service) func(context.Context, *connect.Request[walletpb.DepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
	return func(ctx context.Context, req *connect.Request[walletpb.DepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
		r, err := svc.Deposit(ctx, req.Msg)
		if err != nil {
			if st, ok := status.FromError(err); ok {
				return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			}
			return nil, err
		}
		return connect.NewResponse(r), nil
	}
}

func newTwoTransports(t *testing.T, te *testdb.Env) *twoTransports {
	t.Helper()
	ctx := context.Background()
	x := &twoTransports{te: te, biz: te.Table + "_deposits"}
	if err := wallet.CreateTable(ctx, te.DB, te.Dialect, x.biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wallet.DropTable(ctx, te.DB, te.Dialect, x.biz) })
	svc, err := wallet.NewService(te.DB, te.Dialect, x.biz)
	if err != nil {
		t.Fatal(err)
	}
	store := newStore(t, te)
	cat := catalog(t)
	if x.grpcSrv, err = grpcint.NewServer(te.DB, store, cat, grpcint.CallerFromTrustedHeader(callerHeader)); err != nil {
		t.Fatal(err)
	}
	lose := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if x.lose && err == nil && info.FullMethod == walletpb.DepositMethod {
			return nil, status.Error(codes.Unavailable, "injected: answer lost after commit")
		}
		return resp, err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(lose, x.grpcSrv.UnaryServerInterceptor()))
	walletpb.RegisterWalletServer(gs, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	x.grpcAddr = lis.Addr().String()

	if x.connectSrv, err = connectint.NewServer(te.DB, store, cat, connectint.CallerFromTrustedHeader(callerHeader)); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(walletpb.DepositMethod, connect.NewUnaryHandler(walletpb.DepositMethod, connectDeposit(svc),
		connect.WithInterceptors(x.connectSrv.Interceptor())))
	x.connectURL = serveHTTP(t, mux)
	x.h1, x.h2 = httpClients(t)
	return x
}

// grpcConn is a grpc-go connection to addr.
func grpcConn(t *testing.T, addr string, opts ...grpc.DialOption) walletpb.WalletClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return walletpb.NewWalletClient(conn)
}

func (x *twoTransports) rows(t *testing.T, ref string) int {
	t.Helper()
	return x.te.Count(t, "SELECT COUNT(*) FROM "+x.te.Dialect.QuoteIdent(x.biz)+" WHERE reference = "+x.te.Ph(1), ref)
}

func grpcCtx(ctx context.Context, caller, key string) context.Context {
	return grpcint.WithKey(metadata.AppendToOutgoingContext(ctx, callerHeader, caller), key)
}

func grpcDeposit(ref string, amount int64) *walletpb.DepositRequest {
	return &walletpb.DepositRequest{Account: "a", Amount: amount, Reference: ref}
}

// TestCrossTransportReplay: a gRPC method and the connect procedure of the
// same name are one identity. A call made through grpc-go whose answer is
// lost after commit, retried with its key through a connect client (every
// protocol), replays; a call made through connect replays to grpc-go; a
// final error recorded through one replays through the other; and grpc-go
// reads the connect server's reasons (one ErrorInfo domain).
func TestCrossTransportReplay(t *testing.T) {
	testdb.ForEachParallel(t, 8, func(t *testing.T, te *testdb.Env) {
		if te.Name == "postgres/pq" {
			t.Skip("lib/pq: the identity does not depend on the driver")
		}
		x := newTwoTransports(t, te)
		ctx := context.Background()
		raw := grpcConn(t, x.grpcAddr)

		// grpc-go, answer lost after commit; then the kit's connect client.
		for _, p := range protocols {
			key, ref := "g2c-"+p, "g2c-"+p
			x.lose = true
			_, err := raw.Deposit(grpcCtx(ctx, "alice", key), grpcDeposit(ref, 5))
			x.lose = false
			if status.Code(err) != codes.Unavailable || x.rows(t, ref) != 1 {
				t.Fatalf("%s: the lost answer: %v, %d rows", p, err, x.rows(t, ref))
			}
			kit, err := connectint.NewClient(catalog(t), policy.OwnerApplication)
			if err != nil {
				t.Fatal(err)
			}
			c := depositClient(x.connectURL, x.h1, x.h2, p, kit.ClientOptions()...)
			resp, err := c.CallUnary(connectint.WithKey(ctx, key), request("alice", "", ref, 5))
			if err != nil {
				t.Fatalf("%s: retry through connect: %v", p, err)
			}
			if !replayed(resp.Trailer()) || resp.Msg.GetReference() != ref || x.rows(t, ref) != 1 || kit.Stats().Replayed != 1 {
				t.Fatalf("%s: %v, trailer %v, %d rows, client %+v: want a replay of the gRPC call", p, resp.Msg, resp.Trailer(), x.rows(t, ref), kit.Stats())
			}
			// A resolve through connect finds the same answer.
			again, err := connectint.Resolve(ctx, depositClient(x.connectURL, x.h1, x.h2, p).CallUnary, key, request("alice", "", "", 0))
			if err != nil || !proto.Equal(again.Msg, resp.Msg) {
				t.Fatalf("%s: resolve %v, %v", p, again, err)
			}
		}

		// connect first; then grpc-go.
		first, err := x.connectClient("connect").CallUnary(ctx, request("alice", "c2g", "c2g", 6))
		if err != nil {
			t.Fatal(err)
		}
		var trl metadata.MD
		got, err := raw.Deposit(grpcCtx(ctx, "alice", "c2g"), grpcDeposit("c2g", 6), grpc.Trailer(&trl))
		if err != nil || !proto.Equal(got, first.Msg) || len(trl.Get(grpcint.ReplayedHeader)) != 1 || x.rows(t, "c2g") != 1 {
			t.Fatalf("grpc-go after connect: %v, %v, trailer %v, %d rows; want %v replayed", got, err, trl, x.rows(t, "c2g"), first.Msg)
		}

		// A final error recorded through gRPC replays through connect, and
		// the other way round.
		_, gerr := raw.Deposit(grpcCtx(ctx, "alice", "bad-g"), grpcDeposit("bad-g", 0))
		_, cerr := x.connectClient("grpc").CallUnary(ctx, request("alice", "bad-g", "bad-g", 0))
		var ce *connect.Error
		if !errors.As(cerr, &ce) || int(ce.Code()) != int(status.Code(gerr)) || ce.Message() != status.Convert(gerr).Message() || !replayed(ce.Meta()) {
			t.Fatalf("final error: gRPC %v, connect %v", gerr, cerr)
		}
		_, cerr = x.connectClient("connect").CallUnary(ctx, request("alice", "bad-c", "bad-c", 0))
		recorded := gerr
		_, gerr = raw.Deposit(grpcCtx(ctx, "alice", "bad-c"), grpcDeposit("bad-c", 0), grpc.Trailer(&trl))
		if !errors.As(cerr, &ce) || int(ce.Code()) != int(status.Code(gerr)) || ce.Message() != status.Convert(gerr).Message() || len(trl.Get(grpcint.ReplayedHeader)) != 1 {
			t.Fatalf("final error: connect %v, gRPC %v (trailer %v)", cerr, gerr, trl)
		}
		// Through the kit's clients the replayed final error keeps its
		// code, and its message gains the call's attempts and decision
		// (docs/connect.md, "One ledger, every transport").
		const suffix = " (after 1 attempt: code-not-retryable)"
		kc, err := connectint.NewClient(catalog(t), policy.OwnerApplication)
		if err != nil {
			t.Fatal(err)
		}
		_, kerr := depositClient(x.connectURL, x.h1, x.h2, "connect", kc.ClientOptions()...).CallUnary(ctx, request("alice", "bad-g", "bad-g", 0))
		if !errors.As(kerr, &ce) || int(ce.Code()) != int(status.Code(recorded)) || ce.Message() != status.Convert(recorded).Message()+suffix {
			t.Fatalf("final error recorded through gRPC, replayed to the kit's connect client: %v; want %v with %q", kerr, recorded, suffix)
		}
		gk, err := grpcint.NewClient(catalog(t), policy.OwnerApplication)
		if err != nil {
			t.Fatal(err)
		}
		_, kerr = grpcConn(t, x.grpcAddr, grpc.WithUnaryInterceptor(gk.UnaryClientInterceptor())).Deposit(grpcCtx(ctx, "alice", "bad-c"), grpcDeposit("bad-c", 0))
		if !errors.As(cerr, &ce) || int(status.Code(kerr)) != int(ce.Code()) || status.Convert(kerr).Message() != ce.Message()+suffix {
			t.Fatalf("final error recorded through connect, replayed to the kit's gRPC client: %v; want %v with %q", kerr, cerr, suffix)
		}

		// grpc-go talking to the connect server reads its reasons.
		onConnect := grpcConn(t, x.connectURL[len("http://"):])
		if _, err := onConnect.Deposit(grpcCtx(ctx, "alice", "c2g"), grpcDeposit("c2g", 7)); grpcint.ReasonOf(err) != keyed.KeyReused.Row().Reason {
			t.Fatalf("grpc-go on the connect server, key reused: %v (reason %q)", err, grpcint.ReasonOf(err))
		}
		if s, g := x.connectSrv.Stats(), x.grpcSrv.Stats(); s.Replayed == 0 || g.Replayed == 0 {
			t.Errorf("connect %+v, gRPC %+v: both replayed", s, g)
		}
	})
}

func (x *twoTransports) connectClient(protocol string) *connect.Client[walletpb.DepositRequest, walletpb.DepositReply] {
	return depositClient(x.connectURL, x.h1, x.h2, protocol)
}
