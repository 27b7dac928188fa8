package httpint

import (
	"context"
	"net/http"
	"strings"

	"github.com/opledger/opledger/internal/callerid"
)

// CallerFunc returns the fingerprint of the authenticated caller of a
// request, and false when there is none (the middleware then answers 401
// without running the handler). The fingerprint is part of every ledger
// identity, so two callers using the same key never see each other's
// responses; it must come from authentication, never from something the
// client merely claims.
type CallerFunc func(r *http.Request) (caller string, ok bool)

// CallerFromPeerCertificate identifies the caller by its verified TLS
// client certificate: "spki-sha256:" and the hex SHA-256 of the leaf
// certificate's public key, so a renewed certificate with the same key
// keeps the caller's identity (the fingerprint grpcint gives the same
// certificate). Only a chain the server verified counts: use it with
// tls.RequireAndVerifyClientCert.
func CallerFromPeerCertificate() CallerFunc {
	return func(r *http.Request) (string, bool) {
		return callerid.FromCertificate(r.TLS)
	}
}

// CallerFromPrincipal identifies the caller by a principal the
// application authenticated, for example in an auth middleware in front
// of this one that stores it in the request's context. principal returns
// the name and whether there is one; the fingerprint is "principal:" and
// the name. It returns nil for a nil principal.
func CallerFromPrincipal(principal func(ctx context.Context) (string, bool)) CallerFunc {
	if principal == nil {
		return nil
	}
	return func(r *http.Request) (string, bool) {
		return callerid.FromPrincipal(principal(r.Context()))
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
	return func(r *http.Request) (string, bool) {
		return callerid.FromHeader(r.Header[name])
	}
}

// FirstCaller tries each function in order and returns the first caller
// found. Nil functions are skipped.
func FirstCaller(fs ...CallerFunc) CallerFunc {
	return func(r *http.Request) (string, bool) {
		return callerid.First(fs, func(f CallerFunc) bool { return f == nil }, func(f CallerFunc) (string, bool) { return f(r) })
	}
}
