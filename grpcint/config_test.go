package grpcint_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/examples/payments"
	"github.com/opledger/opledger/examples/payments/paymentspb"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

func TestMisconfigurationFailsAtConstruction(t *testing.T) {
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(sqlite.New())
	if err != nil {
		t.Fatal(err)
	}
	db := new(sql.DB) // never used: construction must fail first or not touch it
	streamCat, err := policy.NewCatalog(policy.MethodPolicy{FullMethod: "/pkg.S/Watch", Kind: policy.KindKeyed, Shape: policy.ShapeServerStream, DurableLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	caller := grpcint.CallerFromTrustedHeader("x-caller")
	cases := []struct {
		name string
		opts []grpcint.ServerOption
		want string
	}{
		{"no catalog", []grpcint.ServerOption{grpcint.WithDB(db), grpcint.WithLedger(store), grpcint.WithCaller(caller)}, "no method catalog"},
		{"keyed without ledger", []grpcint.ServerOption{grpcint.WithCatalog(cat), grpcint.WithDB(db), grpcint.WithCaller(caller)}, "no ledger"},
		{"keyed without database", []grpcint.ServerOption{grpcint.WithCatalog(cat), grpcint.WithLedger(store), grpcint.WithCaller(caller)}, "no database"},
		{"keyed without caller", []grpcint.ServerOption{grpcint.WithCatalog(cat), grpcint.WithDB(db), grpcint.WithLedger(store)}, "no caller function"},
		{"keyed streaming method", []grpcint.ServerOption{grpcint.WithCatalog(streamCat), grpcint.WithDB(db), grpcint.WithLedger(store), grpcint.WithCaller(caller)}, "only unary methods can be keyed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := grpcint.UnaryServerInterceptor(c.opts...)
			if !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want ErrInvalidConfig mentioning %q", err, c.want)
			}
			_, err = grpcint.StreamServerInterceptor(c.opts...)
			if !errors.Is(err, grpcint.ErrInvalidConfig) {
				t.Errorf("stream: err %v", err)
			}
		})
	}

	// A channel never gets two retry owners.
	retrying := `{"methodConfig":[{"name":[{"service":"opledger.examples.payments.v1.Payments","method":"GetTransfer"}],` +
		`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	for _, owner := range []policy.RetryOwner{policy.OwnerMesh, policy.OwnerNone, policy.OwnerApplication} {
		_, err := grpcint.DialOptions(cat, owner, grpcint.WithServiceConfigJSON(retrying))
		if !errors.Is(err, grpcint.ErrInvalidConfig) || !errors.Is(err, policy.ErrRetryNotOwned) {
			t.Errorf("owner %s with a retry entry: err %v, want ErrRetryNotOwned", owner, err)
		}
	}
	if _, err := grpcint.DialOptions(cat, policy.OwnerServiceConfig, grpcint.WithServiceConfigJSON(retrying)); err != nil {
		t.Errorf("service-config owner with its own retry entry: %v", err)
	}
	typo := strings.Replace(retrying, "GetTransfer", "GetTransfr", 1)
	if _, err := grpcint.DialOptions(cat, policy.OwnerServiceConfig, grpcint.WithServiceConfigJSON(typo)); !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), "GetTransfr") {
		t.Errorf("misspelled method: err %v", err)
	}
	if _, err := grpcint.NewClient(cat, 0); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("invalid owner: err %v", err)
	}
	if _, err := grpcint.NewClient(streamCat, policy.OwnerApplication); !errors.Is(err, grpcint.ErrInvalidConfig) {
		t.Errorf("keyed stream on the client: err %v", err)
	}
}

// TestGeneratedServiceConfig: the service-config owner retries the
// read and the keyed Transfer (it has a ledger); other owners install no
// retry policy.
func TestGeneratedServiceConfig(t *testing.T) {
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	c, err := grpcint.NewClient(cat, policy.OwnerServiceConfig)
	if err != nil {
		t.Fatal(err)
	}
	js, err := c.ServiceConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"method":"Transfer"`, `"method":"GetTransfer"`, `"retryThrottling"`, `"ABORTED"`, `"UNAVAILABLE"`} {
		if !strings.Contains(js, want) {
			t.Errorf("service config lacks %s: %s", want, js)
		}
	}
	if findings, err := policy.Validate([]byte(js), cat, policy.OwnerServiceConfig); err != nil || len(findings) != 0 {
		t.Errorf("validator: %v %v", findings, err)
	}
	// Without a ledger behind Transfer, it is not retried.
	noLedger, _ := cat.WithKeyed(paymentspb.TransferMethod, false)
	c, err = grpcint.NewClient(noLedger, policy.OwnerServiceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := c.ServiceConfigJSON(); strings.Contains(js, `"method":"Transfer"`) {
		t.Errorf("keyed method without a ledger in the retry entry: %s", js)
	}
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerMesh, policy.OwnerNone} {
		c, _ := grpcint.NewClient(cat, owner)
		if js, _ := c.ServiceConfigJSON(); js != "" {
			t.Errorf("%s: service config %s", owner, js)
		}
	}
}

// TestDialOptionsPerOwner: every owner's options build a working channel.
func TestDialOptionsPerOwner(t *testing.T) {
	cat, err := payments.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		opts, err := grpcint.DialOptions(cat, owner)
		if err != nil {
			t.Fatalf("%s: %v", owner, err)
		}
		conn, err := grpc.NewClient("127.0.0.1:1", append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatalf("%s: grpc.NewClient rejected the options: %v", owner, err)
		}
		conn.Close()
	}
}

// Example_server wires the server interceptor: the handler of a keyed
// method finds its transaction with TxFromContext.
func Example_server() {
	var (
		db    *sql.DB       // opened by the application; the ledger table migrated
		store *ledger.Store // ledger.New(dialect)
	)
	cat, _ := payments.Catalog() // Transfer is keyed, with a durable ledger
	kit, err := grpcint.NewServer(
		grpcint.WithDB(db), grpcint.WithLedger(store), grpcint.WithCatalog(cat),
		grpcint.WithCaller(grpcint.CallerFromPeerCertificate()),
	)
	if err != nil {
		return // a configuration that cannot work fails here, not on the first call
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(kit.UnaryServerInterceptor()))
	_ = srv
}

// Example_client builds a channel whose retries the application owns.
func Example_client() {
	cat, _ := payments.Catalog()
	client, err := grpcint.NewClient(cat, policy.OwnerApplication)
	if err != nil {
		return
	}
	opts, _ := client.DialOptions()
	conn, err := grpc.NewClient("127.0.0.1:50051", append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return
	}
	defer conn.Close()
	ctx := grpcint.WithKey(context.Background(), grpcint.NewKey()) // optional: else one key per call is generated
	_, _ = paymentspb.NewPaymentsClient(conn).Transfer(ctx, &paymentspb.TransferRequest{})
}
