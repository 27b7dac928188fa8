package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/lib/pq" // driver "postgres", for --driver pq
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/ledger"
)

// chaosReplicaCommand is the hidden subcommand `opledger chaos` starts N
// times: one server replica of the example payments service, as its own
// process. It is not in the usage text (no summary).
const chaosReplicaCommand = "chaos-replica"

func init() {
	extraCommands[chaosReplicaCommand] = command{"", runChaosReplica}
}

// runChaosReplica serves the payments service on a free loopback port,
// prints "listening ADDR" on stdout once it accepts calls, and serves
// until its standard input closes (the parent went away) or it is killed.
// With --die-after N it sends itself SIGKILL after the N-th successful
// Transfer committed and before its response is written: a crash between
// COMMIT and the answer.
func runChaosReplica(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(chaosReplicaCommand, stderr)
	dsn := fs.String("dsn", "", "the ledger database")
	table := fs.String("table", payments.DefaultTable, "the business table (created by the parent)")
	lockWait := fs.Duration("lock-wait", 2*time.Second, "the claim's lock-wait bound")
	dieAfter := fs.Int("die-after", 0, "SIGKILL itself after this many committed transfers, before the answer (0: never)")
	maxConns := fs.Int("max-conns", 16, "the connection pool's size")
	driver := fs.String("driver", "", "pq: open a postgres:// DSN with lib/pq instead of pgx")
	atCommit := fs.Bool("claim-at-commit", false, "claim Transfer at commit (grpcint.WithClaimAtCommit)")
	breakKeys := fs.Bool("break-keys", false, "replace every request's idempotency key with a fresh one (a broken service: the run must find duplicates)")
	caller := fs.String("caller", "", "the principal of the one client the replica accepts")
	tokenSum := fs.String("token-sha256", "", "the hex SHA-256 of that client's bearer token (the token itself is never on the command line)")
	if code, stop := parseFlags(fs, args, stdout); stop {
		return code
	}
	if *dsn == "" || fs.NArg() > 0 {
		return fail(stderr, chaosReplicaCommand, errors.New("--dsn is required and there are no arguments"))
	}
	// The caller comes from the client's token, checked before the kit's
	// interceptor: a client cannot name another caller.
	tokens := payments.NewTokens()
	if err := tokens.Allow(*tokenSum, *caller); err != nil {
		return fail(stderr, chaosReplicaCommand, fmt.Errorf("--caller and --token-sha256: %w", err))
	}
	db, t, err := openReplicaDB(ctx, *dsn, *driver)
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(*maxConns)
	db.SetMaxIdleConns(*maxConns)
	store, err := ledger.New(t.dialect)
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	svc, err := payments.NewService(db, t.dialect, *table)
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	cat, err := payments.Catalog()
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	opts := []grpcint.ServerOption{grpcint.WithLockWait(*lockWait)}
	if *atCommit {
		opts = append(opts, grpcint.WithClaimAtCommit(paymentspb.TransferMethod))
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromPrincipal(payments.Principal), opts...)
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	chain := []grpc.UnaryServerInterceptor{dieAfterCommit(*dieAfter), tokens.UnaryServerInterceptor()}
	if *breakKeys {
		chain = append(chain, freshKeys)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(chain, kit.UnaryServerInterceptor())...),
		grpc.ChainStreamInterceptor(kit.StreamServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, svc)
	if err := kit.CheckRegistered(srv); err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	fmt.Fprintf(stdout, "listening %s\n", lis.Addr())
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	select {
	case <-stdinClosed:
	case <-ctx.Done():
	case err := <-served:
		return fail(stderr, chaosReplicaCommand, err)
	}
	srv.Stop()
	return 0
}

// openReplicaDB opens dsn as openDB does, or with lib/pq (driver "pq")
// for a postgres:// DSN.
func openReplicaDB(ctx context.Context, dsn, driver string) (*sql.DB, target, error) {
	switch driver {
	case "":
		return openDB(ctx, dsn)
	case "pq":
	default:
		return nil, target{}, fmt.Errorf("--driver %q: want pq or nothing", driver)
	}
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	if t.driver != "pgx" {
		return nil, t, errors.New("--driver pq needs a postgres:// DSN")
	}
	t.driver = "postgres" // lib/pq
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	db, err := t.open(pctx)
	return db, t, err
}

// freshKeys breaks the service on purpose (--break-keys): every attempt
// gets a new idempotency key, as a service that derived its key from the
// attempt would, so a retry after a lost answer runs the work again. It
// exists to show that the chaos run's check finds the duplicates.
func freshKeys(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(grpcint.KeyHeader, grpcint.NewKey())
	return handler(metadata.NewIncomingContext(ctx, md), req)
}

// dieAfterCommit returns the outermost server interceptor of a replica:
// it counts successful Transfer answers, which the kit's interceptor
// inside it returns only after the transaction committed, and SIGKILLs the
// process at the n-th, before the answer leaves.
func dieAfterCommit(n int) grpc.UnaryServerInterceptor {
	var done atomic.Int64
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if n > 0 && err == nil && info.FullMethod == paymentspb.TransferMethod && done.Add(1) == int64(n) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; nothing more leaves this process
		}
		return resp, err
	}
}
