package certificate

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// rootLifetime is the validity of the mesh root. The root is not rotated
// yet (see the package documentation).
const rootLifetime = 10 * 365 * 24 * time.Hour

// caRecord is the stored form of the mesh CA at caKey.
type caRecord struct {
	TrustDomain string `json:"trustDomain"`
	CertPEM     string `json:"certPEM"`
	KeyPEM      string `json:"keyPEM"`
}

// authority is the loaded mesh CA.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	pool    *x509.CertPool
}

// newCARecord creates a self-signed ECDSA P-256 root for trustDomain.
func newCARecord(trustDomain string, now time.Time) (caRecord, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return caRecord{}, fmt.Errorf("generate mesh CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return caRecord{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "osm-vm mesh CA " + trustDomain, Organization: []string{"osm-vm"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(rootLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return caRecord{}, fmt.Errorf("create mesh CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return caRecord{}, fmt.Errorf("encode mesh CA key: %w", err)
	}
	return caRecord{
		TrustDomain: trustDomain,
		CertPEM:     string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeyPEM:      string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}, nil
}

// loadAuthority parses a stored CA record.
func loadAuthority(rec caRecord) (*authority, error) {
	cert, err := parseCertPEM([]byte(rec.CertPEM))
	if err != nil {
		return nil, fmt.Errorf("mesh CA certificate: %w", err)
	}
	block, _ := pem.Decode([]byte(rec.KeyPEM))
	if block == nil {
		return nil, errors.New("mesh CA key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mesh CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("mesh CA key is %T, want ECDSA", k)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("mesh CA key does not match the CA certificate")
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &authority{cert: cert, key: key, certPEM: []byte(rec.CertPEM), pool: pool}, nil
}

// sign issues a certificate for pub from tmpl (its serial is set here) and
// returns it parsed and as PEM.
func (a *authority) sign(tmpl *x509.Certificate, pub crypto.PublicKey) (*x509.Certificate, []byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, pub, a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse issued certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	n := new(big.Int).SetBytes(b)
	if n.Sign() == 0 {
		n.SetInt64(1)
	}
	return n, nil
}

// serialString is how serial numbers are written in records and
// Certificate.GetSerialNumber: lower-case hex without leading zeros.
func serialString(n *big.Int) string { return n.Text(16) }

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

// CAHash is [meshapi.CAHash] of the DER certificate rootDER, the pin an
// agent compares with the hash of the root the server presents.
func CAHash(rootDER []byte) string { return meshapi.CAHash(rootDER) }
