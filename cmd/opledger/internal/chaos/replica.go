package chaos

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
)

// ReplicaCommand is the hidden command a run starts N times (Settings.Exe
// ReplicaCommand flags…): one server replica of the example payments
// service, as its own process. The binary's command line hands it to
// ServeReplica; it is in no usage text.
const ReplicaCommand = "chaos-replica"

// ReplicaEnv is set to "1" in every replica's environment: a test binary,
// which has no command line of the binary's own, serves as the replica
// when its TestMain sees it (see the package doc).
const ReplicaEnv = "OPLEDGER_CHAOS_REPLICA"

// ReplicaSettings are a replica's flags: the run passes them on its
// command line (args), the replica's command parses them (SetFlags).
type ReplicaSettings struct {
	DSN           string        // the ledger database
	Table         string        // the business table (created by the run)
	LockWait      time.Duration // the claim's lock-wait bound
	DieAfter      int           // SIGKILL itself after this many committed transfers, before the answer (0: never)
	MaxConns      int           // the connection pool's size
	Driver        string        // "" the DSN's own, "pq" lib/pq, DriverPgxNative
	ClaimAtCommit bool          // claim Transfer at commit
	BreakKeys     bool          // a fresh idempotency key for every attempt (a broken service)
	CommitLog     string        // the file of the commit log ("" none)
	Caller        string        // the principal of the one client the replica accepts
	TokenSHA256   string        // the hex SHA-256 of that client's bearer token
	Transport     string        // GRPC or Connect
}

// SetFlags defines the replica's flags on fs, each filling its field of
// rs.
func (rs *ReplicaSettings) SetFlags(fs *flag.FlagSet) {
	fs.StringVar(&rs.DSN, "dsn", "", "the ledger database")
	fs.StringVar(&rs.Table, "table", payments.DefaultTable, "the business table (created by the parent)")
	fs.DurationVar(&rs.LockWait, "lock-wait", 2*time.Second, "the claim's lock-wait bound")
	fs.IntVar(&rs.DieAfter, "die-after", 0, "SIGKILL itself after this many committed transfers, before the answer (0: never)")
	fs.IntVar(&rs.MaxConns, "max-conns", 16, "the connection pool's size")
	fs.StringVar(&rs.Driver, "driver", "", "pq: open a postgres:// DSN with lib/pq instead of pgx; pgx-native: serve on pipelined pgx transactions (pgxledger) on a pgx pool")
	fs.BoolVar(&rs.ClaimAtCommit, "claim-at-commit", false, "claim Transfer at commit (keyed.WithClaimAtCommit)")
	fs.BoolVar(&rs.BreakKeys, "break-keys", false, "replace every request's idempotency key with a fresh one (a broken service: the run must find duplicates)")
	fs.StringVar(&rs.CommitLog, "commit-log", "", "append a line (unix nanoseconds, reference, transfer id) to this file for every Transfer whose handler ran and committed, before the answer")
	fs.StringVar(&rs.Caller, "caller", "", "the principal of the one client the replica accepts")
	fs.StringVar(&rs.TokenSHA256, "token-sha256", "", "the hex SHA-256 of that client's bearer token (the token itself is never on the command line)")
	fs.StringVar(&rs.Transport, "transport", GRPC, "grpc (grpc-go through grpcint) or connect (connect-go handlers through connectint, on HTTP/1.1 and h2c)")
}

// args are rs as the replica's command line after ReplicaCommand, but
// for --die-after, which each start of a replica adds.
func (rs ReplicaSettings) args() []string {
	args := []string{"--dsn", rs.DSN, "--table", rs.Table, "--lock-wait", rs.LockWait.String(),
		"--max-conns", fmt.Sprint(rs.MaxConns), "--driver", rs.Driver, "--caller", rs.Caller, "--token-sha256", rs.TokenSHA256, "--commit-log", rs.CommitLog}
	if rs.BreakKeys {
		args = append(args, "--break-keys")
	}
	if rs.ClaimAtCommit {
		args = append(args, "--claim-at-commit")
	}
	if rs.Transport == Connect {
		args = append(args, "--transport", Connect)
	}
	return args
}

// ServeReplica serves the payments service as rs says on a free loopback
// port, with the database open opens: it prints "listening ADDR" on
// stdout once it accepts calls, and serves until its standard input
// closes (the run went away), ctx ends or it is killed. With DieAfter N
// it sends itself SIGKILL after the N-th successful Transfer committed
// and before its response is written: a crash between COMMIT and the
// answer. Its error is a set-up failure, one line.
func ServeReplica(ctx context.Context, rs ReplicaSettings, open Opener, stdout io.Writer) error {
	if rs.DSN == "" {
		return errors.New("--dsn is required and there are no arguments")
	}
	// The caller comes from the client's token, checked before the kit's
	// interceptor: a client cannot name another caller.
	tokens := payments.NewTokens()
	if err := tokens.Allow(rs.TokenSHA256, rs.Caller); err != nil {
		return fmt.Errorf("--caller and --token-sha256: %w", err)
	}
	db, d, txs, closeDB, err := openReplica(ctx, rs, open)
	if err != nil {
		return err
	}
	defer closeDB()
	svc, err := payments.NewService(db, d, rs.Table)
	if err != nil {
		return err
	}
	rc := replicaConfig{txs: txs, svc: svc, tokens: tokens, lockWait: rs.LockWait, atCommit: rs.ClaimAtCommit, breakKeys: rs.BreakKeys,
		watch: &commitWatch{n: int64(rs.DieAfter)}}
	if rs.CommitLog != "" {
		if rc.watch.log, err = os.OpenFile(rs.CommitLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return err
		}
		defer rc.watch.log.Close()
	}
	srv, err := rc.server(rs.Transport)
	if err != nil {
		return err
	}
	return serveUntilStdinCloses(ctx, srv, stdout)
}

// openReplica opens the replica's database: a pgx pool with its keyed
// calls in pipelined pgx transactions (DriverPgxNative), or a
// database/sql pool with the ledger's store on it. closeDB closes what
// it opened.
func openReplica(ctx context.Context, rs ReplicaSettings, open Opener) (db *sql.DB, d dialects.Dialect, txs keyed.Transactions, closeDB func(), err error) {
	if rs.Driver != DriverPgxNative {
		if db, d, err = open.DB(ctx, rs.DSN, rs.Driver); err != nil {
			return nil, nil, nil, nil, err
		}
		db.SetMaxOpenConns(rs.MaxConns)
		db.SetMaxIdleConns(rs.MaxConns)
		store, err := ledger.New(d)
		if err != nil {
			db.Close()
			return nil, nil, nil, nil, err
		}
		return db, d, keyed.SQL(db, store), func() { db.Close() }, nil
	}
	if open.PgxPool == nil {
		return nil, nil, nil, nil, errors.New("--driver pgx-native: no pgx pool opener")
	}
	pool, d, err := open.PgxPool(ctx, rs.DSN, rs.MaxConns)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	db = stdlib.OpenDBFromPool(pool) // GetTransfer's reads
	closeDB = func() { db.Close(); pool.Close() }
	if txs, err = payments.PgxTransactions(pool, ""); err != nil {
		closeDB()
		return nil, nil, nil, nil, err
	}
	return db, d, txs, closeDB, nil
}

// serveUntilStdinCloses serves srv on a free loopback port, prints its
// address on stdout, and stops it once standard input closes or ctx
// ends.
func serveUntilStdinCloses(ctx context.Context, srv replicaServer, stdout io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
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
		return err
	}
	srv.stop()
	return nil
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

// server is the replica on transport.
func (rc replicaConfig) server(transport string) (replicaServer, error) {
	switch transport {
	case GRPC:
		return rc.grpcServer()
	case Connect:
		return rc.connectServer()
	}
	return nil, fmt.Errorf("--transport %q: want grpc or connect", transport)
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
	opts := []keyed.ServerOption{keyed.WithLockWait(rc.lockWait)}
	if rc.atCommit {
		opts = append(opts, keyed.WithClaimAtCommit(paymentspb.TransferMethod))
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

// DriverPgxNative is the replicas' driver (Settings.Driver,
// ReplicaSettings.Driver) for pgx's native API: the kit's keyed calls in
// pipelined pgx transactions (pgxledger.Transactions) on a pgxpool.
const DriverPgxNative = "pgx-native"

// Drivers are the values of Settings.Driver (the command's --driver): pgx
// (its database/sql driver, the replicas' ""), pq (lib/pq) and
// pgx-native.
var Drivers = []string{"pgx", "pq", DriverPgxNative}

// replicaDriver is the replicas' driver on db, whose dialect is d: db's
// own, or want (Settings.Driver) on a PostgreSQL database whose driver its
// name does not fix (postgres, pgbouncer, a postgres:// DSN given; not
// pgbouncer-pq).
func replicaDriver(db database, d dialects.Dialect, want string) string {
	if want == "" || db.driver() != "" || d.Name() != Postgres {
		return db.driver()
	}
	if want == "pgx" {
		return ""
	}
	return want
}

// freshKeys breaks the service on purpose (--break-keys): every attempt
// gets a new idempotency key, as a service that derived its key from the
// attempt would, so a retry after a lost answer runs the work again. It
// exists to show that the chaos run's check finds the duplicates.
func freshKeys(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(grpcint.KeyHeader, keyed.NewKey())
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
