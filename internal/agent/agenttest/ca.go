// Package agenttest holds fakes for testing the agent against real TLS,
// real gRPC and real processes: a test certificate authority, an ADS server,
// and a stand-in for Envoy run as a helper process. It is imported only by
// tests.
package agenttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// TrustDomain is the trust domain of the test CA's SPIFFE identities.
const TrustDomain = "osm.local"

// ControlPlaneID is the identity the test CA's ServerTLS certificates
// carry, as osm-server's serving certificates do.
var ControlPlaneID = mesh.ControlPlaneSPIFFEID(TrustDomain)

// CA is a throwaway ECDSA P-256 certificate authority.
type CA struct {
	Cert   *x509.Certificate
	Key    *ecdsa.PrivateKey
	PEM    []byte
	serial atomic.Int64
}

// NewCA returns a new CA valid for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := meshapi.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "osm-vm test CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.serial.Store(1)
	return ca
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Sign issues a certificate for pub with common name cn, valid from now for
// lifetime, usable for client and server auth, with hosts as DNS or IP SANs.
// A cn that is a proxy identity gets the proxy's SPIFFE ID, as osm-server
// issues it; any other spiffe://<TrustDomain>/test/<cn>. It returns the
// certificate PEM.
func (ca *CA) Sign(cn string, pub crypto.PublicKey, lifetime time.Duration, hosts ...string) ([]byte, error) {
	uri := "spiffe://" + TrustDomain + "/test/" + url.PathEscape(cn)
	if id, err := mesh.ParseProxyIdentity(cn); err == nil {
		sa := mesh.ServiceAccount{Namespace: id.Service.Namespace, Name: id.Service.Name}
		uri = sa.SPIFFEID(TrustDomain) + "/proxy/" + id.UUID.String()
	}
	return ca.sign(cn, pub, lifetime, []string{uri}, hosts)
}

func (ca *CA) sign(cn string, pub crypto.PublicKey, lifetime time.Duration, uris, hosts []string) ([]byte, error) {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Second),
		NotAfter:     time.Now().Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// KeyPair issues a fresh key and certificate (as Sign) and returns both as
// PEM.
func (ca *CA) KeyPair(t testing.TB, cn string, lifetime time.Duration, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.keyPair(t, func(pub crypto.PublicKey) ([]byte, error) { return ca.Sign(cn, pub, lifetime, hosts...) })
}

func (ca *CA) keyPair(t testing.TB, sign func(crypto.PublicKey) ([]byte, error)) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := meshapi.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if certPEM, err = sign(key.Public()); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// ServerTLS returns a TLS config for a server on 127.0.0.1 whose
// certificate the CA signed, with the control plane's identity
// (ControlPlaneID) as osm-server's, and which requires client certificates
// the CA signed.
func (ca *CA) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	certPEM, keyPEM := ca.keyPair(t, func(pub crypto.PublicKey) ([]byte, error) {
		return ca.sign("osm-server", pub, time.Hour, []string{ControlPlaneID}, []string{"127.0.0.1", "localhost"})
	})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// ImpostorTLS is ServerTLS with a machine's certificate instead of the
// control plane's: the service certificate of default/bookstore, which the
// mesh CA signs for server authentication between proxies, with
// 127.0.0.1 and localhost as SANs. Only the control plane's identity tells
// it from the server.
func (ca *CA) ImpostorTLS(t testing.TB) *tls.Config {
	t.Helper()
	certPEM, keyPEM := ca.keyPair(t, func(pub crypto.PublicKey) ([]byte, error) {
		sa := mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}
		return ca.sign("bookstore.default."+TrustDomain, pub, time.Hour, []string{sa.SPIFFEID(TrustDomain)}, []string{"127.0.0.1", "localhost"})
	})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ca.ServerTLS(t)
	cfg.Certificates = []tls.Certificate{pair}
	return cfg
}
