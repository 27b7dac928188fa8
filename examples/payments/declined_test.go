package payments_test

import (
	"context"
	"database/sql"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// serveKeyed serves one service behind tokens' authentication and the
// kit's server interceptor on a loopback port until the test ends.
func serveKeyed(t *testing.T, db *sql.DB, d dialects.Dialect, table string, tokens *payments.Tokens, register func(*grpc.Server)) (*grpcint.Server, string) {
	t.Helper()
	store, err := ledger.New(d, ledger.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromPrincipal(payments.Principal))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tokens.UnaryServerInterceptor(), kit.UnaryServerInterceptor()))
	register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(served) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	return kit, lis.Addr().String()
}

func countRows(t *testing.T, db *sql.DB, d dialects.Dialect, table, where string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + d.QuoteIdent(table) + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChainDeclined: a transfer the fraud check declines is the
// transfer's final answer, FAILED_PRECONDITION, recorded by both
// services: the same key sent again gets the same error as a replay from
// the payments service, which does not call the fraud check again; the
// fraud service holds one declined check and the payments service no
// transfer.
func TestChainDeclined(t *testing.T) {
	for _, tg := range testdb.Targets() {
		if tg.Family() != "sqlite" && tg.Name != "postgres/pq" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			testdb.Parallel(t, tg.Family(), 8)
			ctx := context.Background()
			d := tg.Dialect
			fdb, pdb := tg.Open(t, 4), tg.Open(t, 4)
			ftable, ptable := testdb.NewTable(t, fdb, d), testdb.NewTable(t, pdb, d)
			checks, transfers := ftable+"_checks", ptable+"_transfers"
			if err := payments.CreateFraudTable(ctx, fdb, d, checks); err != nil {
				t.Fatal(err)
			}
			if err := payments.CreateTable(ctx, pdb, d, transfers); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = payments.DropTable(context.Background(), fdb, d, checks)
				_ = payments.DropTable(context.Background(), pdb, d, transfers)
			})
			fsvc, err := payments.NewFraudService(d, checks)
			if err != nil {
				t.Fatal(err)
			}
			ftokens, ptokens := payments.NewTokens(), payments.NewTokens()
			ftoken, err := ftokens.Issue(payments.FraudCaller)
			if err != nil {
				t.Fatal(err)
			}
			ptoken, err := ptokens.Issue("shop")
			if err != nil {
				t.Fatal(err)
			}
			fkit, faddr := serveKeyed(t, fdb, d, ftable, ftokens, func(s *grpc.Server) { paymentspb.RegisterFraudServer(s, fsvc) })
			fconn, _, err := payments.DialFraud(faddr, nil, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(payments.BearerToken(ftoken)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fconn.Close() })
			svc, err := payments.NewService(pdb, d, transfers, payments.WithFraudCheck(paymentspb.NewFraudClient(fconn)))
			if err != nil {
				t.Fatal(err)
			}
			pkit, paddr := serveKeyed(t, pdb, d, ptable, ptokens, func(s *grpc.Server) { paymentspb.RegisterPaymentsServer(s, svc) })
			conn, _, err := payments.Dial(paddr, policy.OwnerApplication, nil, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(payments.BearerToken(ptoken)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			pc := paymentspb.NewPaymentsClient(conn)

			req := &paymentspb.TransferRequest{Reference: "declined-1", FromAccount: "a", ToAccount: "b",
				AmountCents: payments.FraudLimitCents + 1}
			cctx := grpcint.WithKey(ctx, "key-declined-1")
			var msgs []string
			for i := range 2 {
				_, err := pc.Transfer(cctx, req)
				if status.Code(err) != codes.FailedPrecondition {
					t.Fatalf("send %d: %v, want FAILED_PRECONDITION", i+1, err)
				}
				msgs = append(msgs, status.Convert(err).Message())
			}
			if msgs[0] != msgs[1] {
				t.Errorf("the replay's message %q differs from the first answer's %q", msgs[1], msgs[0])
			}
			if ps := pkit.Stats(); ps.Executed != 1 || ps.Replayed != 1 {
				t.Errorf("payments service: %d executed, %d replayed; want 1 and 1", ps.Executed, ps.Replayed)
			}
			if fs := fkit.Stats(); fs.Executed != 1 || fs.Replayed != 0 {
				t.Errorf("fraud service: %d executed, %d replayed; want 1 and 0 (the replay of the transfer must not call it)", fs.Executed, fs.Replayed)
			}
			if n := countRows(t, fdb, d, checks, " WHERE approved = 0"); n != 1 {
				t.Errorf("%d declined checks, want 1", n)
			}
			if n := countRows(t, fdb, d, checks, ""); n != 1 {
				t.Errorf("%d checks in all, want 1", n)
			}
			if n := countRows(t, pdb, d, transfers, ""); n != 0 {
				t.Errorf("%d transfers recorded for a declined transfer, want 0", n)
			}
		})
	}
}
