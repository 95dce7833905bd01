package meshapi

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"time"
)

// ParseCertificatePEM parses the first PEM "CERTIFICATE" block of b.
func ParseCertificatePEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New(`want a PEM "CERTIFICATE" block`)
	}
	return x509.ParseCertificate(block.Bytes)
}

// ErrNoCA is returned by VerifyChain for a CA bundle without a PEM
// certificate.
var ErrNoCA = errors.New("no PEM certificate in the CA bundle")

// VerifyChain checks that cert is issued by a CA in the PEM bundle caPEM.
// Only the chain counts: it is checked at a time within cert's validity,
// so a machine whose clock is off does not throw away a certificate it
// spent a token on (expiry is the renewal loop's business).
func VerifyChain(cert *x509.Certificate, caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return ErrNoCA
	}
	at := time.Now()
	switch {
	case at.Before(cert.NotBefore):
		at = cert.NotBefore
	case at.After(cert.NotAfter):
		at = cert.NotAfter
	}
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}
