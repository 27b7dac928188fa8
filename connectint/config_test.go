package connectint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/opledger/opledger/connectint"
	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/httpint"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
	"github.com/opledger/opledger/keyed"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/policy"
)

// TestConfig: a configuration that cannot work is an error wrapping
// ErrInvalidConfig.
func TestConfig(t *testing.T) {
	te := sqliteTestEnv(t)
	store := newStore(t, te)
	cat := catalog(t)
	caller := connectint.CallerFromTrustedHeader(callerHeader)
	stream, err := cat.With(policy.MethodPolicy{FullMethod: "/x.S/Stream", Kind: policy.KindKeyed, Shape: policy.ShapeBidiStream, DurableLedger: true})
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]func() error{
		"nil db":           func() error { _, err := connectint.NewServer(nil, store, cat, caller); return err },
		"nil ledger":       func() error { _, err := connectint.NewServer(te.DB, nil, cat, caller); return err },
		"nil transactions": func() error { _, err := connectint.NewServerFor(nil, cat, caller); return err },
		"nil catalog":      func() error { _, err := connectint.NewServer(te.DB, store, nil, caller); return err },
		"nil caller":       func() error { _, err := connectint.NewServer(te.DB, store, cat, nil); return err },
		"keyed stream":     func() error { _, err := connectint.NewServer(te.DB, store, stream, caller); return err },
		"at commit, not keyed": func() error {
			_, err := connectint.NewServer(te.DB, store, cat, caller, keyed.WithClaimAtCommit(walletpb.GetDepositMethod))
			return err
		},
		"option twice": func() error {
			_, err := connectint.NewServer(te.DB, store, cat, caller, keyed.WithLockWait(1), keyed.WithLockWait(2))
			return err
		},
		"negative wait": func() error {
			_, err := connectint.NewServer(te.DB, store, cat, caller, keyed.WithLockWait(-1))
			return err
		},
		"nil codec": func() error {
			_, err := connectint.NewServer(te.DB, store, cat, caller, keyed.WithErrorCodec(nil))
			return err
		},
		"no dialect": func() error {
			_, err := connectint.NewServerFor(keyed.SQL(te.DB, noDialect{store}), cat, caller)
			return err
		},
		"service config":  func() error { _, err := connectint.NewClient(cat, policy.OwnerServiceConfig); return err },
		"client, nil cat": func() error { _, err := connectint.NewClient(nil, policy.OwnerApplication); return err },
		"client, stream":  func() error { _, err := connectint.NewClient(stream, policy.OwnerApplication); return err },
		"max attempts": func() error {
			_, err := connectint.NewClient(cat, policy.OwnerApplication, keyed.WithMaxAttempts(0))
			return err
		},
		"bad owner": func() error { _, err := connectint.NewClient(cat, policy.RetryOwner(99)); return err },
		// An option the transport cannot honour is refused, not ignored.
		"grpcint's client option": func() error {
			_, err := connectint.NewClient(cat, policy.OwnerApplication, grpcint.WithTarget("dns:///x"))
			return err
		},
		"httpint's server option": func() error {
			_, err := connectint.NewServer(te.DB, store, cat, caller, httpint.WithBareKeys())
			return err
		},
		"client telemetry": func() error {
			_, err := connectint.NewClient(cat, policy.OwnerApplication, keyed.WithLogger(nil))
			return err
		},
	}
	for name, f := range servers {
		if err := f(); !errors.Is(err, connectint.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	for _, owner := range []policy.RetryOwner{policy.OwnerApplication, policy.OwnerMesh, policy.OwnerNone} {
		if c, err := connectint.NewClient(cat, owner); err != nil || c.Owner() != owner {
			t.Errorf("owner %s: %v", owner, err)
		}
	}
}

type noDialect struct{ *ledger.Store }

func (noDialect) Dialect() dialects.Dialect { return nil }

// TestCatalogFromSpecs: kinds from the idempotency level (or the
// descriptor's option), shapes from the stream type; CatalogWithSpecs
// keeps a keyed procedure keyed.
func TestCatalogFromSpecs(t *testing.T) {
	specs := connectint.ServiceSpecs(walletpb.File_wallet_proto.Services().ByName("Wallet"))
	if len(specs) != 2 {
		t.Fatalf("%d specs", len(specs))
	}
	c, err := connectint.CatalogFromSpecs(append(specs, connect.Spec{Procedure: "/x.S/Bidi", StreamType: connect.StreamTypeBidi, IdempotencyLevel: connect.IdempotencyIdempotent})...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]policy.MethodPolicy{
		walletpb.DepositMethod:    {FullMethod: walletpb.DepositMethod, Kind: policy.KindNonIdempotent, Shape: policy.ShapeUnary},
		walletpb.GetDepositMethod: {FullMethod: walletpb.GetDepositMethod, Kind: policy.KindNoSideEffects, Shape: policy.ShapeUnary},
		"/x.S/Bidi":               {FullMethod: "/x.S/Bidi", Kind: policy.KindIdempotent, Shape: policy.ShapeBidiStream},
	}
	for m, p := range want {
		if got, ok := c.Lookup(m); !ok || got != p {
			t.Errorf("%s: %+v, want %+v", m, got, p)
		}
	}
	// A Spec without a level reads the descriptor's option.
	bare := specs[1]
	bare.IdempotencyLevel = connect.IdempotencyUnknown
	if c, err := connectint.CatalogFromSpecs(bare); err != nil || c.Methods()[0].Kind != policy.KindNoSideEffects {
		t.Errorf("%v, %v", c.Methods(), err)
	}
	keyedCat, err := catalog(t).With()
	if err != nil {
		t.Fatal(err)
	}
	again, err := connectint.CatalogWithSpecs(keyedCat, specs...)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := again.Lookup(walletpb.DepositMethod); p.Kind != policy.KindKeyed || !p.DurableLedger {
		t.Errorf("Deposit after CatalogWithSpecs: %+v, want keyed with a durable ledger", p)
	}
	if _, err := connectint.CatalogFromSpecs(connect.Spec{Procedure: "not a procedure"}); err == nil {
		t.Error("a malformed procedure name")
	}
	if _, err := connectint.CatalogFromSpecs(specs[0], specs[0]); err == nil {
		t.Error("a procedure given twice")
	}
}

// TestCallers: the caller functions give grpcint's and httpint's
// fingerprints.
func TestCallers(t *testing.T) {
	ctx := context.Background()
	h := http.Header{}
	h.Set("X-Gateway-Caller", "svc-a")
	if c, ok := connectint.CallerFromTrustedHeader("x-gateway-caller")(ctx, h); !ok || c != "header:svc-a" {
		t.Errorf("trusted header: %q %v", c, ok)
	}
	h.Add("X-Gateway-Caller", "svc-b")
	if _, ok := connectint.CallerFromTrustedHeader("X-Gateway-Caller")(ctx, h); ok {
		t.Error("a repeated header is no caller")
	}
	if connectint.CallerFromTrustedHeader(" ") != nil || connectint.CallerFromPrincipal(nil) != nil {
		t.Error("an empty name or a nil principal gives a caller function")
	}
	p := connectint.CallerFromPrincipal(func(context.Context) (string, bool) { return "alice", true })
	first := connectint.FirstCaller(nil, connectint.CallerFromPeerCertificate(), p)
	if c, ok := first(ctx, nil); !ok || c != "principal:alice" {
		t.Errorf("first caller: %q %v", c, ok)
	}
	// The peer certificate, through WithPeerTLS.
	cert := &x509.Certificate{RawSubjectPublicKeyInfo: []byte("spki")}
	var got string
	h2 := connectint.WithPeerTLS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = connectint.CallerFromPeerCertificate()(r.Context(), r.Header)
	}))
	r := httptest.NewRequest("POST", "/", nil)
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	h2.ServeHTTP(httptest.NewRecorder(), r)
	if !strings.HasPrefix(got, "spki-sha256:") || len(got) != len("spki-sha256:")+64 {
		t.Errorf("peer certificate: %q", got)
	}
	r.TLS = &tls.ConnectionState{} // not verified
	got = ""
	h2.ServeHTTP(httptest.NewRecorder(), r)
	if got != "" {
		t.Errorf("an unverified chain gave %q", got)
	}
}

// TestErrorCodec: a final connect error round-trips with its code,
// message and details; other errors are not recorded.
func TestErrorCodec(t *testing.T) {
	codec := connectint.ErrorCodec(connectint.DefaultFinalCodes()...)
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("declined"))
	d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "DECLINED", Domain: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	ce.AddDetail(d)
	r, ok := codec.Encode(ce)
	if !ok || r.Code != uint32(connect.CodeFailedPrecondition) {
		t.Fatalf("%+v %v", r, ok)
	}
	var back *connect.Error
	if !errors.As(codec.Decode(r), &back) || back.Code() != ce.Code() || back.Message() != "declined" || len(back.Details()) != 1 {
		t.Fatalf("decoded %v", codec.Decode(r))
	}
	if v, err := back.Details()[0].Value(); err != nil || v.(*errdetails.ErrorInfo).GetReason() != "DECLINED" {
		t.Errorf("detail %v, %v", v, err)
	}
	for _, e := range []error{connect.NewError(connect.CodeUnavailable, errors.New("x")), errors.New("plain"), nil} {
		if _, ok := codec.Encode(e); ok {
			t.Errorf("%v recorded", e)
		}
	}
	if codec.Decode(ledger.Result{}) != nil {
		t.Error("a result decodes as an error")
	}
	if err := codec.Decode(ledger.Result{Code: 9, TypeName: "google.rpc.Status", Response: []byte{0xff}}); err == nil || connect.CodeOf(err) == connect.CodeFailedPrecondition {
		t.Errorf("unreadable stored status: %v", err)
	}
}

// TestDownstreamKeys: inside a keyed call the client derives the
// downstream key from the operation, the same on every run; outside one
// it makes a new key.
func TestDownstreamKeys(t *testing.T) {
	e, _ := sqliteEnv(t, nil, nil)
	var keys []string
	spy := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			keys = append(keys, req.Header().Get(connectint.KeyHeader))
			return next(ctx, req)
		}
	})
	kit, err := connectint.NewClient(catalog(t), policy.OwnerApplication, keyed.WithDownstreamKeys())
	if err != nil {
		t.Fatal(err)
	}
	c := e.client("connect", connect.WithInterceptors(kit.Interceptor(), spy))
	op := connectint.WithKey(context.Background(), "")
	op = ledgerOperation(t, op, "header:upstream", "/up.S/Pay", "up-key")
	for range 2 {
		if _, err := c.CallUnary(op, request("alice", "", "down", 1)); err != nil {
			t.Fatal(err)
		}
	}
	want, err := keyed.DownstreamKey(op, walletpb.DepositMethod)
	if err != nil || len(keys) != 2 || keys[0] != want || keys[1] != want {
		t.Fatalf("keys %v, want %q twice (%v)", keys, want, err)
	}
	if e.BizRows(t, "down") != 1 {
		t.Errorf("%d rows: the second run must replay", e.BizRows(t, "down"))
	}
	if _, err := keyed.DownstreamKey(context.Background(), "x"); !errors.Is(err, ledger.ErrNoOperation) {
		t.Errorf("outside a keyed call: %v", err)
	}
}

func ledgerOperation(t *testing.T, ctx context.Context, caller, method, key string) context.Context {
	t.Helper()
	return ledger.ContextWithOperation(ctx, testdb.ID(t, caller, method, key))
}
