package grpcint_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/dialects/sqlite"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/wallet"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
	"github.com/opledger/opledger/policy/serviceconfig"
	"github.com/opledger/opledger/txmiddleware"
)

func TestMisconfigurationFailsAtConstruction(t *testing.T) {
	cat, err := wallet.Catalog()
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
	var noDialect ledger.Ledger = dialectless{store}
	cases := []struct {
		name   string
		db     *sql.DB
		l      ledger.Ledger
		cat    *policy.Catalog
		caller grpcint.CallerFunc
		opts   []keyed.ServerOption
		want   string
	}{
		{"no database", nil, store, cat, caller, nil, "nil database"},
		{"no ledger", db, nil, cat, caller, nil, "nil ledger"},
		{"no catalog", db, store, nil, caller, nil, "nil method catalog"},
		{"no caller", db, store, cat, nil, nil, "nil caller function"},
		{"ledger without dialect", db, noDialect, cat, caller, nil, "no dialect"},
		{"keyed streaming method", db, store, streamCat, caller, nil, "only unary methods can be keyed"},
		{"option twice", db, store, cat, caller, []keyed.ServerOption{keyed.WithLockWait(time.Second), keyed.WithLockWait(time.Second)}, "WithLockWait given twice"},
		{"nil option", db, store, cat, caller, []keyed.ServerOption{nil}, "nil option"},
		{"lock wait also in tx options", db, store, cat, caller, []keyed.ServerOption{keyed.WithTxOptions(txmiddleware.WithLockWait(time.Second))}, "WithLockWait given twice"},
		{"codec also in tx options", db, store, cat, caller, []keyed.ServerOption{keyed.WithTxOptions(txmiddleware.WithErrorCodec(grpcint.StatusCodec()))}, "WithErrorCodec given twice"},
		{"negative pushback", db, store, cat, caller, []keyed.ServerOption{keyed.WithInProgressPushback(-time.Second)}, "negative pushback"},
		{"nil codec", db, store, cat, caller, []keyed.ServerOption{keyed.WithErrorCodec(nil)}, "codec must not be nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := grpcint.NewServer(c.db, c.l, c.cat, c.caller, c.opts...)
			if !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want ErrInvalidConfig mentioning %q", err, c.want)
			}
		})
	}
	for _, opts := range [][]keyed.ClientOption{
		{keyed.WithMaxAttempts(0)}, {keyed.WithMaxAttempts(101)}, {keyed.WithBudget(nil)},
		{keyed.WithResolveWindow(0)}, {keyed.WithMaxAttempts(3), keyed.WithMaxAttempts(4)}, {nil},
	} {
		if _, err := grpcint.NewClient(cat, policy.OwnerApplication, opts...); !errors.Is(err, grpcint.ErrInvalidConfig) {
			t.Errorf("client options %d: err %v, want ErrInvalidConfig", len(opts), err)
		}
	}

	// A channel never gets two retry owners.
	retrying := `{"methodConfig":[{"name":[{"service":"opledger.testkit.wallet.v1.Wallet","method":"GetDeposit"}],` +
		`"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	for _, owner := range []policy.RetryOwner{policy.OwnerMesh, policy.OwnerNone, policy.OwnerApplication} {
		_, err := dialOptions(cat, owner, grpcint.WithServiceConfigJSON(retrying))
		if !errors.Is(err, grpcint.ErrInvalidConfig) || !errors.Is(err, serviceconfig.ErrRetryNotOwned) {
			t.Errorf("owner %s with a retry entry: err %v, want ErrRetryNotOwned", owner, err)
		}
	}
	if _, err := dialOptions(cat, policy.OwnerServiceConfig, grpcint.WithServiceConfigJSON(retrying)); err != nil {
		t.Errorf("service-config owner with its own retry entry: %v", err)
	}
	typo := strings.Replace(retrying, "GetDeposit", "GetTransfr", 1)
	if _, err := dialOptions(cat, policy.OwnerServiceConfig, grpcint.WithServiceConfigJSON(typo)); !errors.Is(err, grpcint.ErrInvalidConfig) || !strings.Contains(err.Error(), "GetTransfr") {
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
// read and the keyed Deposit (it has a ledger); other owners install no
// retry policy.
func TestGeneratedServiceConfig(t *testing.T) {
	cat, err := wallet.Catalog()
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
	for _, want := range []string{`"method":"Deposit"`, `"method":"GetDeposit"`, `"retryThrottling"`, `"ABORTED"`, `"UNAVAILABLE"`} {
		if !strings.Contains(js, want) {
			t.Errorf("service config lacks %s: %s", want, js)
		}
	}
	if findings, err := serviceconfig.Validate([]byte(js), cat, policy.OwnerServiceConfig); err != nil || len(findings) != 0 {
		t.Errorf("validator: %v %v", findings, err)
	}
	// Without a ledger behind Deposit, it is not retried.
	noLedger, _ := cat.WithKeyed(walletpb.DepositMethod, false)
	c, err = grpcint.NewClient(noLedger, policy.OwnerServiceConfig)
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := c.ServiceConfigJSON(); strings.Contains(js, `"method":"Deposit"`) {
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
	cat, err := wallet.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerServiceConfig, policy.OwnerMesh, policy.OwnerNone} {
		opts, err := dialOptions(cat, owner)
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

// dialOptions builds a Client and returns its dial options.
func dialOptions(cat *policy.Catalog, owner policy.RetryOwner, opts ...keyed.ClientOption) ([]grpc.DialOption, error) {
	c, err := grpcint.NewClient(cat, owner, opts...)
	if err != nil {
		return nil, err
	}
	return c.DialOptions()
}

// dialectless is a ledger whose Dialect is nil.
type dialectless struct{ ledger.Ledger }

func (dialectless) Dialect() dialects.Dialect { return nil }
