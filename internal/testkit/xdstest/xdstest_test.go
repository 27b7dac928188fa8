package xdstest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
)

const getDeposit = "/opledger.testkit.wallet.v1.Wallet/GetDeposit"

// walletServer is a plain Wallet server: GetDeposit echoes the id.
type walletServer struct{}

func (walletServer) Deposit(context.Context, *walletpb.DepositRequest) (*walletpb.DepositReply, error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

func (walletServer) GetDeposit(_ context.Context, req *walletpb.GetDepositRequest) (*walletpb.DepositReply, error) {
	return &walletpb.DepositReply{DepositId: req.GetDepositId()}, nil
}

func backend(t *testing.T, rec *xdstest.Recorder) string {
	return xdstest.Backend(t, func(s *grpc.Server) { walletpb.RegisterWalletServer(s, walletServer{}) },
		grpc.UnaryInterceptor(rec.Interceptor()))
}

// TestRetriesAsTheControlPlaneSays: a route whose retry_policy retries
// UNAVAILABLE 3 times makes grpc-go (its own xDS resolver and balancers)
// send up to 4 attempts, numbered in grpc-previous-rpc-attempts; with
// grpc.WithDisableRetry the policy is not used (gRFC A44).
func TestRetriesAsTheControlPlaneSays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	rec := xdstest.NewRecorder(3, codes.Unavailable)
	addr := backend(t, rec)
	cp := xdstest.Start(t)
	svc := xdstest.Service{Name: "wallet", Endpoints: []string{addr},
		Routes: []*routev3.Route{{
			Name:  "all",
			Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				RetryPolicy: xdstest.RetryPolicy(3, "unavailable"),
			}},
		}}}
	if err := cp.Set(ctx, svc); err != nil {
		t.Fatal(err)
	}
	client := walletpb.NewWalletClient(cp.Dial(t, "wallet"))
	reply, err := client.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: 7}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetDeposit: %v (attempts %q, NACKs %q)", err, rec.Attempts(getDeposit), cp.NACKs())
	}
	if reply.GetDepositId() != 7 {
		t.Fatalf("reply %v", reply)
	}
	if got, want := rec.Attempts(getDeposit), []string{"", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("grpc-previous-rpc-attempts per attempt = %q, want %q", got, want)
	}

	// A server that always fails: 4 attempts, then UNAVAILABLE.
	rec.Reset(1 << 30)
	_, err = client.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: 8})
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getDeposit)) != 4 {
		t.Fatalf("always failing: err %v after %d attempts, want UNAVAILABLE after 4", err, len(rec.Attempts(getDeposit)))
	}

	// grpc.WithDisableRetry: the xDS retry policy is validated but not used.
	rec.Reset(1 << 30)
	off := walletpb.NewWalletClient(cp.Dial(t, "wallet", grpc.WithDisableRetry()))
	_, err = off.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: 9}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getDeposit)) != 1 {
		t.Fatalf("WithDisableRetry: err %v after %d attempts, want UNAVAILABLE after 1", err, len(rec.Attempts(getDeposit)))
	}
	if n := cp.NACKs(); len(n) != 0 {
		t.Fatalf("the client rejected resources: %q", n)
	}
}

// TestGeneratedServiceConfigIsReplaced: for an xds:/// channel grpc-go takes
// the service config from the xDS resolver. A retry policy given with
// grpc.WithDefaultServiceConfig is not used (one attempt), and with
// grpc.WithDisableServiceConfig as well (what grpcint's DialOptions add for
// the service-config owner) the channel has no addresses at all.
func TestGeneratedServiceConfigIsReplaced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	rec := xdstest.NewRecorder(1<<30, codes.Unavailable)
	addr := backend(t, rec)
	cp := xdstest.Start(t)
	if err := cp.Set(ctx, xdstest.Service{Name: "wallet", Endpoints: []string{addr}}); err != nil {
		t.Fatal(err)
	}
	generated := `{"methodConfig":[{"name":[{"service":"opledger.testkit.wallet.v1.Wallet","method":"GetDeposit"}],` +
		`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

	c := walletpb.NewWalletClient(cp.Dial(t, "wallet", grpc.WithDefaultServiceConfig(generated)))
	_, err := c.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: 1}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getDeposit)) != 1 {
		t.Fatalf("WithDefaultServiceConfig: err %v after %d attempts, want UNAVAILABLE after 1 (the generated retry policy replaced)", err, len(rec.Attempts(getDeposit)))
	}

	rec.Reset(1 << 30)
	c = walletpb.NewWalletClient(cp.Dial(t, "wallet", grpc.WithDisableServiceConfig(), grpc.WithDefaultServiceConfig(generated)))
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = c.GetDeposit(short, &walletpb.GetDepositRequest{DepositId: 2})
	if err == nil || len(rec.Attempts(getDeposit)) != 0 {
		t.Fatalf("WithDisableServiceConfig: err %v after %d attempts, want a failure before any attempt", err, len(rec.Attempts(getDeposit)))
	}
}
