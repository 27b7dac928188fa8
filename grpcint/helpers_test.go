package grpcint_test

import (
	"context"
	"database/sql"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

const callerHeader = "x-test-caller"

type env struct {
	server *grpcint.Server
	conn   *grpc.ClientConn // no kit client interceptor: raw calls
	pc     walletpb.WalletClient
	addr   string
	gate   *gate
	db     *sql.DB
	biz    string // the business table
}

// rows counts the deposits with reference ref in the business table.
func (e *env) rows(t *testing.T, ref string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM " + e.biz + " WHERE reference = '" + ref + "'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// gate blocks Deposit calls whose reference is "block" until released.
// Behind the kit's interceptor, it also runs the handler of a Deposit
// whose reference is "not-final" and then fails it with a status that is
// not final, and panics after the handler of one whose reference is
// "panic".
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gate) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*walletpb.DepositRequest); ok && r.GetReference() == "block" {
			g.entered <- struct{}{}
			<-g.release
		}
		if r, ok := req.(*walletpb.DepositRequest); ok && (r.GetReference() == "not-final" || r.GetReference() == "panic") {
			if _, err := handler(ctx, req); err != nil {
				return nil, err
			}
			if r.GetReference() == "panic" {
				panic("injected: handler panic")
			}
			return nil, status.Error(codes.Unavailable, "injected: not final")
		}
		return handler(ctx, req)
	}
}

// newEnv opens tg with fresh tables and serves the example on loopback,
// with a short lock wait and pushback so in-progress tests run quickly.
func newEnv(t *testing.T, tg testdb.Target) *env {
	t.Helper()
	return newEnvWith(t, tg)
}

// newEnvWith is newEnv with more server options.
func newEnvWith(t *testing.T, tg testdb.Target, opts ...keyed.ServerOption) *env {
	t.Helper()
	db := tg.Open(t, 8)
	table, biz := newTables(t, db, tg.Dialect)
	return serve(t, db, tg.Dialect, table, biz, append([]keyed.ServerOption{
		keyed.WithLockWait(300 * time.Millisecond),
		keyed.WithInProgressPushback(50 * time.Millisecond)}, opts...)...)
}

// newTables creates a ledger table and a deposits table in db, dropped
// when the test ends.
func newTables(t testing.TB, db *sql.DB, d dialects.Dialect) (table, biz string) {
	t.Helper()
	table = testdb.NewTable(t, db, d)
	biz = table + "_deposits"
	if err := wallet.CreateTable(context.Background(), db, d, biz); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wallet.DropTable(context.Background(), db, d, biz) })
	return table, biz
}

// serve runs the Wallet fixture service on db behind the kit's server
// interceptor (plus opts) on a loopback port, with a raw client
// connection; both stop when the test ends.
func serve(t *testing.T, db *sql.DB, d dialects.Dialect, table, biz string, opts ...keyed.ServerOption) *env {
	t.Helper()
	store, err := ledger.New(d, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return serveLedger(t, db, store, biz, nil, opts...)
}

// serveLedger is serve with a ledger of the test's own and, when not nil,
// a server interceptor in front of the kit's.
func serveLedger(t *testing.T, db *sql.DB, store ledger.Ledger, biz string, front grpc.UnaryServerInterceptor, opts ...keyed.ServerOption) *env {
	t.Helper()
	d := store.Dialect()
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	s, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader(callerHeader), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return serveKit(t, db, d, biz, s, front)
}

// serveKit serves the Wallet fixture service on db behind the kit's
// server s (and front, when not nil) on a loopback port, with a raw client
// connection; both stop when the test ends.
func serveKit(t *testing.T, db *sql.DB, d dialects.Dialect, biz string, s *grpcint.Server, front grpc.UnaryServerInterceptor) *env {
	t.Helper()
	svc, err := wallet.NewService(db, d, biz)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	chain := []grpc.UnaryServerInterceptor{s.UnaryServerInterceptor(), g.interceptor()}
	if front != nil {
		chain = append([]grpc.UnaryServerInterceptor{front}, chain...)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	walletpb.RegisterWalletServer(srv, svc)
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
	return &env{server: s, conn: conn, pc: walletpb.NewWalletClient(conn), addr: lis.Addr().String(), gate: g, db: db, biz: biz}
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

func deposit(ref string, amount int64) *walletpb.DepositRequest {
	return &walletpb.DepositRequest{Account: "a", Amount: amount, Reference: ref}
}

func wantStatus(t *testing.T, err error, code codes.Code, reason string) *status.Status {
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

func appClient(t *testing.T, addr string, opts ...keyed.ClientOption) (*grpcint.Client, walletpb.WalletClient) {
	t.Helper()
	return ownerClient(t, addr, policy.OwnerApplication, opts...)
}

// ownerClient is a kit client for a channel whose retries belong to owner.
func ownerClient(t *testing.T, addr string, owner policy.RetryOwner, opts ...keyed.ClientOption) (*grpcint.Client, walletpb.WalletClient) {
	t.Helper()
	return lossyClient(t, addr, owner, nil, opts...)
}
