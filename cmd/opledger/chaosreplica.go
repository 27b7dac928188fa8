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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq" // driver "postgres", for --driver pq
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/keyed"
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
	driver := fs.String("driver", "", "pq: open a postgres:// DSN with lib/pq instead of pgx; pgx-native: serve on pipelined pgx transactions (pgxledger) on a pgx pool")
	atCommit := fs.Bool("claim-at-commit", false, "claim Transfer at commit (grpcint.WithClaimAtCommit)")
	breakKeys := fs.Bool("break-keys", false, "replace every request's idempotency key with a fresh one (a broken service: the run must find duplicates)")
	commitLog := fs.String("commit-log", "", "append a line (unix nanoseconds, reference, transfer id) to this file for every Transfer whose handler ran and committed, before the answer")
	caller := fs.String("caller", "", "the principal of the one client the replica accepts")
	tokenSum := fs.String("token-sha256", "", "the hex SHA-256 of that client's bearer token (the token itself is never on the command line)")
	transport := fs.String("transport", chaosGRPC, "grpc (grpc-go through grpcint) or connect (connect-go handlers through connectint, on HTTP/1.1 and h2c)")
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
	var (
		db  *sql.DB
		t   target
		txs keyed.Transactions
		err error
	)
	if *driver == driverPgxNative {
		var pool *pgxpool.Pool
		if pool, t, err = openReplicaPool(ctx, *dsn, *maxConns); err != nil {
			return fail(stderr, chaosReplicaCommand, err)
		}
		defer pool.Close()
		db = stdlib.OpenDBFromPool(pool) // GetTransfer's reads
		if txs, err = payments.PgxTransactions(pool, ""); err != nil {
			return fail(stderr, chaosReplicaCommand, err)
		}
	} else if db, t, err = openReplicaDB(ctx, *dsn, *driver); err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	defer db.Close()
	if txs == nil {
		db.SetMaxOpenConns(*maxConns)
		db.SetMaxIdleConns(*maxConns)
		store, err := ledger.New(t.dialect)
		if err != nil {
			return fail(stderr, chaosReplicaCommand, err)
		}
		txs = keyed.SQL(db, store)
	}
	svc, err := payments.NewService(db, t.dialect, *table)
	if err != nil {
		return fail(stderr, chaosReplicaCommand, err)
	}
	var logf *os.File
	if *commitLog != "" {
		if logf, err = os.OpenFile(*commitLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return fail(stderr, chaosReplicaCommand, err)
		}
		defer logf.Close()
	}
	rc := replicaConfig{txs: txs, svc: svc, tokens: tokens, lockWait: *lockWait, atCommit: *atCommit, breakKeys: *breakKeys,
		watch: &commitWatch{n: int64(*dieAfter), log: logf}}
	var srv replicaServer
	switch *transport {
	case chaosGRPC:
		srv, err = rc.grpcServer()
	case chaosConnect:
		srv, err = rc.connectServer()
	default:
		err = fmt.Errorf("--transport %q: want grpc or connect", *transport)
	}
	if err != nil {
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
	srv.stop()
	return 0
}

// replicaConfig is what a replica serves, on either transport.
type replicaConfig struct {
	txs       keyed.Transactions
	svc       *payments.Service
	tokens    *payments.Tokens
	lockWait  time.Duration
	atCommit  bool
	breakKeys bool
	watch     *commitWatch
}

// replicaServer serves a replica's calls on a listener until stopped.
type replicaServer interface {
	Serve(net.Listener) error
	stop()
}

type grpcReplica struct{ *grpc.Server }

func (g grpcReplica) stop() { g.Stop() }

// grpcServer is the replica on grpc-go: the kit's interceptor behind the
// commit watch and the tokens (and, with breakKeys, fresh keys), the
// handler runs noted inside it.
func (rc replicaConfig) grpcServer() (replicaServer, error) {
	cat, err := payments.Catalog()
	if err != nil {
		return nil, err
	}
	opts := []grpcint.ServerOption{grpcint.WithLockWait(rc.lockWait)}
	if rc.atCommit {
		opts = append(opts, grpcint.WithClaimAtCommit(paymentspb.TransferMethod))
	}
	kit, err := grpcint.NewServerFor(rc.txs, cat, grpcint.CallerFromPrincipal(payments.Principal), opts...)
	if err != nil {
		return nil, err
	}
	chain := []grpc.UnaryServerInterceptor{afterCommit(rc.watch), rc.tokens.UnaryServerInterceptor()}
	if rc.breakKeys {
		chain = append(chain, freshKeys)
	}
	chain = append(chain, kit.UnaryServerInterceptor(), markExecuted)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...),
		grpc.ChainStreamInterceptor(kit.StreamServerInterceptor()))
	paymentspb.RegisterPaymentsServer(srv, rc.svc)
	if err := kit.CheckRegistered(srv); err != nil {
		return nil, err
	}
	return grpcReplica{srv}, nil
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

// driverPgxNative is the replicas' --driver (and chaos's) for pgx's
// native API: the kit's keyed calls in pipelined pgx transactions
// (pgxledger.Transactions) on a pgxpool.
const driverPgxNative = "pgx-native"

// chaosDrivers are the values of chaos's --driver: pgx (its database/sql
// driver, the replicas' ""), pq (lib/pq) and pgx-native.
var chaosDrivers = []string{"pgx", "pq", driverPgxNative}

// replicaDriver is the replicas' --driver on db: db's own, or want
// (chaos's --driver) on a PostgreSQL database whose driver its name does
// not fix (postgres, pgbouncer, a postgres:// --dsn; not pgbouncer-pq).
func replicaDriver(db chaosDatabase, t target, want string) string {
	if want == "" || db.driver() != "" || t.driver != "pgx" {
		return db.driver()
	}
	if want == "pgx" {
		return ""
	}
	return want
}

// openReplicaPool opens a pgx pool of maxConns on dsn, a postgres:// DSN
// (with default_query_exec_mode=exec behind a transaction pooler), and
// pings it.
func openReplicaPool(ctx context.Context, dsn string, maxConns int) (*pgxpool.Pool, target, error) {
	t, err := parseDSN(dsn)
	if err != nil {
		return nil, t, err
	}
	if t.driver != "pgx" {
		return nil, t, errors.New("--driver pgx-native needs a postgres:// DSN")
	}
	cfg, err := pgxpool.ParseConfig(t.dsn)
	if err != nil {
		return nil, t, fmt.Errorf("open %s: %s", t.display, t.scrub(err.Error()))
	}
	cfg.MaxConns = int32(maxConns)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, t, fmt.Errorf("cannot reach %s: %s", t.display, t.scrub(err.Error()))
	}
	return pool, t, nil
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

// commitWatch is what the outermost interceptor of a replica does with
// each successful Transfer, on either transport. The kit's interceptor
// inside it returns a successful Transfer only after its transaction
// committed. When log is not nil, a Transfer whose handler ran
// (markExecuted: not a replay) is written to it, one line of unix
// nanoseconds, reference and transfer id, in one write(2) before the
// answer leaves: the parent's record of what the database acknowledged,
// which a failover to an asynchronous standby may lose. The n-th
// successful Transfer (n > 0) then SIGKILLs the process, before the
// answer.
type commitWatch struct {
	n    int64
	log  *os.File
	done atomic.Int64
}

// committed notes a successful Transfer: ran is its handler's last run
// (zero for a replay), resp the answer about to leave.
func (w *commitWatch) committed(ran *executedTransfer, resp *paymentspb.TransferReply) {
	// The response is the last run's, unless that run rolled back and the
	// kit then replayed another attempt's answer.
	if w.log != nil && resp != nil && ran.id != 0 && resp.GetTransferId() == ran.id {
		_, _ = fmt.Fprintf(w.log, "%d %s %d\n", time.Now().UnixNano(), ran.ref, ran.id)
	}
	if w.n > 0 && w.done.Add(1) == w.n {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; nothing more leaves this process
	}
}

// afterCommit is the outermost gRPC server interceptor of a replica: w
// sees every successful Transfer.
func afterCommit(w *commitWatch) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != paymentspb.TransferMethod {
			return handler(ctx, req)
		}
		ran := new(executedTransfer)
		resp, err := handler(context.WithValue(ctx, executedKey{}, ran), req)
		if err != nil {
			return resp, err
		}
		r, _ := resp.(*paymentspb.TransferReply)
		w.committed(ran, r)
		return resp, err
	}
}

type executedKey struct{}

// executedTransfer is the transfer the handler returned on its last run
// (the one the kit committed, when the call succeeds).
type executedTransfer struct {
	ref string
	id  int64
}

// markExecuted is the innermost server interceptor: it notes the transfer
// of each handler run for afterCommit (a replay runs no handler).
func markExecuted(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		noteRun(ctx, resp)
	}
	return resp, err
}

// noteRun notes a handler run's reply (resp) for the commit watch of the
// call in ctx.
func noteRun(ctx context.Context, resp any) {
	if ran, ok := ctx.Value(executedKey{}).(*executedTransfer); ok {
		if r, ok := resp.(*paymentspb.TransferReply); ok {
			ran.ref, ran.id = r.GetReference(), r.GetTransferId()
		}
	}
}
