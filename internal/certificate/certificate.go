package certificate

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"
)

// CommonName is a certificate's subject common name.
type CommonName string

// String returns the common name.
func (cn CommonName) String() string { return string(cn) }

// Certificate is an issued certificate with its key: the seed's
// Certificater. It is immutable; a rotation produces a new Certificate.
type Certificate struct {
	commonName CommonName
	chainPEM   []byte
	keyPEM     []byte
	caPEM      []byte
	leaf       *x509.Certificate
}

func newCertificate(leaf *x509.Certificate, chainPEM, keyPEM, caPEM []byte) *Certificate {
	return &Certificate{
		commonName: CommonName(leaf.Subject.CommonName),
		chainPEM:   chainPEM,
		keyPEM:     keyPEM,
		caPEM:      caPEM,
		leaf:       leaf,
	}
}

// GetCommonName returns the subject common name.
func (c *Certificate) GetCommonName() CommonName { return c.commonName }

// GetCertificateChain returns the certificate as PEM (the leaf only: the
// mesh has no intermediate CAs; the root is GetIssuingCA).
func (c *Certificate) GetCertificateChain() []byte { return bytes.Clone(c.chainPEM) }

// GetPrivateKey returns the private key as PKCS#8 PEM, or nil for the root
// certificate (the CA key never leaves the manager).
func (c *Certificate) GetPrivateKey() []byte { return bytes.Clone(c.keyPEM) }

// AppendPEM appends the certificate chain and the private key PEM (what
// GetCertificateChain and GetPrivateKey return) to f's encoding of them,
// without copying either first: for a caller that encodes them for
// every service account at once (the xDS publisher's secrets). f must
// not modify or keep chain and key.
func (c *Certificate) AppendPEM(dst []byte, f func(dst, chain, key []byte) ([]byte, error)) ([]byte, error) {
	return f(dst, c.chainPEM, c.keyPEM)
}

// GetIssuingCA returns the PEM of the mesh root that issued the certificate.
func (c *Certificate) GetIssuingCA() []byte { return bytes.Clone(c.caPEM) }

// GetExpiration returns the certificate's NotAfter.
func (c *Certificate) GetExpiration() time.Time { return c.leaf.NotAfter }

// GetSerialNumber returns the serial number in lower-case hex.
func (c *Certificate) GetSerialNumber() string { return serialString(c.leaf.SerialNumber) }

// GetURISANs returns the URI subject alternative names (the SPIFFE ID).
func (c *Certificate) GetURISANs() []string {
	out := make([]string, 0, len(c.leaf.URIs))
	for _, u := range c.leaf.URIs {
		out = append(out, u.String())
	}
	return out
}

// X509 returns the parsed certificate. Callers must not modify it.
func (c *Certificate) X509() *x509.Certificate { return c.leaf }

// TLS returns the certificate and key for a tls.Config.
func (c *Certificate) TLS() (tls.Certificate, error) {
	if len(c.keyPEM) == 0 {
		return tls.Certificate{}, fmt.Errorf("certificate %s has no private key available", c.commonName)
	}
	tc, err := tls.X509KeyPair(c.chainPEM, c.keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s: %w", c.commonName, err)
	}
	tc.Leaf = c.leaf
	return tc, nil
}
