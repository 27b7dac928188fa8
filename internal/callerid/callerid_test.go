package callerid

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// TestRules: the fingerprints every transport gives, written down once.
func TestRules(t *testing.T) {
	cert := &x509.Certificate{RawSubjectPublicKeyInfo: []byte("key")}
	st := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	if c, ok := FromCertificate(st); !ok || c != "spki-sha256:2c70e12b7a0646f92279f427c7b38e7334d8e5389cff167a1dc30e73f826b683" {
		t.Errorf("certificate: %q, %v", c, ok)
	}
	for _, st := range []*tls.ConnectionState{nil, {}, {PeerCertificates: []*x509.Certificate{cert}}} {
		if _, ok := FromCertificate(st); ok {
			t.Errorf("an unverified connection %+v has a caller", st)
		}
	}
	if c, ok := FromPrincipal("alice", true); !ok || c != "principal:alice" {
		t.Errorf("principal: %q, %v", c, ok)
	}
	if _, ok := FromPrincipal("", true); ok {
		t.Error("an empty principal is a caller")
	}
	if _, ok := FromPrincipal("alice", false); ok {
		t.Error("no principal is a caller")
	}
	if c, ok := FromHeader([]string{"alice"}); !ok || c != "header:alice" {
		t.Errorf("header: %q, %v", c, ok)
	}
	for _, v := range [][]string{nil, {""}, {"a", "b"}} {
		if _, ok := FromHeader(v); ok {
			t.Errorf("header values %q are a caller", v)
		}
	}
	type f func() (string, bool)
	none := func() (string, bool) { return "", false }
	bob := func() (string, bool) { return "principal:bob", true }
	c, ok := First([]f{nil, none, bob}, func(g f) bool { return g == nil }, func(g f) (string, bool) { return g() })
	if !ok || c != "principal:bob" {
		t.Errorf("first: %q, %v", c, ok)
	}
}
