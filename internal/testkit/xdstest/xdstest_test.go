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

	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
)

const getTransfer = "/opledger.examples.payments.v1.Payments/GetTransfer"

// payments is a plain Payments server: GetTransfer echoes the id.
type payments struct{}

func (payments) Transfer(context.Context, *paymentspb.TransferRequest) (*paymentspb.TransferReply, error) {
	return nil, status.Error(codes.Unimplemented, "not in this test")
}

func (payments) GetTransfer(_ context.Context, req *paymentspb.GetTransferRequest) (*paymentspb.TransferReply, error) {
	return &paymentspb.TransferReply{TransferId: req.GetTransferId()}, nil
}

func backend(t *testing.T, rec *xdstest.Recorder) string {
	return xdstest.Backend(t, func(s *grpc.Server) { paymentspb.RegisterPaymentsServer(s, payments{}) },
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
	svc := xdstest.Service{Name: "payments", Endpoints: []string{addr},
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
	client := paymentspb.NewPaymentsClient(cp.Dial(t, "payments"))
	reply, err := client.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 7}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetTransfer: %v (attempts %q, NACKs %q)", err, rec.Attempts(getTransfer), cp.NACKs())
	}
	if reply.GetTransferId() != 7 {
		t.Fatalf("reply %v", reply)
	}
	if got, want := rec.Attempts(getTransfer), []string{"", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("grpc-previous-rpc-attempts per attempt = %q, want %q", got, want)
	}

	// A server that always fails: 4 attempts, then UNAVAILABLE.
	rec.Reset(1 << 30)
	_, err = client.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 8})
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getTransfer)) != 4 {
		t.Fatalf("always failing: err %v after %d attempts, want UNAVAILABLE after 4", err, len(rec.Attempts(getTransfer)))
	}

	// grpc.WithDisableRetry: the xDS retry policy is validated but not used.
	rec.Reset(1 << 30)
	off := paymentspb.NewPaymentsClient(cp.Dial(t, "payments", grpc.WithDisableRetry()))
	_, err = off.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 9}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getTransfer)) != 1 {
		t.Fatalf("WithDisableRetry: err %v after %d attempts, want UNAVAILABLE after 1", err, len(rec.Attempts(getTransfer)))
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
	if err := cp.Set(ctx, xdstest.Service{Name: "payments", Endpoints: []string{addr}}); err != nil {
		t.Fatal(err)
	}
	generated := `{"methodConfig":[{"name":[{"service":"opledger.examples.payments.v1.Payments","method":"GetTransfer"}],` +
		`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`

	c := paymentspb.NewPaymentsClient(cp.Dial(t, "payments", grpc.WithDefaultServiceConfig(generated)))
	_, err := c.GetTransfer(ctx, &paymentspb.GetTransferRequest{TransferId: 1}, grpc.WaitForReady(true))
	if status.Code(err) != codes.Unavailable || len(rec.Attempts(getTransfer)) != 1 {
		t.Fatalf("WithDefaultServiceConfig: err %v after %d attempts, want UNAVAILABLE after 1 (the generated retry policy replaced)", err, len(rec.Attempts(getTransfer)))
	}

	rec.Reset(1 << 30)
	c = paymentspb.NewPaymentsClient(cp.Dial(t, "payments", grpc.WithDisableServiceConfig(), grpc.WithDefaultServiceConfig(generated)))
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = c.GetTransfer(short, &paymentspb.GetTransferRequest{TransferId: 2})
	if err == nil || len(rec.Attempts(getTransfer)) != 0 {
		t.Fatalf("WithDisableServiceConfig: err %v after %d attempts, want a failure before any attempt", err, len(rec.Attempts(getTransfer)))
	}
}
