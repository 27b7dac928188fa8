package grpcint_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/internal/testkit/testcerts"
	"github.com/opledger/opledger/internal/testkit/wallet/walletpb"
)

// TestCallerFromPeerCertificate: over real mTLS, the caller is the hash
// of the verified client certificate's public key; without a client
// certificate there is none.
func TestCallerFromPeerCertificate(t *testing.T) {
	ca, err := testcerts.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert := func(c tls.Certificate, err error) *tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	srvCert, alice, bob := cert(ca.Server("server")), cert(ca.Client("alice")), cert(ca.Client("bob"))
	pool := ca.Pool()

	seen := make(chan string, 1)
	callerOf := grpcint.CallerFromPeerCertificate()
	capture := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		c, ok := callerOf(ctx)
		if !ok {
			c = "<none>"
		}
		seen <- c
		return &walletpb.DepositReply{}, nil
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{*srvCert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12,
	})), grpc.UnaryInterceptor(capture))
	walletpb.RegisterWalletServer(srv, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	call := func(client *tls.Certificate) string {
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if client != nil {
			cfg.Certificates = []tls.Certificate{*client}
		}
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := walletpb.NewWalletClient(conn).GetDeposit(context.Background(), &walletpb.GetDepositRequest{}); err != nil {
			t.Fatal(err)
		}
		return <-seen
	}
	spki := func(c *tls.Certificate) string {
		sum := sha256.Sum256(c.Leaf.RawSubjectPublicKeyInfo)
		return "spki-sha256:" + hex.EncodeToString(sum[:])
	}
	if got := call(alice); got != spki(alice) {
		t.Errorf("alice: %q, want %q", got, spki(alice))
	}
	if got := call(bob); got != spki(bob) || got == spki(alice) {
		t.Errorf("bob: %q", got)
	}
	if got := call(nil); got != "<none>" {
		t.Errorf("no client certificate: %q", got)
	}
}

func TestCallerFunctions(t *testing.T) {
	type principalKey struct{}
	principal := grpcint.CallerFromPrincipal(func(ctx context.Context) (string, bool) {
		p, ok := ctx.Value(principalKey{}).(string)
		return p, ok
	})
	header := grpcint.CallerFromTrustedHeader("X-Gateway-User")
	first := grpcint.FirstCaller(nil, principal, header)
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	cases := []struct {
		name string
		f    grpcint.CallerFunc
		ctx  context.Context
		want string
	}{
		{"principal", principal, context.WithValue(context.Background(), principalKey{}, "alice"), "principal:alice"},
		{"empty principal", principal, context.WithValue(context.Background(), principalKey{}, ""), ""},
		{"header", header, in("x-gateway-user", "bob"), "header:bob"},
		{"repeated header", header, in("x-gateway-user", "bob", "x-gateway-user", "eve"), ""},
		{"no metadata", header, context.Background(), ""},
		{"first: principal wins", first, context.WithValue(in("x-gateway-user", "bob"), principalKey{}, "alice"), "principal:alice"},
		{"first: header", first, in("x-gateway-user", "bob"), "header:bob"},
		{"first: none", first, context.Background(), ""},
	}
	for _, c := range cases {
		got, ok := c.f(c.ctx)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
	if grpcint.CallerFromTrustedHeader(" ") != nil || grpcint.CallerFromPrincipal(nil) != nil {
		t.Error("a caller function without a source should be nil (and refused by NewServer)")
	}
}
