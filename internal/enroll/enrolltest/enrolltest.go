// Package enrolltest provides real test doubles for enrollment: a
// crypto/x509 test CA that can serve HTTPS the way osm-server must (leaf and
// root in the chain), and an Issuer that really signs proxy certificates
// and really commits the caller's store ops with the proxy record in one
// transaction, like certificate.Manager. Use them with enroll.NewHandler
// behind an httptest TLS server to test anything that enrolls or renews.
//
// It imports internal/mesh and internal/store, not internal/enroll, so
// enroll's own tests can use it.
package enrolltest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// CA is a self-signed ECDSA P-256 test CA.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA returns a CA valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := NewKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key}
}

// PEM returns the CA certificate, PEM.
func (ca *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Hash returns the --ca-cert-hash pin of the CA: "sha256:" and the hex
// SHA-256 of its SubjectPublicKeyInfo.
func (ca *CA) Hash() string {
	sum := sha256.Sum256(ca.Cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Pool returns a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Sign issues a certificate from tmpl for pub; it sets the serial number.
func (ca *CA) Sign(t testing.TB, tmpl *x509.Certificate, pub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	cert, err := ca.sign(tmpl, pub)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey) (*x509.Certificate, error) {
	tmpl.SerialNumber = serial()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// Serving returns a serving certificate for 127.0.0.1 and localhost, with
// the control plane's identity of trust domain osm.local, whose chain is
// leaf + root, as osm-server serves it.
func (ca *CA) Serving(t testing.TB) tls.Certificate {
	t.Helper()
	key := NewKey(t)
	id, err := url.Parse(mesh.ControlPlaneSPIFFEID("osm.local"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := ca.Sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "osm-server"},
		URIs:        []*url.URL{id},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public())
	return tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}
}

// ServerTLS returns the TLS configuration osm-server's HTTPS listener
// uses: the serving chain, and client certificates verified by the CA if
// given (for renewal).
func (ca *CA) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	return &tls.Config{
		Certificates: []tls.Certificate{ca.Serving(t)},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}
}

// NewKey returns a new ECDSA P-256 key.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// Errors of the Issuer; pass ErrRevoked and ErrNotFound to
// enroll.NewHandler as its refusals.
var (
	ErrConflict = errors.New("enrolltest issuer: store version conflict")
	ErrRevoked  = errors.New("enrolltest issuer: proxy revoked")
	ErrNotFound = errors.New("enrolltest issuer: proxy not found")
)

// ProxyPrefix is where the Issuer keeps proxy records.
const ProxyPrefix = "certificate/proxy/"

// Issuer issues proxy certificates from a CA and keeps proxy records in a
// store, committing the caller's ops in the same transaction.
type Issuer struct {
	ca *CA
	st store.Store

	// Lifetime of issued certificates; NewIssuer sets an hour.
	Lifetime time.Duration
	// Tamper, when set, changes each certificate template before signing
	// (to play a broken issuer). Set it before use.
	Tamper func(*x509.Certificate)

	issued  atomic.Int32
	mu      sync.Mutex
	revoked map[string]bool
}

// NewIssuer returns an Issuer signing with ca and keeping records in st.
func NewIssuer(ca *CA, st store.Store) *Issuer {
	return &Issuer{ca: ca, st: st, Lifetime: time.Hour, revoked: map[string]bool{}}
}

// Issued returns the number of certificates issued at enrollment.
func (f *Issuer) Issued() int { return int(f.issued.Load()) }

// Revoke marks the proxy revoked: renewals are refused with ErrRevoked.
func (f *Issuer) Revoke(cn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked[cn] = true
}

// IssueProxy signs csrDER as a new proxy of svc; the CN and SANs are its
// own, whatever the CSR asks for.
func (f *Issuer) IssueProxy(ctx context.Context, csrDER []byte, svc mesh.MeshService, sa mesh.ServiceAccount, ops ...store.Op) ([]byte, string, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, "", err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", err
	}
	id := mesh.NewProxyIdentity(svc)
	cert, err := f.signProxy(id, sa, csr.PublicKey)
	if err != nil {
		return nil, "", err
	}
	rec, err := json.Marshal(map[string]string{"cn": id.CommonName(), "serviceAccount": sa.String()})
	if err != nil {
		return nil, "", err
	}
	ok, err := f.st.Txn(ctx, append(ops, store.Set(ProxyPrefix+id.CommonName(), 0, rec))...)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", fmt.Errorf("issue proxy %s: %w", id, ErrConflict)
	}
	f.issued.Add(1)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), id.CommonName(), nil
}

// RenewProxy signs csrDER for peer's identity unless the proxy is revoked
// or has no record.
func (f *Issuer) RenewProxy(ctx context.Context, peer *x509.Certificate, csrDER []byte) ([]byte, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, err
	}
	cn := peer.Subject.CommonName
	f.mu.Lock()
	revoked := f.revoked[cn]
	f.mu.Unlock()
	if revoked {
		return nil, fmt.Errorf("proxy %s: %w", cn, ErrRevoked)
	}
	if _, v, err := f.st.Get(ctx, ProxyPrefix+cn); err != nil || v == 0 {
		return nil, fmt.Errorf("proxy %s: %w", cn, ErrNotFound)
	}
	id, err := mesh.ParseProxyIdentity(cn)
	if err != nil {
		return nil, err
	}
	sa := mesh.ServiceAccount{Namespace: id.Service.Namespace, Name: id.Service.Name}
	cert, err := f.signProxy(id, sa, csr.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}

// RootPEM returns the CA.
func (f *Issuer) RootPEM() []byte { return f.ca.PEM() }

func (f *Issuer) signProxy(id mesh.ProxyIdentity, sa mesh.ServiceAccount, pub crypto.PublicKey) (*x509.Certificate, error) {
	u, err := url.Parse(sa.SPIFFEID("osm.local") + "/proxy/" + id.UUID.String())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.CommonName()},
		URIs:        []*url.URL{u},
		NotBefore:   time.Now().Add(-time.Minute),
		NotAfter:    time.Now().Add(f.Lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if f.Tamper != nil {
		f.Tamper(tmpl)
	}
	return f.ca.sign(tmpl, pub)
}

// TLSCertificate returns key and the PEM certificate issued for it as a
// tls.Certificate, as a client presents it.
func TLSCertificate(t testing.TB, key crypto.Signer, certPEM []byte) tls.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("TLSCertificate: no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key, Leaf: leaf}
}
