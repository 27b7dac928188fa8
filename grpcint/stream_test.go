package grpcint_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// feed is a server-streaming test service. Its first failBefore calls
// fail before sending anything; when failAfter is set, a call sends one
// message and then fails.
type feed struct {
	calls      atomic.Int32
	failBefore int32
	failAfter  bool
}

const watchMethod = "/opledger.test.Feed/Watch"
const uploadMethod = "/opledger.test.Feed/Upload"

func (f *feed) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "opledger.test.Feed",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "Watch", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				n := f.calls.Add(1)
				var req walletpb.GetDepositRequest
				if err := ss.RecvMsg(&req); err != nil {
					return err
				}
				if n <= f.failBefore {
					return status.Error(codes.Unavailable, "not yet")
				}
				for i := range 2 {
					if err := ss.SendMsg(&walletpb.DepositReply{DepositId: req.GetDepositId() + int64(i)}); err != nil {
						return err
					}
					if f.failAfter {
						return status.Error(codes.Unavailable, "broke mid-stream")
					}
				}
				return nil
			}},
			{StreamName: "Upload", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				f.calls.Add(1)
				return status.Error(codes.Unavailable, "never")
			}},
		},
	}
}

func startFeed(t *testing.T, f *feed) (*grpcint.Client, *grpc.ClientConn) {
	t.Helper()
	srv := grpc.NewServer()
	srv.RegisterService(f.desc(), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cat, err := policy.NewCatalog(
		policy.MethodPolicy{FullMethod: watchMethod, Kind: policy.KindNoSideEffects, Shape: policy.ShapeServerStream},
		policy.MethodPolicy{FullMethod: uploadMethod, Kind: policy.KindIdempotent, Shape: policy.ShapeClientStream},
	)
	if err != nil {
		t.Fatal(err)
	}
	c, err := grpcint.NewClient(cat, policy.OwnerApplication, keyed.WithMaxAttempts(4),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, conn
}

func watch(t *testing.T, conn *grpc.ClientConn) ([]int64, error) {
	t.Helper()
	cs, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, watchMethod)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(&walletpb.GetDepositRequest{DepositId: 10}); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	var got []int64
	for {
		var m walletpb.DepositReply
		err := cs.RecvMsg(&m)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, m.GetDepositId())
	}
}

func TestServerStreamRetriedOnlyBeforeFirstMessage(t *testing.T) {
	t.Run("fails before any message", func(t *testing.T) {
		f := &feed{failBefore: 2}
		_, conn := startFeed(t, f)
		got, err := watch(t, conn)
		if err != nil || len(got) != 2 || got[0] != 10 || got[1] != 11 {
			t.Fatalf("got %v, %v; want [10 11]", got, err)
		}
		if n := f.calls.Load(); n != 3 {
			t.Errorf("%d calls, want 3", n)
		}
	})
	t.Run("fails after a message", func(t *testing.T) {
		f := &feed{failAfter: true}
		_, conn := startFeed(t, f)
		got, err := watch(t, conn)
		if status.Code(err) != codes.Unavailable || len(got) != 1 {
			t.Fatalf("got %v, %v; want one message then UNAVAILABLE", got, err)
		}
		if n := f.calls.Load(); n != 1 {
			t.Errorf("%d calls, want 1: a stream that delivered a message is never retried", n)
		}
	})
	t.Run("client stream never retried", func(t *testing.T) {
		f := &feed{}
		_, conn := startFeed(t, f)
		cs, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true}, uploadMethod)
		if err != nil {
			t.Fatal(err)
		}
		_ = cs.SendMsg(&walletpb.GetDepositRequest{})
		_ = cs.CloseSend()
		var m walletpb.DepositReply
		if err := cs.RecvMsg(&m); status.Code(err) != codes.Unavailable {
			t.Fatalf("err %v", err)
		}
		if n := f.calls.Load(); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
	})
}
