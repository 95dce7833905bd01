package enroll

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
)

func newKey(t testing.TB) *ecdsa.PrivateKey { return enrolltest.NewKey(t) }

// testEnv is a real HTTPS enrollment server on 127.0.0.1.
type testEnv struct {
	ca     *enrolltest.CA
	st     store.Store
	tokens *Tokens
	iss    *enrolltest.Issuer
	// issuer is what the handlers use; configure may wrap iss.
	issuer Issuer
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
	return newTestEnvOn(t, store.NewMemory(), configure...)
}

// newBoltTestEnv is newTestEnv on a real bbolt file in a temporary
// directory.
func newBoltTestEnv(t testing.TB, configure ...func(*testEnv)) *testEnv {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newTestEnvOn(t, st, configure...)
}

func newTestEnvOn(t testing.TB, st store.Store, configure ...func(*testEnv)) *testEnv {
	t.Helper()
	e := &testEnv{ca: enrolltest.NewCA(t, "osm mesh root"), st: st}
	e.tokens = NewTokens(e.st, e.now)
	e.iss = enrolltest.NewIssuer(e.ca, e.st)
	e.issuer = e.iss
	mux := http.NewServeMux()
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	e.srv.TLS = e.ca.ServerTLS(t)
	e.srv.Config.ErrorLog = stdlog.New(testWriter{t}, "", 0)
	for _, f := range configure {
		f(e)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := NewHandler(log, e.tokens, e.issuer, func(string) string { return testXDS }, enrolltest.ErrRevoked, enrolltest.ErrNotFound)
	mux.Handle("/api/v1/enroll", api)
	mux.Handle("/api/v1/renew", api)
	mux.Handle("/api/v1/tokens", NewTokenAdminHandler(log, e.tokens))
	mux.Handle("/api/v1/tokens/", NewTokenAdminHandler(log, e.tokens))
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
	kvs, err := e.st.List(context.Background(), enrolltest.ProxyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(kvs)
}

// join returns a meshclient.JoinRequest for secret and bookstore.
// enrollAtOnce enrolls n machines with secret, all released together, and
// returns each one's error.
func (e *testEnv) enrollAtOnce(t testing.TB, secret string, n int) []error {
	t.Helper()
	errs := make([]error, n)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		key := newKey(t)
		wg.Go(func() {
			<-start
			_, errs[i] = meshclient.Enroll(context.Background(), nil, e.join(secret), key)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func (e *testEnv) join(secret string) meshclient.JoinRequest {
	return meshclient.JoinRequest{Server: e.srv.URL, Token: secret, CACertHash: e.ca.Hash(), Service: bookstore}
}

// client returns an HTTPS client trusting the test CA, presenting certs.
func (e *testEnv) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: certs}}}
}

// postJSON posts v and returns the status and the decoded error body.
func (e *testEnv) postJSON(t testing.TB, hc *http.Client, path string, v any, out any) (int, meshapi.ErrorBody) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	err = meshclient.NewAdmin(e.srv.URL, hc, "").Do(context.Background(), http.MethodPost, path, "application/json", b, out)
	var apiErr *meshclient.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status, apiErr.Body
	}
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return http.StatusOK, meshapi.ErrorBody{}
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
