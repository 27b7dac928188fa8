package payments

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/grpcint"
	"github.com/opledger/opledger/keyed"
)

// TestTokens: a token authenticates the principal it was issued to and
// no other; a digest stands for its token; bad input is refused.
func TestTokens(t *testing.T) {
	tk := NewTokens()
	a, err := tk.Issue("tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := tk.Issue("tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || len(a) < 20 {
		t.Fatalf("tokens %q and %q", a, b)
	}
	for tok, want := range map[string]string{a: "tenant-a", b: "tenant-b"} {
		if p, ok := tk.Authenticate(tok); !ok || p != want {
			t.Errorf("Authenticate(token of %s) = %q, %v", want, p, ok)
		}
	}
	for _, bad := range []string{"", "tenant-a", a + "x", strings.ToLower(a) + "!"} {
		if p, ok := tk.Authenticate(bad); ok {
			t.Errorf("Authenticate(%q) = %q", bad, p)
		}
	}
	other := NewTokens()
	if err := other.Allow(TokenDigest(a), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if p, ok := other.Authenticate(a); !ok || p != "tenant-a" {
		t.Errorf("a digest does not stand for its token: %q %v", p, ok)
	}
	for _, c := range []struct{ digest, principal string }{
		{TokenDigest(a), ""}, {"", "x"}, {"zz" + TokenDigest(a)[2:], "x"}, {TokenDigest(a) + "00", "x"}, {TokenDigest(a)[2:], "x"},
	} {
		if err := other.Allow(c.digest, c.principal); err == nil {
			t.Errorf("Allow(%q, %q) accepted", c.digest, c.principal)
		}
	}
	var zero Tokens
	if _, ok := zero.Authenticate(a); ok {
		t.Error("the zero Tokens accepted a token")
	}
	if err := zero.Allow(TokenDigest(a), "z"); err != nil {
		t.Fatal(err)
	}
	if p, ok := zero.Authenticate(a); !ok || p != "z" {
		t.Errorf("the zero Tokens after Allow: %q %v", p, ok)
	}
}

// TestTokensInFront: the interceptor and the middleware let a call with a
// token through with its principal in the context, and refuse one without
// (gRPC: UNAUTHENTICATED marked not executed; HTTP: 401) before the next
// handler runs, whatever else the call claims.
func TestTokensInFront(t *testing.T) {
	tk := NewTokens()
	tok, err := tk.Issue("shop")
	if err != nil {
		t.Fatal(err)
	}
	md, err := BearerToken(tok).GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer "+tok || BearerToken(tok).RequireTransportSecurity() {
		t.Fatalf("BearerToken: %v %v", md, err)
	}

	intercept := tk.UnaryServerInterceptor()
	for _, c := range []struct {
		name string
		md   metadata.MD
		want string
	}{
		{"token", metadata.Pairs("authorization", "Bearer "+tok), "shop"},
		{"scheme in lower case", metadata.Pairs("authorization", "bearer "+tok), "shop"},
		{"no metadata", nil, ""},
		{"no token", metadata.Pairs("x-caller", "shop"), ""},
		{"unknown token", metadata.Pairs("authorization", "Bearer nope"), ""},
		{"another scheme", metadata.Pairs("authorization", "Basic "+tok), ""},
		{"two headers", metadata.Pairs("authorization", "Bearer "+tok, "authorization", "Bearer "+tok), ""},
	} {
		ctx := context.Background()
		if c.md != nil {
			ctx = metadata.NewIncomingContext(ctx, c.md)
		}
		var got string
		ran := false
		_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/y"}, func(ctx context.Context, _ any) (any, error) {
			ran = true
			got, _ = Principal(ctx)
			return nil, nil
		})
		switch {
		case c.want != "" && (err != nil || !ran || got != c.want):
			t.Errorf("gRPC %s: %v, ran %v, principal %q", c.name, err, ran, got)
		case c.want == "" && (ran || status.Code(err) != codes.Unauthenticated || grpcint.ReasonOf(err) != keyed.NotExecuted.Row().Reason):
			t.Errorf("gRPC %s: %v (reason %s), ran %v; want UNAUTHENTICATED, not executed", c.name, err, grpcint.ReasonOf(err), ran)
		}
	}

	h := tk.HTTPMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := Principal(r.Context())
		_, _ = w.Write([]byte(p))
	}))
	for _, c := range []struct {
		name   string
		header []string
		code   int
		body   string
	}{
		{"token", []string{"Bearer " + tok}, 200, "shop"},
		{"none", nil, 401, ""},
		{"unknown", []string{"Bearer nope"}, 401, ""},
		{"two", []string{"Bearer " + tok, "Bearer " + tok}, 401, ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/transfers", nil)
		r.Header.Set("X-Caller", "shop")
		for _, v := range c.header {
			r.Header.Add("Authorization", v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || (c.code == 200 && w.Body.String() != c.body) {
			t.Errorf("HTTP %s: %d %q, want %d %q", c.name, w.Code, w.Body.String(), c.code, c.body)
		}
	}
	if _, ok := Principal(context.Background()); ok {
		t.Error("a principal without authentication")
	}
}

// FuzzBearer: the Authorization parser never panics, and what it
// returns has no surrounding space and came from the value after a
// Bearer scheme.
func FuzzBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  abc ", "Basic abc", "Bearer", "", " Bearer x y", "BEARER \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok := bearer(v)
		if tok == "" {
			return
		}
		if tok != strings.TrimSpace(tok) || !strings.Contains(v, tok) {
			t.Fatalf("bearer(%q) = %q", v, tok)
		}
		scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			t.Fatalf("bearer(%q) = %q from scheme %q", v, tok, scheme)
		}
	})
}
