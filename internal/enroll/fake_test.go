package enroll

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// testCA is a real crypto/x509 CA for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
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
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

func (ca *testCA) hash() string { return CAHash(ca.cert.Raw) }

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// sign issues a certificate from tmpl for pub.
func (ca *testCA) sign(t testing.TB, tmpl *x509.Certificate, pub crypto.PublicKey) *x509.Certificate {
	t.Helper()
	tmpl.SerialNumber = serial(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// serving returns a serving certificate for 127.0.0.1 and localhost whose
// chain is leaf + root, as the package doc asks of the server.
func (ca *testCA) serving(t testing.TB) tls.Certificate {
	t.Helper()
	key := newKey(t)
	leaf := ca.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "osm-server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public())
	return tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	errFakeConflict = errors.New("fake issuer: store version conflict")
	errFakeRevoked  = errors.New("fake issuer: proxy revoked")
	errFakeNotFound = errors.New("fake issuer: proxy not found")
)

// fakeIssuer is a small, real Issuer: it signs with a test CA and commits
// the caller's ops with the proxy record in one store transaction, like
// certificate.Manager.
type fakeIssuer struct {
	t        testing.TB
	ca       *testCA
	st       *store.Memory
	lifetime time.Duration
	// notAfter, when set, overrides the lifetime (expired certificates).
	notAfter time.Time
	// tamper, when set, changes the template before signing (a broken issuer).
	tamper func(*x509.Certificate)
	issued atomic.Int32

	mu      sync.Mutex
	revoked map[string]bool
}

func newFakeIssuer(t testing.TB, ca *testCA, st *store.Memory) *fakeIssuer {
	return &fakeIssuer{t: t, ca: ca, st: st, lifetime: time.Hour, revoked: map[string]bool{}}
}

const proxyPrefix = "certificate/proxy/"

func (f *fakeIssuer) IssueProxy(ctx context.Context, csrDER []byte, svc mesh.MeshService, sa mesh.ServiceAccount, ops ...store.Op) ([]byte, string, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, "", err
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", err
	}
	id := mesh.NewProxyIdentity(svc)
	cert := f.signProxy(id, sa, csr.PublicKey)
	rec, _ := json.Marshal(map[string]string{"cn": id.CommonName(), "serviceAccount": sa.String()})
	ok, err := f.st.Txn(ctx, append(ops, store.Set(proxyPrefix+id.CommonName(), 0, rec))...)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", fmt.Errorf("issue proxy %s: %w", id, errFakeConflict)
	}
	f.issued.Add(1)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), id.CommonName(), nil
}

func (f *fakeIssuer) RenewProxy(ctx context.Context, peer *x509.Certificate, csrDER []byte) ([]byte, error) {
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, err
	}
	cn := peer.Subject.CommonName
	f.mu.Lock()
	revoked := f.revoked[cn]
	f.mu.Unlock()
	if revoked {
		return nil, fmt.Errorf("proxy %s: %w", cn, errFakeRevoked)
	}
	if _, v, err := f.st.Get(ctx, proxyPrefix+cn); err != nil || v == 0 {
		return nil, fmt.Errorf("proxy %s: %w", cn, errFakeNotFound)
	}
	id, err := mesh.ParseProxyIdentity(cn)
	if err != nil {
		return nil, err
	}
	sa := mesh.ServiceAccount{Namespace: id.Service.Namespace, Name: id.Service.Name}
	cert := f.signProxy(id, sa, csr.PublicKey)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}

func (f *fakeIssuer) RootPEM() []byte { return f.ca.pem() }

func (f *fakeIssuer) revoke(cn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked[cn] = true
}

func (f *fakeIssuer) signProxy(id mesh.ProxyIdentity, sa mesh.ServiceAccount, pub crypto.PublicKey) *x509.Certificate {
	u, err := url.Parse(sa.SPIFFEID("osm.local") + "/proxy/" + id.UUID.String())
	if err != nil {
		f.t.Error(err)
	}
	notAfter := time.Now().Add(f.lifetime)
	if !f.notAfter.IsZero() {
		notAfter = f.notAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: id.CommonName()},
		URIs:        []*url.URL{u},
		NotBefore:   time.Now().Add(-time.Minute),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if f.tamper != nil {
		f.tamper(tmpl)
	}
	return f.ca.sign(f.t, tmpl, pub)
}

// testEnv is a real HTTPS enrollment server on 127.0.0.1.
type testEnv struct {
	ca     *testCA
	st     *store.Memory
	tokens *Tokens
	iss    *fakeIssuer
	srv    *httptest.Server
	// requests counts requests that reached the handlers.
	requests atomic.Int32
	// clock is what the server believes now is.
	clock atomic.Pointer[time.Time]
}

const testXDS = "127.0.0.1:15128"

var bookstore = mesh.MeshService{Namespace: "default", Name: "bookstore"}

// newTestEnv starts the server after configure, if any, has changed it.
func newTestEnv(t testing.TB, configure ...func(*testEnv)) *testEnv {
	t.Helper()
	e := &testEnv{ca: newTestCA(t, "osm mesh root"), st: store.NewMemory()}
	e.tokens = NewTokens(e.st, e.now)
	e.iss = newFakeIssuer(t, e.ca, e.st)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mux := http.NewServeMux()
	mux.Handle("/api/v1/enroll", NewHandler(log, e.tokens, e.iss, testXDS, errFakeRevoked, errFakeNotFound))
	mux.Handle("/api/v1/renew", NewHandler(log, e.tokens, e.iss, testXDS, errFakeRevoked, errFakeNotFound))
	mux.Handle("/api/v1/tokens", NewTokenAdminHandler(log, e.tokens))
	mux.Handle("/api/v1/tokens/", NewTokenAdminHandler(log, e.tokens))
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	e.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{e.ca.serving(t)},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    e.ca.pool(),
		MinVersion:   tls.VersionTLS12,
	}
	e.srv.Config.ErrorLog = stdlog.New(testWriter{t}, "", 0)
	for _, f := range configure {
		f(e)
	}
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *testEnv) now() time.Time {
	if p := e.clock.Load(); p != nil {
		return *p
	}
	return time.Now()
}

func (e *testEnv) setNow(t time.Time) { e.clock.Store(&t) }

// token creates a join token.
func (e *testEnv) token(t testing.TB, req TokenRequest) (string, Token) {
	t.Helper()
	secret, tok, err := e.tokens.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return secret, tok
}

// storedToken reads a token's record back from the store.
func (e *testEnv) storedToken(t testing.TB, secret string) Token {
	t.Helper()
	tok, _, v, err := e.tokens.lookup(context.Background(), secret)
	if err != nil || v == 0 {
		t.Fatalf("token not in the store: version %d, %v", v, err)
	}
	return tok
}

// proxies returns the number of proxy records in the store.
func (e *testEnv) proxies(t testing.TB) int {
	t.Helper()
	kvs, err := e.st.List(context.Background(), proxyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(kvs)
}

// join returns a JoinRequest for secret and bookstore.
func (e *testEnv) join(secret string) JoinRequest {
	return JoinRequest{Server: e.srv.URL, Token: secret, CACertHash: e.ca.hash(), Service: bookstore}
}

// client returns an HTTPS client trusting the test CA, presenting certs.
func (e *testEnv) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.pool(), Certificates: certs}}}
}

// postJSON posts v and returns the status and the decoded error body.
func (e *testEnv) postJSON(t testing.TB, hc *http.Client, path string, v any, out any) (int, ErrorBody) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+path, jsonBody(t, v))
	if err != nil {
		t.Fatal(err)
	}
	err = roundTrip(hc, req, out)
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status, apiErr.Body
	}
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return http.StatusOK, ErrorBody{}
}

func jsonBody(t testing.TB, v any) io.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

// csrFor returns a PEM CSR for key asking for what tmpl says.
func csrFor(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) string {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func pemBytes(t testing.TB, s string) []byte {
	t.Helper()
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		t.Fatalf("no PEM in %q", s)
	}
	return block.Bytes
}

// testWriter sends the server's error log to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
