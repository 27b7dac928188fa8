package payments

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
)

// Tokens is the example's authentication, standing in for a service's
// own (OIDC, API keys, mTLS): bearer tokens, each issued to one
// principal. Its gRPC interceptor and HTTP middleware run in front of the
// kit's, refuse a call without a token it issued, and put the token's
// principal in the context, where [Principal] finds it:
// grpcint.CallerFromPrincipal(payments.Principal) and
// httpint.CallerFromPrincipal(payments.Principal) give it to the ledger as
// the caller. A client therefore cannot choose its caller, only present a
// token it was given, and two tenants using the same idempotency key never
// see each other's answers.
//
// Tokens keeps each token's SHA-256, never the token. It is safe for
// concurrent use. The zero value accepts nothing; use [NewTokens].
type Tokens struct {
	mu         sync.RWMutex
	principals map[[sha256.Size]byte]string
}

// NewTokens returns a Tokens that accepts no token yet.
func NewTokens() *Tokens {
	return &Tokens{principals: map[[sha256.Size]byte]string{}}
}

// ErrBadPrincipal is returned for an empty principal, or for a digest that
// is not a hex SHA-256.
var ErrBadPrincipal = errors.New("payments: a token needs a principal and a hex SHA-256 digest")

// Issue returns a new random token (128 bits) for principal.
func (t *Tokens) Issue(principal string) (string, error) {
	token := rand.Text()
	if err := t.Allow(TokenDigest(token), principal); err != nil {
		return "", err
	}
	return token, nil
}

// Allow accepts the token whose SHA-256 is digest (hex, as [TokenDigest]
// writes it) for principal: for a server that is given the digest and
// never the token (the replicas of `opledger chaos` get it in a flag).
func (t *Tokens) Allow(digest, principal string) error {
	var sum [sha256.Size]byte
	if principal == "" || len(digest) != hex.EncodedLen(len(sum)) {
		return ErrBadPrincipal
	}
	if _, err := hex.Decode(sum[:], []byte(digest)); err != nil {
		return ErrBadPrincipal
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.principals == nil {
		t.principals = map[[sha256.Size]byte]string{}
	}
	t.principals[sum] = principal
	return nil
}

// TokenDigest is the hex SHA-256 of token, what [Tokens.Allow] takes.
func TokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the principal token was issued to, and false for
// a token it did not issue.
func (t *Tokens) Authenticate(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.principals[sha256.Sum256([]byte(token))]
	return p, ok
}

// bearer returns the token of an "authorization: Bearer <token>" value.
func bearer(v string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

type principalKey struct{}

// Principal returns the principal that a Tokens interceptor or
// middleware authenticated for the call in ctx: the function to give
// grpcint.CallerFromPrincipal and httpint.CallerFromPrincipal.
func Principal(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok && p != ""
}

// Authorize authenticates a call by the values of its Authorization
// header (exactly one, "Bearer <token>", of a token t issued) and returns
// ctx with the token's principal in it, where [Principal] finds it;
// false for any other call. The interceptor and the middleware below run
// it, and so does a transport of your own (package connectpay's).
func (t *Tokens) Authorize(ctx context.Context, authorization []string) (context.Context, bool) {
	if len(authorization) != 1 {
		return ctx, false
	}
	p, ok := t.Authenticate(bearer(authorization[0]))
	if !ok {
		return ctx, false
	}
	return context.WithValue(ctx, principalKey{}, p), true
}

// UnaryServerInterceptor authenticates each call by its "authorization:
// Bearer <token>" header (exactly one): a call without a token t issued
// is refused with UNAUTHENTICATED, marked not executed
// (grpcint.NotExecuted: nothing ran, calling again is safe); any other
// runs with the principal in its context. Chain it before the kit's
// interceptor.
func (t *Tokens) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		actx, ok := t.Authorize(ctx, md.Get("authorization"))
		if !ok {
			return nil, grpcint.NotExecuted(codes.Unauthenticated, "payments: a bearer token the service issued is required")
		}
		return handler(actx, req)
	}
}

// HTTPMiddleware authenticates each request by its "Authorization:
// Bearer <token>" header (exactly one): a request without a token t
// issued is answered 401 without reaching next; any other reaches next
// with the principal in its context. Put it in front of the httpint
// middleware.
func (t *Tokens) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, ok := t.Authorize(r.Context(), r.Header.Values("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeHTTPProblem(w, http.StatusUnauthorized, "a bearer token the service issued is required")
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// BearerToken returns per-call credentials that send token as
// "authorization: Bearer <token>", for grpc.WithPerRPCCredentials. They
// do not require transport security, so that the example runs over
// loopback without TLS; a token that leaves the machine goes over TLS.
func BearerToken(token string) credentials.PerRPCCredentials { return bearerToken(token) }

type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }
