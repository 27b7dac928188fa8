package payments_test

import (
	"context"
	"log"
	"net"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"

	"github.com/opledger/opledger/dialects/postgres"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
)

// ExamplePgxTransactions serves the payments service with its keyed
// Transfer in pipelined pgx transactions: the kit's server on
// payments.PgxTransactions (pgxledger.Transactions), the handler writing
// through the pgx.Tx of its claim (pgxledger.TxFromContext), a keyed call
// at the bare transaction's round trips.
func ExamplePgxTransactions() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // the migrations, and GetTransfer's reads
	defer db.Close()
	m, err := migrations.New(db, postgres.New())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if err := payments.CreateTable(ctx, db, postgres.New(), payments.DefaultTable); err != nil {
		log.Fatal(err)
	}

	txs, err := payments.PgxTransactions(pool, ledger.DefaultTable)
	if err != nil {
		log.Fatal(err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		log.Fatal(err)
	}
	kit, err := grpcint.NewServerFor(txs, cat, grpcint.CallerFromPrincipal(payments.Principal))
	if err != nil {
		log.Fatal(err)
	}
	svc, err := payments.NewService(db, postgres.New(), payments.DefaultTable)
	if err != nil {
		log.Fatal(err)
	}
	tokens := payments.NewTokens()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tokens.UnaryServerInterceptor(), kit.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(kit.StreamServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	if err := kit.CheckRegistered(srv); err != nil {
		log.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
}
