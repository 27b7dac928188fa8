// Package testcerts makes a throw-away certificate authority and the
// certificates it signs, for tests and examples that run mTLS over
// loopback. Nothing here is for production: the keys live in memory for
// an hour.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"time"
)

// CA is a self-signed certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA returns a new certificate authority named cn, valid for an hour.
func NewCA(cn string) (*CA, error) {
	cert, key, err := sign(cn, nil, true, 0)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key}, nil
}

// Cert returns the authority's certificate.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

// Pool returns a pool holding the authority's certificate: the RootCAs of
// a client, the ClientCAs of a server.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server returns a server certificate for 127.0.0.1 signed by ca.
func (ca *CA) Server(cn string) (tls.Certificate, error) {
	return ca.issue(cn, x509.ExtKeyUsageServerAuth)
}

// Client returns a client certificate named cn signed by ca, with a key
// of its own.
func (ca *CA) Client(cn string) (tls.Certificate, error) {
	return ca.issue(cn, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(cn string, usage x509.ExtKeyUsage) (tls.Certificate, error) {
	cert, key, err := sign(cn, ca, false, usage)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// sign makes a P-256 key and a certificate for it, signed by parent (self
// signed when parent is nil).
func sign(cn string, parent *CA, isCA bool, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: isCA,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}
