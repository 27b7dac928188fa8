package connectint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/mattn/go-sqlite3"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/migrations"
	"github.com/opledger/opledger/pgxledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/txmiddleware"
)

// openExample opens a SQLite file in a temporary directory with the
// ledger's table and a deposits table; cleanup removes it.
func openExample(ctx context.Context) (db *sql.DB, store *ledger.Store, cleanup func()) {
	dir, err := os.MkdirTemp("", "connectint-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite3", sqlite.DSN(filepath.Join(dir, "pay.db"), 5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	m, err := migrations.New(db, sqlite.New())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE deposits (id INTEGER PRIMARY KEY, reference TEXT, amount INTEGER)"); err != nil {
		log.Fatal(err)
	}
	if store, err = ledger.New(sqlite.New()); err != nil {
		log.Fatal(err)
	}
	return db, store, func() { db.Close(); os.RemoveAll(dir) }
}

// depositHandler writes the deposit in the transaction of the ledger's
// claim, which the kit's interceptor put in its context.
func depositHandler(ctx context.Context, req *connect.Request[walletpb.DepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
	if req.Msg.GetAmount() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("amount must be positive"))
	}
	tx, ok := txmiddleware.TxFromContext(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("no transaction: serve Deposit behind the kit's interceptor"))
	}
	res, err := tx.ExecContext(ctx, "INSERT INTO deposits (reference, amount) VALUES (?, ?)", req.Msg.GetReference(), req.Msg.GetAmount())
	if err != nil {
		return nil, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&walletpb.DepositReply{DepositId: id, Reference: req.Msg.GetReference(),
		Amount: req.Msg.GetAmount()}), nil
}

// issued maps the bearer tokens the service issued to their principals:
// it stands for the service's authentication.
var issued = map[string]string{"token-of-billing": "billing"}

type principalKey struct{}

// authentication is the service's own interceptor, installed in front of
// the kit's: a call without a token the service issued is refused with
// UNAUTHENTICATED; any other goes on with the token's principal in its
// context.
var authentication = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		bearer, _ := strings.CutPrefix(req.Header().Get("Authorization"), "Bearer ")
		who, ok := issued[bearer]
		if !ok {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no token the service issued"))
		}
		return next(context.WithValue(ctx, principalKey{}, who), req)
	}
})

// principalOf returns the principal the authentication found: what
// connectint.CallerFromPrincipal takes.
func principalOf(ctx context.Context) (string, bool) {
	who, ok := ctx.Value(principalKey{}).(string)
	return who, ok
}

// exampleCatalog is the method catalog from connect's Specs of the
// Wallet service (GetDeposit is NO_SIDE_EFFECTS in its descriptor),
// with Deposit keyed and backed by the durable ledger.
func exampleCatalog() *policy.Catalog {
	specs := connectint.ServiceSpecs(walletpb.File_wallet_proto.Services().ByName("Wallet"))
	catalog, err := connectint.CatalogFromSpecs(specs...)
	if err != nil {
		log.Fatal(err)
	}
	catalog, err = catalog.WithKeyed(walletpb.DepositMethod, true)
	if err != nil {
		log.Fatal(err)
	}
	return catalog
}

// A keyed Deposit served by connect-go behind the kit's server
// interceptor, on HTTP/1.1 and h2c (Connect, gRPC and gRPC-Web), and
// called through a connect client whose retries the kit owns: a retry
// with the same key replays the first answer, and the same key for
// another request is refused. The caller is the principal the service's
// authentication found (bearer tokens, checked by an interceptor in
// front of the kit's), never a name the client sends.
func Example() {
	ctx := context.Background()
	db, store, cleanup := openExample(ctx)
	defer cleanup()
	catalog := exampleCatalog()

	// The server.
	kit, err := connectint.NewServer(db, store, catalog, connectint.CallerFromPrincipal(principalOf))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(walletpb.DepositMethod, connect.NewUnaryHandler(walletpb.DepositMethod, depositHandler,
		connect.WithInterceptors(authentication, kit.Interceptor())))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true) // gRPC over h2c
	srv.Start()
	defer srv.Close()

	// The client: the kit owns its retries (connect-go has none).
	retries, err := connectint.NewClient(catalog, policy.OwnerApplication)
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[walletpb.DepositRequest, walletpb.DepositReply](http.DefaultClient,
		srv.URL+walletpb.DepositMethod, retries.ClientOptions()...)

	send := func(amount int64) (*connect.Response[walletpb.DepositReply], error) {
		req := connect.NewRequest(&walletpb.DepositRequest{Account: "a", Amount: amount, Reference: "invoice-7"})
		req.Header().Set("Authorization", "Bearer token-of-billing")
		return client.CallUnary(connectint.WithKey(ctx, "invoice-7-attempt"), req)
	}
	first, err := send(500)
	if err != nil {
		log.Fatal(err)
	}
	again, err := send(500)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same deposit:", first.Msg.GetDepositId() == again.Msg.GetDepositId())
	fmt.Println("replayed:", again.Trailer().Get(connectint.ReplayedHeader))

	_, err = send(900) // the same key for another request
	ci, _ := connectint.CallInfoOf(err)
	fmt.Println(connect.CodeOf(err), connectint.ReasonOf(err), ci.Next)
	// Output:
	// same deposit: true
	// replayed: true
	// failed_precondition IDEMPOTENCY_KEY_REUSED do-not-retry
}

// Resolve asks for the stored outcome of a key without running the call:
// after a crash that lost the answer of a call whose key was persisted.
func ExampleResolve() {
	ctx := context.Background()
	db, store, cleanup := openExample(ctx)
	defer cleanup()
	catalog := exampleCatalog()
	kit, err := connectint.NewServer(db, store, catalog, connectint.CallerFromPrincipal(principalOf))
	if err != nil {
		log.Fatal(err)
	}
	h := connect.NewUnaryHandler(walletpb.DepositMethod, depositHandler, connect.WithInterceptors(authentication, kit.Interceptor()))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := connect.NewClient[walletpb.DepositRequest, walletpb.DepositReply](http.DefaultClient, srv.URL+walletpb.DepositMethod)

	newRequest := func() *connect.Request[walletpb.DepositRequest] {
		req := connect.NewRequest(&walletpb.DepositRequest{Account: "a", Amount: 250, Reference: "r-9"})
		req.Header().Set("Authorization", "Bearer token-of-billing")
		return req
	}
	_, err = connectint.Resolve(ctx, client.CallUnary, "k-9", newRequest())
	fmt.Println("before:", connect.CodeOf(err), connectint.ReasonOf(err))

	req := newRequest()
	req.Header().Set(connectint.KeyHeader, "k-9")
	if _, err := client.CallUnary(ctx, req); err != nil {
		log.Fatal(err)
	}
	stored, err := connectint.Resolve(ctx, client.CallUnary, "k-9", newRequest())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after:", stored.Msg.GetReference(), stored.Trailer().Get(connectint.ReplayedHeader))
	// Output:
	// before: not_found OPERATION_NOT_FOUND
	// after: r-9 true
}

// CatalogFromSpecs reads the kinds and shapes of procedures from
// connect's Specs: the procedure name is gRPC's full method name, so one
// catalog serves grpcint and connectint alike.
func ExampleCatalogFromSpecs() {
	catalog, err := connectint.CatalogFromSpecs(
		connect.Spec{Procedure: walletpb.DepositMethod, StreamType: connect.StreamTypeUnary},
		connect.Spec{Procedure: walletpb.GetDepositMethod, StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	)
	if err != nil {
		log.Fatal(err)
	}
	if catalog, err = catalog.WithKeyed(walletpb.DepositMethod, true); err != nil {
		log.Fatal(err)
	}
	for _, p := range catalog.Methods() {
		fmt.Println(p.FullMethod, p.Kind, p.Shape)
	}
	// Output:
	// /opledger.testkit.wallet.v1.Wallet/Deposit keyed unary
	// /opledger.testkit.wallet.v1.Wallet/GetDeposit no-side-effects unary
}

// On pgx's native transactions the handler finds a pgx.Tx with
// pgxledger.TxFromContext; the rest of the wiring is the same.
func ExampleNewServerFor() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgxledger.New()
	if err != nil {
		log.Fatal(err)
	}
	kit, err := connectint.NewServerFor(pgxledger.Transactions(pool, store), exampleCatalog(),
		connectint.CallerFromPrincipal(principalOf))
	if err != nil {
		log.Fatal(err)
	}
	handler := func(ctx context.Context, req *connect.Request[walletpb.DepositRequest]) (*connect.Response[walletpb.DepositReply], error) {
		tx, ok := pgxledger.TxFromContext(ctx)
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, errors.New("no pgx transaction"))
		}
		var id int64
		if err := tx.QueryRow(ctx, "INSERT INTO deposits (reference, amount) VALUES ($1, $2) RETURNING id",
			req.Msg.GetReference(), req.Msg.GetAmount()).Scan(&id); err != nil {
			return nil, err
		}
		return connect.NewResponse(&walletpb.DepositReply{DepositId: id, Reference: req.Msg.GetReference()}), nil
	}
	http.Handle(walletpb.DepositMethod, connect.NewUnaryHandler(walletpb.DepositMethod, handler,
		connect.WithInterceptors(authentication, kit.Interceptor())))
}
