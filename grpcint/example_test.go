package grpcint_test

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testcerts"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/policy"
)

// openWallet opens a SQLite file in a temporary directory with the
// ledger's table and the example service's, and returns the service on
// it; cleanup removes it.
func openWallet(ctx context.Context) (db *sql.DB, d dialects.Dialect, svc *wallet.Service, cleanup func()) {
	dir, err := os.MkdirTemp("", "grpcint-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	d = sqlite.New()
	m, err := migrations.New(db, d)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if err := wallet.CreateTable(ctx, db, d, wallet.DefaultTable); err != nil {
		log.Fatal(err)
	}
	svc, err = wallet.NewService(db, d, wallet.DefaultTable)
	if err != nil {
		log.Fatal(err)
	}
	return db, d, svc, func() { db.Close(); os.RemoveAll(dir) }
}

// serveExample serves srv on a loopback port; stop stops it.
func serveExample(srv *grpc.Server) (addr string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), srv.Stop
}

// A keyed Deposit served with the kit's server interceptor, called
// through a channel whose retries the application owns: a retry with the
// same key replays the first answer, and the same key for another request
// is refused. The caller is the principal the service's authentication
// found (here the example's bearer tokens, checked by an interceptor
// chained before the kit's), never a name the client sends. The example
// service's handler writes through the transaction it finds with
// txmiddleware.TxFromContext.
func Example() {
	ctx := context.Background()
	db, d, svc, cleanup := openWallet(ctx)
	defer cleanup()

	// Authentication: each tenant gets a token; its interceptor puts the
	// token's principal in the context, where the kit takes the caller.
	tokens := wallet.NewTokens()
	token, err := tokens.Issue("tenant-a")
	if err != nil {
		log.Fatal(err)
	}

	// The server: the catalog says which methods are keyed, the caller
	// comes from authentication.
	store, err := ledger.New(d)
	if err != nil {
		log.Fatal(err)
	}
	cat, err := wallet.Catalog() // Deposit is keyed, with a durable ledger
	if err != nil {
		log.Fatal(err)
	}
	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromPrincipal(wallet.Principal))
	if err != nil {
		log.Fatal(err) // a configuration that cannot work fails here, not on the first call
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(tokens.UnaryServerInterceptor(), kit.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(kit.StreamServerInterceptor()))
	walletpb.RegisterWalletServer(srv, svc)
	if err := kit.CheckRegistered(srv); err != nil {
		log.Fatal(err) // a keyed method registered as a stream, or renamed
	}
	addr, stop := serveExample(srv)
	defer stop()

	// The client: one retry owner for the channel, and the tenant's token
	// on every call (over TLS when it leaves the machine).
	client, err := grpcint.NewClient(cat, policy.OwnerApplication)
	if err != nil {
		log.Fatal(err)
	}
	opts, err := client.DialOptions()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(wallet.BearerToken(token)))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	pc := walletpb.NewWalletClient(conn)

	key := keyed.NewKey() // persist it first to resolve after a restart
	req := &walletpb.DepositRequest{Account: "alice", Amount: 500, Reference: "rent"}
	first, err := pc.Deposit(grpcint.WithKey(ctx, key), req)
	if err != nil {
		log.Fatal(err)
	}
	again, err := pc.Deposit(grpcint.WithKey(ctx, key), req) // a retry, by anyone: replayed
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same answer:", proto.Equal(first, again), "executed:", kit.Stats().Executed, "replayed:", kit.Stats().Replayed)

	other := &walletpb.DepositRequest{Account: "alice", Amount: 600, Reference: "rent"}
	_, err = pc.Deposit(grpcint.WithKey(ctx, key), other)
	ci, _ := grpcint.CallInfoOf(err)
	fmt.Println(status.Code(err), grpcint.ReasonOf(err), ci.Next)

	var stored walletpb.DepositReply
	err = grpcint.Resolve(ctx, conn, walletpb.DepositMethod, key, &walletpb.DepositRequest{}, &stored)
	fmt.Println("resolved:", err == nil && proto.Equal(&stored, first))
	// Output:
	// same answer: true executed: 1 replayed: 1
	// FailedPrecondition IDEMPOTENCY_KEY_REUSED do-not-retry
	// resolved: true
}

// Tenants identified by their mTLS client certificates: the caller is
// the hash of the certificate's public key, which a client can only
// present if it holds the key. Two tenants that use the same idempotency
// key are two operations: neither gets the other's answer, and neither
// burns the other's key. (The certificates here come from a throw-away
// authority; yours come from your PKI.)
func ExampleCallerFromPeerCertificate() {
	ctx := context.Background()
	db, d, svc, cleanup := openWallet(ctx)
	defer cleanup()
	ca, err := testcerts.NewCA("example CA")
	if err != nil {
		log.Fatal(err)
	}
	serverCert, err := ca.Server("wallet")
	if err != nil {
		log.Fatal(err)
	}
	store, err := ledger.New(d)
	if err != nil {
		log.Fatal(err)
	}
	cat, err := wallet.Catalog()
	if err != nil {
		log.Fatal(err)
	}

	kit, err := grpcint.NewServer(db, store, cat, grpcint.CallerFromPeerCertificate())
	if err != nil {
		log.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    ca.Pool(),                      // the authority that issues your clients' certificates
		ClientAuth:   tls.RequireAndVerifyClientCert, // only a verified certificate names a caller
		MinVersion:   tls.VersionTLS13,
	})
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(kit.UnaryServerInterceptor()))
	walletpb.RegisterWalletServer(srv, svc)
	addr, stop := serveExample(srv)
	defer stop()

	client, err := grpcint.NewClient(cat, policy.OwnerApplication)
	if err != nil {
		log.Fatal(err)
	}
	opts, err := client.DialOptions()
	if err != nil {
		log.Fatal(err)
	}
	dial := func(tenant string) *grpc.ClientConn {
		cert, err := ca.Client(tenant)
		if err != nil {
			log.Fatal(err)
		}
		creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13})
		conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(creds))...)
		if err != nil {
			log.Fatal(err)
		}
		return conn
	}
	connA, connB := dial("tenant-a"), dial("tenant-b")
	defer connA.Close()
	defer connB.Close()
	a, b := walletpb.NewWalletClient(connA), walletpb.NewWalletClient(connB)

	kctx := grpcint.WithKey(ctx, "order-42") // one key, used by both tenants
	ra, err := a.Deposit(kctx, &walletpb.DepositRequest{Account: "a1", Amount: 500, Reference: "a"})
	if err != nil {
		log.Fatal(err)
	}
	rb, err := b.Deposit(kctx, &walletpb.DepositRequest{Account: "b1", Amount: 700, Reference: "b"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tenant-a:", ra.GetReference(), ra.GetAmount(), "tenant-b:", rb.GetReference(), rb.GetAmount())
	fmt.Println("executed:", kit.Stats().Executed, "replayed:", kit.Stats().Replayed)
	// Output:
	// tenant-a: a 500 tenant-b: b 700
	// executed: 2 replayed: 0
}

// A keyed call that returns an error says what the caller can do: here
// nothing listens, so no attempt was ever sent and calling again with the
// same key is safe.
func ExampleCallInfoOf() {
	cat, err := wallet.Catalog()
	if err != nil {
		log.Fatal(err)
	}
	client, err := grpcint.NewClient(cat, policy.OwnerApplication, keyed.WithMaxAttempts(2),
		keyed.WithBackoff(policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	opts, err := client.DialOptions()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:1", append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx := grpcint.WithKey(context.Background(), "order-42")
	_, err = walletpb.NewWalletClient(conn).Deposit(ctx, &walletpb.DepositRequest{Amount: 1})
	ci, _ := grpcint.CallInfoOf(err)
	switch ci.Next {
	case policy.Retry: // nothing was committed: call again with ci.Key when you like
	case policy.ResolveFirst: // the outcome is unknown: grpcint.Resolve with ci.Key
	case policy.DoNotRetry: // the error is the answer
	}
	fmt.Println(ci.Reason, ci.Next, ci.Key, ci.Attempts)
	// Output:
	// REQUEST_NOT_SENT retry order-42 2
}

// The request fingerprint depends only on the message's content, not on
// how it was built.
func ExampleRequestFingerprint() {
	a := &walletpb.DepositRequest{Account: "a", Amount: 100, Reference: "r"}
	b := &walletpb.DepositRequest{Reference: "r", Amount: 100, Account: "a"}
	c := &walletpb.DepositRequest{Account: "a", Amount: 101, Reference: "r"}
	fa, _ := grpcint.RequestFingerprint(a)
	fb, _ := grpcint.RequestFingerprint(b)
	fc, _ := grpcint.RequestFingerprint(c)
	fmt.Println(fa == fb, fa == fc)
	_, err := grpcint.RequestFingerprint("not a message")
	fmt.Println(err != nil)
	// Output:
	// true false
	// true
}

// ReasonOf reads the kit's stable reason; a status that is not the kit's
// has none.
func ExampleReasonOf() {
	fmt.Printf("%q\n", grpcint.ReasonOf(status.Error(codes.Internal, "no details")))
	fmt.Println(grpcint.ReasonOf(grpcint.NotExecuted(codes.Unavailable, "shedding load")))
	// Output:
	// ""
	// REQUEST_NOT_EXECUTED
}

// chargeProvider stands for a payment provider's API outside the kit,
// which takes its own idempotency key.
type chargeProvider interface {
	Charge(ctx context.Context, idempotencyKey string, amountCents int64) (chargeID string, err error)
}

// A keyed handler that calls a system outside the kit sends it the key
// derived from its own operation: the same on every retry of the upstream
// call and every run of the handler, so the provider charges once.
func ExampleDownstreamKey() {
	var provider chargeProvider // your provider's client
	handler := func(ctx context.Context, req *walletpb.DepositRequest) (*walletpb.DepositReply, error) {
		key, err := keyed.DownstreamKey(ctx, "charge")
		if err != nil {
			return nil, err // not inside a keyed call (ledger.ErrNoOperation)
		}
		chargeID, err := provider.Charge(ctx, key, req.GetAmount())
		if err != nil {
			return nil, status.Error(codes.Unavailable, "the provider failed; retry with the same key")
		}
		return &walletpb.DepositReply{Reference: chargeID}, nil
	}
	_ = handler
}
