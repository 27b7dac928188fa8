package wallet

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/grpcint"
)

// Tokens is the fixture's authentication, standing in for a service's own
// (OIDC, API keys, mTLS): bearer tokens it issued, each to one principal.
// Its interceptor puts the principal of a call's token in the context,
// where [Principal] finds it for grpcint.CallerFromPrincipal. Safe for
// concurrent use; make one with [NewTokens].
type Tokens struct {
	mu     sync.Mutex
	issued map[string]string // token → principal
}

// NewTokens returns a Tokens that has issued nothing.
func NewTokens() *Tokens { return &Tokens{issued: map[string]string{}} }

// Issue returns a new random token for principal.
func (t *Tokens) Issue(principal string) (string, error) {
	token := rand.Text()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.issued[token] = principal
	return token, nil
}

type principalKey struct{}

// Principal returns the principal the [Tokens.UnaryServerInterceptor]
// authenticated for the call in ctx.
func Principal(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(principalKey{}).(string)
	return p, ok && p != ""
}

// UnaryServerInterceptor refuses a call without exactly one
// "authorization: Bearer <token>" of a token t issued (UNAUTHENTICATED,
// not executed) and runs any other with its principal in the context.
// Chain it before the kit's interceptor.
func (t *Tokens) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		var principal string
		if v := md.Get("authorization"); len(v) == 1 {
			if token, ok := strings.CutPrefix(v[0], "Bearer "); ok {
				t.mu.Lock()
				principal = t.issued[token]
				t.mu.Unlock()
			}
		}
		if principal == "" {
			return nil, grpcint.NotExecuted(codes.Unauthenticated, "wallet: a bearer token the service issued is required")
		}
		return handler(context.WithValue(ctx, principalKey{}, principal), req)
	}
}

// BearerToken returns per-call credentials that send token as
// "authorization: Bearer <token>" (for grpc.WithPerRPCCredentials),
// without requiring transport security so that the examples run on
// loopback; a token that leaves the machine goes over TLS.
func BearerToken(token string) credentials.PerRPCCredentials { return bearer(token) }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
