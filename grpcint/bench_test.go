package grpcint_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// BenchmarkClientInterceptor is the application-owned interceptor's own
// cost for a call that succeeds at once: the key, the budget deposit, the
// evidence, the trailer. The invoker returns immediately.
func BenchmarkClientInterceptor(b *testing.B) {
	cat, err := wallet.Catalog()
	if err != nil {
		b.Fatal(err)
	}
	c, err := grpcint.NewClient(cat, policy.OwnerApplication)
	if err != nil {
		b.Fatal(err)
	}
	ic := c.UnaryClientInterceptor()
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	req, reply := &walletpb.DepositRequest{}, &walletpb.DepositReply{}
	for _, m := range []struct{ name, method string }{{"keyed", walletpb.DepositMethod}, {"no-side-effects", walletpb.GetDepositMethod}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if err := ic(ctx, m.method, req, reply, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkServerPreamble is the keyed server path's own CPU besides the
// database, part by part: request fingerprint, identity, caller; and the
// interceptor's cost for a method that is not keyed.
func BenchmarkServerPreamble(b *testing.B) {
	req := &walletpb.DepositRequest{Account: "acct-1", Amount: 12345, Reference: "ref-0001"}
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := grpcint.RequestFingerprint(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("identity", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := ledger.NewIdentity("header:bench", walletpb.DepositMethod, "K7XQ2M4PLD3RTY6WZ5NB8VC9HJ"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("caller-header", func(b *testing.B) {
		f := grpcint.CallerFromTrustedHeader("x-caller")
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-caller", "bench"))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, ok := f(ctx); !ok {
				b.Fatal("no caller")
			}
		}
	})
	b.Run("pass-through", func(b *testing.B) {
		cat, _ := wallet.Catalog()
		store, _ := ledger.New(sqlite.New())
		db, err := sql.Open("sqlite3", sqlite.DSN(filepath.Join(b.TempDir(), "unused.db"), 0)) // never connects
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		s, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromTrustedHeader("x-caller"))
		if err != nil {
			b.Fatal(err)
		}
		ic := s.UnaryServerInterceptor()
		info := &grpc.UnaryServerInfo{FullMethod: walletpb.GetDepositMethod}
		h := func(ctx context.Context, req any) (any, error) { return req, nil }
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := ic(ctx, req, info, h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
