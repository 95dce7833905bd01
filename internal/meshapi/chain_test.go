package meshapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"
)

func testCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: notAfter.Add(-200 * 24 * time.Hour), NotAfter: notAfter, IsCA: parent == nil, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// VerifyChain checks the chain whatever the clock says, and tells a
// bundle without certificates from one without the issuer.
func TestVerifyChain(t *testing.T) {
	far := time.Now().Add(100 * 24 * time.Hour)
	ca, caKey, caPEM := testCert(t, "ca", nil, nil, far)
	_, _, otherPEM := testCert(t, "other", nil, nil, far)
	// A leaf that expired an hour ago still has a good chain.
	leaf, _, leafPEM := testCert(t, "leaf", ca, caKey, time.Now().Add(-time.Hour))
	parsed, err := ParseCertificatePEM(leafPEM)
	if err != nil || !parsed.Equal(leaf) {
		t.Fatalf("ParseCertificatePEM = %v, %v", parsed, err)
	}
	if err := VerifyChain(leaf, caPEM); err != nil {
		t.Errorf("VerifyChain(expired leaf, its CA) = %v, want nil", err)
	}
	if err := VerifyChain(leaf, otherPEM); err == nil || errors.Is(err, ErrNoCA) {
		t.Errorf("VerifyChain(leaf, another CA) = %v, want a verification error", err)
	}
	if err := VerifyChain(leaf, []byte("not pem")); !errors.Is(err, ErrNoCA) {
		t.Errorf("VerifyChain(leaf, no PEM) = %v, want ErrNoCA", err)
	}
	if _, err := ParseCertificatePEM([]byte("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n")); err == nil {
		t.Error("ParseCertificatePEM of a key block succeeded, want an error")
	}
}
