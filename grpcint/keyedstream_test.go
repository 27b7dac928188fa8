package grpcint_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// streamedWallet is a Wallet service whose keyed Deposit is
// registered as a server stream, and a GetDeposit renamed: a server that
// does not match the catalog.
type streamedWallet struct{ ran atomic.Int32 }

func (p *streamedWallet) desc(renamed bool) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: walletpb.ServiceName, HandlerType: (*any)(nil), Metadata: "wallet.proto"}
	if renamed {
		d.Methods = []grpc.MethodDesc{{MethodName: "DepositV2", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			p.ran.Add(1)
			return &walletpb.DepositReply{}, dec(new(walletpb.DepositRequest))
		}}}
		return d
	}
	d.Streams = []grpc.StreamDesc{{StreamName: "Deposit", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		p.ran.Add(1)
		var req walletpb.DepositRequest
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		return ss.SendMsg(&walletpb.DepositReply{DepositId: 1, Reference: req.GetReference()})
	}}}
	return d
}

// kitServer is a grpcint.Server for the Wallet catalog on a fresh
// SQLite ledger.
func kitServer(t *testing.T) *grpcint.Server {
	t.Helper()
	e, _, _ := sqliteEnv(t, nil, nil)
	return e.server
}

// testKeyedStreamRefused: a keyed method served as a stream is refused
// with KEYED_METHOD_SERVED_AS_STREAM, through a raw connection and through
// the kit's client, and its handler never runs.
func testKeyedStreamRefused(t *testing.T) {
	kit := kitServer(t)
	svc := &streamedWallet{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(kit.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(kit.StreamServerInterceptor()))
	srv.RegisterService(svc.desc(false), svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	ctx := context.Background()

	_, pc := appClient(t, lis.Addr().String(), fastClient()...)
	_, err = pc.Deposit(as(ctx, "alice", "k-stream"), deposit("r", 1))
	wantStatus(t, err, codes.Unimplemented, keyed.KeyedStream.Row().Reason)
	ci := wantCallInfo(t, err, keyed.KeyedStream.Row().Reason, policy.DoNotRetry)
	if ci.Attempts != 1 {
		t.Errorf("CallInfo %+v: a refusal of the server's configuration is not retried", ci)
	}
	// Without a key, as a client that knows nothing of the kit calls it.
	_, raw := ownerClient(t, lis.Addr().String(), policy.OwnerNone)
	_, err = raw.Deposit(as(ctx, "alice", ""), deposit("r", 1))
	wantStatus(t, err, codes.Unimplemented, keyed.KeyedStream.Row().Reason)
	if n := svc.ran.Load(); n != 0 {
		t.Errorf("the handler of a keyed method served as a stream ran %d times", n)
	}
	if st := kit.Stats(); st.Refused != 2 {
		t.Errorf("server stats %+v: want 2 refusals", st)
	}
}

// TestCheckRegistered: the start-up check names a keyed method registered
// as a stream and one missing from its registered service, and passes the
// example's own server.
func TestCheckRegistered(t *testing.T) {
	kit := kitServer(t)
	for _, c := range []struct {
		name    string
		renamed bool
		want    string
	}{
		{"keyed method registered as a stream", false, "keyed method " + walletpb.DepositMethod + " is registered as a server-stream method"},
		{"keyed method renamed", true, "keyed method " + walletpb.DepositMethod + " is not a method of the registered service " + walletpb.ServiceName},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := &streamedWallet{}
			srv := grpc.NewServer()
			srv.RegisterService(svc.desc(c.renamed), svc)
			err := kit.CheckRegistered(srv)
			if !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want ErrInvalidConfig saying %q", err, c.want)
			}
		})
	}
	e := newEnv(t, testdb.Targets()[0])
	srv := grpc.NewServer()
	walletpb.RegisterWalletServer(srv, &earlierCommitted{})
	if err := e.server.CheckRegistered(srv); err != nil {
		t.Errorf("the example's server: %v", err)
	}
	if err := kit.CheckRegistered(grpc.NewServer()); err != nil {
		t.Errorf("a server without the catalog's services: %v (they may be served elsewhere)", err)
	}
	if err := kit.CheckRegistered(nil); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("nil server: %v", err)
	}
}
