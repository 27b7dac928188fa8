package connectint

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"

	"github.com/opledger/opledger/internal/callerid"
)

// CallerFunc returns the fingerprint of the authenticated caller of an
// incoming call (its context and request headers), and false when there
// is none. The fingerprint is part of every ledger identity, so two
// callers using the same key never see each other's results; it must come
// from authentication, never from something the caller merely claims.
// The constructors below give the same fingerprints as grpcint's and
// httpint's, so that one caller is one caller on every transport.
type CallerFunc func(ctx context.Context, header http.Header) (caller string, ok bool)

type tlsKey struct{}

// WithPeerTLS wraps the HTTP handler that serves the connect handlers so
// that CallerFromPeerCertificate finds the connection's TLS state in the
// context of each call (connect-go does not pass it to interceptors).
func WithPeerTLS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			r = r.WithContext(context.WithValue(r.Context(), tlsKey{}, r.TLS))
		}
		next.ServeHTTP(w, r)
	})
}

// CallerFromPeerCertificate identifies the caller by its verified TLS
// client certificate: "spki-sha256:" and the hex SHA-256 of the leaf
// certificate's public key (the fingerprint grpcint and httpint give the
// same certificate). Only a chain the server verified counts: use it with
// tls.RequireAndVerifyClientCert, and serve the handlers through
// WithPeerTLS.
func CallerFromPeerCertificate() CallerFunc {
	return func(ctx context.Context, _ http.Header) (string, bool) {
		st, _ := ctx.Value(tlsKey{}).(*tls.ConnectionState)
		return callerid.FromCertificate(st)
	}
}

// CallerFromPrincipal identifies the caller by a principal the
// application authenticated (in an interceptor or HTTP middleware in front
// of the kit's that stores it in the context). The fingerprint is
// "principal:" and the name. It returns nil for a nil principal.
func CallerFromPrincipal(principal func(ctx context.Context) (string, bool)) CallerFunc {
	if principal == nil {
		return nil
	}
	return func(ctx context.Context, _ http.Header) (string, bool) {
		return callerid.FromPrincipal(principal(ctx))
	}
}

// CallerFromTrustedHeader identifies the caller by a request header that
// an authenticating gateway in front of the server sets. Use it only when
// every request comes through that gateway and the gateway overwrites the
// header: otherwise any client can claim to be any caller. The
// fingerprint is "header:" and the value; a missing, empty or repeated
// header means no caller. It returns nil for an empty name.
func CallerFromTrustedHeader(name string) CallerFunc {
	name = http.CanonicalHeaderKey(strings.TrimSpace(name))
	if name == "" {
		return nil
	}
	return func(_ context.Context, h http.Header) (string, bool) {
		return callerid.FromHeader(h.Values(name))
	}
}

// FirstCaller tries each function in order and returns the first caller
// found. Nil functions are skipped.
func FirstCaller(fs ...CallerFunc) CallerFunc {
	return func(ctx context.Context, h http.Header) (string, bool) {
		return callerid.First(fs, func(f CallerFunc) bool { return f == nil }, func(f CallerFunc) (string, bool) { return f(ctx, h) })
	}
}
