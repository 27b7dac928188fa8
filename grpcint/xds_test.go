package grpcint_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/keyedcore"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/internal/testkit/xdstest"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/policy"
)

// readsOnly answers GetDeposit; the recorder in front of it fails every
// attempt.
type readsOnly struct{ walletpb.WalletServer }

func (readsOnly) GetDeposit(_ context.Context, req *walletpb.GetDepositRequest) (*walletpb.DepositReply, error) {
	return &walletpb.DepositReply{DepositId: req.GetDepositId()}, nil
}

// declarations records the opledger-retry-owner header of every attempt.
type declarations struct {
	mu  sync.Mutex
	got []string
}

func (d *declarations) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		d.mu.Lock()
		d.got = append(d.got, md.Get(keyedcore.RetryOwnerHeader)...)
		d.mu.Unlock()
		return handler(ctx, req)
	}
}

func (d *declarations) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.got
	d.got = nil
	return out
}

// TestDialOptionsOnXDS: on an xds:/// channel, DialOptions leave the
// control plane's retry policy on for the owner mesh (it is the mesh
// layer: 4 attempts where the route retries UNAVAILABLE 3 times) and
// switch it off for the other owners (the application's loop makes its own
// attempts, each a single one for grpc-go); without WithTarget the owner
// mesh keeps the old, safe behaviour (1 attempt); the owner service-config
// with an xds: target is a configuration error.
func TestDialOptionsOnXDS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
	defer cancel()
	rec := xdstest.NewRecorder(1<<30, codes.Unavailable)
	decl := &declarations{}
	addr := xdstest.Backend(t, func(s *grpc.Server) { walletpb.RegisterWalletServer(s, readsOnly{}) },
		grpc.ChainUnaryInterceptor(decl.interceptor(), rec.Interceptor()))
	cp := xdstest.Start(t)
	if err := cp.Set(ctx, xdstest.Service{Name: "wallet", Endpoints: []string{addr}, Routes: []*routev3.Route{{
		Name:  "all",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			RetryPolicy: xdstest.RetryPolicy(3, "unavailable"),
		}},
	}}}); err != nil {
		t.Fatal(err)
	}
	const target = "xds:///wallet"
	for _, tc := range []struct {
		name     string
		owner    policy.RetryOwner
		opts     []keyed.ClientOption
		attempts []string // grpc-previous-rpc-attempts of each attempt
		declared string
	}{
		{"mesh", policy.OwnerMesh, []keyed.ClientOption{grpcint.WithTarget(target)}, []string{"", "1", "2", "3"}, "mesh;xds"},
		{"mesh without WithTarget", policy.OwnerMesh, nil, []string{""}, "mesh;xds"},
		{"none", policy.OwnerNone, []keyed.ClientOption{grpcint.WithTarget(target)}, []string{""}, "none;xds"},
		{"application", policy.OwnerApplication, []keyed.ClientOption{grpcint.WithTarget(target), keyed.WithMaxAttempts(2),
			keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond})}, []string{"", ""}, "application;xds"},
	} {
		rec.Reset(1 << 30)
		decl.take()
		c := newKitClient(t, tc.owner, tc.opts...)
		dopts, err := c.DialOptions()
		if err != nil {
			t.Fatal(err)
		}
		pc := walletpb.NewWalletClient(cp.Dial(t, "wallet", dopts...))
		_, err = pc.GetDeposit(ctx, &walletpb.GetDepositRequest{DepositId: 1}, grpc.WaitForReady(true))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: %v, want UNAVAILABLE (NACKs %q)", tc.name, err, cp.NACKs())
		}
		if got := rec.Attempts(walletpb.GetDepositMethod); !slices.Equal(got, tc.attempts) {
			t.Errorf("%s: grpc-previous-rpc-attempts per attempt %q, want %q", tc.name, got, tc.attempts)
		}
		for _, d := range decl.take() {
			if d != tc.declared {
				t.Errorf("%s: declared %q, want %q", tc.name, d, tc.declared)
			}
		}
	}
	if n := cp.NACKs(); len(n) != 0 {
		t.Fatalf("the client rejected resources: %q", n)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcint.NewClient(cat, policy.OwnerServiceConfig, grpcint.WithTarget(target)); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Fatalf("service-config on %s: %v, want ErrInvalidConfig", target, err)
	}
	if _, err := grpcint.NewClient(cat, policy.OwnerServiceConfig, grpcint.WithTarget("dns:///wallet")); err != nil {
		t.Fatalf("service-config on dns: %v", err)
	}
}
