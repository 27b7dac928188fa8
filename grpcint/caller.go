package grpcint

import (
	"context"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/opledger/opledger/internal/callerid"
)

// CallerFunc returns the fingerprint of the authenticated caller of an
// incoming call, and false when there is none. The fingerprint is part of
// every ledger identity, so two callers using the same key never see each
// other's results; it must come from authentication, never from something
// the caller merely claims.
type CallerFunc func(ctx context.Context) (caller string, ok bool)

// CallerFromPeerCertificate identifies the caller by its mTLS client
// certificate: "spki-sha256:" followed by the hex SHA-256 of the leaf
// certificate's public key (SubjectPublicKeyInfo), so a renewed
// certificate with the same key keeps the caller's identity. Only a
// certificate chain the server verified counts: use it with
// tls.RequireAndVerifyClientCert.
func CallerFromPeerCertificate() CallerFunc {
	return func(ctx context.Context) (string, bool) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.AuthInfo == nil {
			return "", false
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return "", false
		}
		return callerid.FromCertificate(&info.State)
	}
}

// CallerFromPrincipal identifies the caller by a principal the
// application authenticated (for example in an auth interceptor that runs
// before the kit's and stores the principal in the context). principal
// returns the name and whether there is one; the fingerprint is
// "principal:" followed by the name.
func CallerFromPrincipal(principal func(ctx context.Context) (string, bool)) CallerFunc {
	if principal == nil {
		return nil
	}
	return func(ctx context.Context) (string, bool) {
		return callerid.FromPrincipal(principal(ctx))
	}
}

// CallerFromTrustedHeader identifies the caller by an incoming metadata
// header that an authenticating gateway in front of the server sets. Use
// it only when every request reaches the server through that gateway and
// the gateway overwrites the header: otherwise any client can claim to be
// any caller. The fingerprint is "header:" followed by the value; a
// missing, empty or repeated header means no caller.
func CallerFromTrustedHeader(header string) CallerFunc {
	header = strings.ToLower(strings.TrimSpace(header))
	if header == "" {
		return nil
	}
	return func(ctx context.Context) (string, bool) {
		md, ok := metadata.FromIncomingContext(ctx)
		if !ok {
			return "", false
		}
		return callerid.FromHeader(md.Get(header))
	}
}

// FirstCaller tries each function in order and returns the first caller
// found. Nil functions are skipped.
func FirstCaller(fs ...CallerFunc) CallerFunc {
	return func(ctx context.Context) (string, bool) {
		return callerid.First(fs, func(f CallerFunc) bool { return f == nil }, func(f CallerFunc) (string, bool) { return f(ctx) })
	}
}
