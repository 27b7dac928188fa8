package grpcint_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

const callerHeader = "x-test-caller"

type env struct {
	server *grpcint.Server
	conn   *grpc.ClientConn // no kit client interceptor: raw calls
	pc     paymentspb.PaymentsClient
	addr   string
	gate   *gate
}

// gate blocks Transfer calls whose reference is "block" until released.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gate) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*paymentspb.TransferRequest); ok && r.GetReference() == "block" {
			g.entered <- struct{}{}
			<-g.release
		}
		return handler(ctx, req)
	}
}

func newEnv(t *testing.T, tg testdb.Target) *env {
	t.Helper()
	db := tg.Open(t, 8)
	table := testdb.NewTable(t, db, tg.Dialect)
	biz := table + "_transfers"
	ctx := context.Background()
	if err := payments.CreateTable(ctx, db, tg.Dialect, biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = payments.DropTable(context.Background(), db, tg.Dialect, biz) })
	store, err := ledger.New(tg.Dialect, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := payments.NewService(db, tg.Dialect, biz)
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcint.NewServer(grpcint.WithDB(db), grpcint.WithLedger(store), grpcint.WithCatalog(cat),
		grpcint.WithCaller(grpcint.CallerFromTrustedHeader(callerHeader)),
		grpcint.WithTxOptions(txmiddleware.WithLockWait(300*time.Millisecond)),
		grpcint.WithInProgressPushback(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor(), g.interceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return &env{server: s, conn: conn, pc: paymentspb.NewPaymentsClient(conn), addr: lis.Addr().String(), gate: g}
}

func as(ctx context.Context, caller, key string) context.Context {
	if caller != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, callerHeader, caller)
	}
	if key != "" {
		ctx = grpcint.WithKey(ctx, key)
	}
	return ctx
}

func transfer(ref string, amount int64) *paymentspb.TransferRequest {
	return &paymentspb.TransferRequest{FromAccount: "a", ToAccount: "b", AmountCents: amount, Reference: ref}
}

func wantStatus(t *testing.T, err error, code codes.Code, reason grpcint.Reason) *status.Status {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("code %s (%v), want %s", st.Code(), err, code)
	}
	if got := grpcint.ReasonOf(err); got != reason {
		t.Fatalf("reason %q, want %q", got, reason)
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() != grpcint.ErrorDomain {
			t.Errorf("ErrorInfo domain %q", ei.GetDomain())
		}
	}
	return st
}

func appClient(t *testing.T, addr string, opts ...grpcint.ClientOption) (*grpcint.Client, paymentspb.PaymentsClient) {
	t.Helper()
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	c, err := grpcint.NewClient(cat, policy.OwnerApplication, opts...)
	if err != nil {
		t.Fatal(err)
	}
	dopts, err := c.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, paymentspb.NewPaymentsClient(conn)
}
