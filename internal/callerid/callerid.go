// Package callerid holds the one set of caller-fingerprint rules of the
// kit's transports: grpcint's, connectint's and httpint's CallerFrom*
// functions read the certificate, the principal or the header from their
// own request and make the fingerprint here, so that one caller is one
// caller (the same string in its ledger identities) on every transport.
package callerid

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
)

// The prefixes of the fingerprints, one per source.
const (
	certificatePrefix = "spki-sha256:"
	principalPrefix   = "principal:"
	headerPrefix      = "header:"
)

// FromCertificate is the fingerprint of the verified client certificate
// of a TLS connection: "spki-sha256:" and the hex SHA-256 of the leaf
// certificate's public key (SubjectPublicKeyInfo), so a renewed
// certificate with the same key keeps the caller's identity. Only a chain
// the server verified counts; without one (st nil, no verified chain) there
// is no caller.
func FromCertificate(st *tls.ConnectionState) (string, bool) {
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return "", false
	}
	sum := sha256.Sum256(st.VerifiedChains[0][0].RawSubjectPublicKeyInfo)
	return certificatePrefix + hex.EncodeToString(sum[:]), true
}

// FromPrincipal is the fingerprint of a principal the application
// authenticated: "principal:" and its name; an empty name, or ok false,
// is no caller.
func FromPrincipal(name string, ok bool) (string, bool) {
	if !ok || name == "" {
		return "", false
	}
	return principalPrefix + name, true
}

// FromHeader is the fingerprint of a trusted header's values: "header:"
// and the value; a missing, empty or repeated header is no caller.
func FromHeader(values []string) (string, bool) {
	if len(values) != 1 || values[0] == "" {
		return "", false
	}
	return headerPrefix + values[0], true
}

// First returns the first caller that one of fs finds (try calls one),
// skipping the nil ones.
func First[F any](fs []F, isNil func(F) bool, try func(F) (string, bool)) (string, bool) {
	for _, f := range fs {
		if isNil(f) {
			continue
		}
		if c, ok := try(f); ok {
			return c, true
		}
	}
	return "", false
}
