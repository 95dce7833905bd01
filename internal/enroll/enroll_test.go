package enroll

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store"
)

func TestEnroll(t *testing.T) {
	e := newTestEnv(t)
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	key := newKey(t)

	res, err := meshclient.Enroll(context.Background(), nil, e.join(secret), key)
	if err != nil {
		t.Fatal(err)
	}

	id, err := mesh.ParseProxyIdentity(res.Identity)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.Service, bookstore; got != want {
		t.Errorf("identity service = %v, want %v", got, want)
	}
	cert, err := parseCertPEM(res.CertificatePEM)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cert.Subject.CommonName, res.Identity; got != want {
		t.Errorf("certificate CN = %q, want %q", got, want)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Error("certificate is not for the agent's key")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: e.ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not verify under the mesh root: %v", err)
	}
	if got, want := string(res.CAPEM), string(e.ca.PEM()); got != want {
		t.Errorf("CA bundle = %q, want the mesh root %q", got, want)
	}
	if got, want := res.XDSAddress, testXDS; got != want {
		t.Errorf("xDS address = %q, want %q", got, want)
	}
	if got, want := e.storedToken(t, secret).UsesLeft, 0; got != want {
		t.Errorf("token uses left = %d, want %d", got, want)
	}
	if got, want := e.proxies(t), 1; got != want {
		t.Errorf("proxy records = %d, want %d", got, want)
	}
}

func TestEnrollRefusesServerBeforeSendingToken(t *testing.T) {
	other := enrolltest.NewCA(t, "someone else's root")
	for _, tc := range []struct {
		name string
		// server changes the server before it starts; join the request.
		server func(t *testing.T, e *testEnv)
		join   func(req *meshclient.JoinRequest)
		want   error
	}{
		{
			name: "wrong CA hash",
			join: func(req *meshclient.JoinRequest) { req.CACertHash = other.Hash() },
			want: meshclient.ErrCAHashMismatch,
		},
		{
			name: "server from another CA presenting the pinned root in its chain",
			server: func(t *testing.T, e *testEnv) {
				c := other.Serving(t)
				c.Certificate = [][]byte{c.Certificate[0], e.ca.Cert.Raw}
				e.srv.TLS.Certificates = []tls.Certificate{c}
			},
		},
		{
			name: "server sends no root in its chain",
			server: func(t *testing.T, e *testEnv) {
				c := e.ca.Serving(t)
				c.Certificate = c.Certificate[:1]
				e.srv.TLS.Certificates = []tls.Certificate{c}
			},
			want: meshclient.ErrCAHashMismatch,
		},
		{
			name: "pinned CA but a client-only certificate (a proxy's) serving",
			server: func(t *testing.T, e *testEnv) {
				key := newKey(t)
				leaf := e.ca.Sign(t, &x509.Certificate{
					Subject:     pkix.Name{CommonName: mesh.NewProxyIdentity(bookstore).CommonName()},
					IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
					NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
				}, key.Public())
				e.srv.TLS.Certificates = []tls.Certificate{{Certificate: [][]byte{leaf.Raw, e.ca.Cert.Raw}, PrivateKey: key}}
			},
		},
		{
			name: "pinned CA but a certificate for another host",
			server: func(t *testing.T, e *testEnv) {
				key := newKey(t)
				leaf := e.ca.Sign(t, &x509.Certificate{
					Subject:   pkix.Name{CommonName: "elsewhere"},
					DNSNames:  []string{"elsewhere.example"},
					NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				}, key.Public())
				e.srv.TLS.Certificates = []tls.Certificate{{Certificate: [][]byte{leaf.Raw, e.ca.Cert.Raw}, PrivateKey: key}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(e *testEnv) {
				if tc.server != nil {
					tc.server(t, e)
				}
			})
			secret, _ := e.token(t, TokenRequest{Service: bookstore})
			req := e.join(secret)
			if tc.join != nil {
				tc.join(&req)
			}

			_, err := meshclient.Enroll(context.Background(), nil, req, newKey(t))
			if err == nil {
				t.Fatal("Enroll succeeded, want the server refused")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Enroll error = %v, want %v", err, tc.want)
			}
			if got := e.requests.Load(); got != 0 {
				t.Errorf("%d requests reached the server, want 0 (the token must not be sent)", got)
			}
			if got, want := e.storedToken(t, secret).UsesLeft, 1; got != want {
				t.Errorf("token uses left = %d, want %d", got, want)
			}
			t.Log(err)
		})
	}
}

func TestEnrollTokenRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// token returns the secret to send after preparing the env.
		token      func(t *testing.T, e *testEnv) string
		service    mesh.MeshService
		wantStatus int
		wantReason string
		wantText   string
	}{
		{
			name:       "unknown",
			token:      func(*testing.T, *testEnv) string { return strings.Repeat("ab", 32) },
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonTokenUnknown, wantText: "join token unknown",
		},
		{
			name:       "malformed",
			token:      func(*testing.T, *testEnv) string { return "not-a-token" },
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonTokenUnknown, wantText: "join token unknown",
		},
		{
			name: "expired",
			token: func(t *testing.T, e *testEnv) string {
				secret, tok := e.token(t, TokenRequest{Service: bookstore, TTL: time.Hour})
				e.setNow(tok.Expires.Add(time.Second))
				return secret
			},
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonTokenExpired, wantText: "expired at",
		},
		{
			name: "revoked",
			token: func(t *testing.T, e *testEnv) string {
				secret, tok := e.token(t, TokenRequest{Service: bookstore})
				if _, err := e.tokens.Revoke(context.Background(), tok.ID); err != nil {
					t.Fatal(err)
				}
				return secret
			},
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonTokenRevoked, wantText: "was revoked",
		},
		{
			name: "used up",
			token: func(t *testing.T, e *testEnv) string {
				secret, _ := e.token(t, TokenRequest{Service: bookstore})
				if _, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t)); err != nil {
					t.Fatal(err)
				}
				return secret
			},
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonTokenUsedUp, wantText: "used up",
		},
		{
			name: "token for another service",
			token: func(t *testing.T, e *testEnv) string {
				secret, _ := e.token(t, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: "bookstore"}})
				return secret
			},
			service:    mesh.MeshService{Namespace: "default", Name: "bookbuyer"},
			wantStatus: http.StatusForbidden, wantReason: meshapi.ReasonServiceMismatch, wantText: "is for service default/bookstore, not default/bookbuyer",
		},
		{
			name: "token for the service in another namespace",
			token: func(t *testing.T, e *testEnv) string {
				secret, _ := e.token(t, TokenRequest{Service: bookstore})
				return secret
			},
			service:    mesh.MeshService{Namespace: "prod", Name: "bookstore"},
			wantStatus: http.StatusForbidden, wantReason: meshapi.ReasonServiceMismatch, wantText: "not prod/bookstore",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			secret := tc.token(t, e)
			issued, proxies := e.iss.Issued(), e.proxies(t)
			req := e.join(secret)
			if tc.service != (mesh.MeshService{}) {
				req.Service = tc.service
			}

			_, err := meshclient.Enroll(context.Background(), nil, req, newKey(t))

			var apiErr *meshclient.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("Enroll error = %v, want an *meshclient.APIError", err)
			}
			if got, want := apiErr.Status, tc.wantStatus; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := apiErr.Body.Reason, tc.wantReason; got != want {
				t.Errorf("reason = %q, want %q", got, want)
			}
			if !strings.Contains(err.Error(), tc.wantText) || !strings.Contains(err.Error(), "osm-server token create") {
				t.Errorf("error %q does not say %q and how to get a new token", err, tc.wantText)
			}
			if got, want := e.iss.Issued(), issued; got != want {
				t.Errorf("certificates issued = %d, want %d", got, want)
			}
			if got, want := e.proxies(t), proxies; got != want {
				t.Errorf("proxy records = %d, want %d", got, want)
			}
		})
	}
}

func TestEnrollServiceMismatchDoesNotSpendToken(t *testing.T) {
	e := newTestEnv(t)
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	req := e.join(secret)
	req.Service.Name = "bookbuyer"
	if _, err := meshclient.Enroll(context.Background(), nil, req, newKey(t)); err == nil {
		t.Fatal("Enroll with another service succeeded")
	}
	if _, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t)); err != nil {
		t.Fatalf("Enroll with the token's service after a refused attempt: %v", err)
	}
}

func TestEnrollCSRIdentityIgnored(t *testing.T) {
	e := newTestEnv(t)
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	key := newKey(t)
	evil, _ := url.Parse("spiffe://osm.local/ns/kube-system/sa/admin")
	csr := csrFor(t, key, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: mesh.NewProxyIdentity(mesh.MeshService{Namespace: "kube-system", Name: "admin"}).CommonName()},
		DNSNames: []string{"admin.kube-system"},
		URIs:     []*url.URL{evil},
	})

	var resp meshapi.CertificateResponse
	status, body := e.postJSON(t, e.client(), "/api/v1/enroll", meshapi.EnrollRequest{Token: secret, Service: bookstore, CSR: csr}, &resp)
	if status != http.StatusOK {
		t.Fatalf("status = %d %+v, want 200", status, body)
	}
	cert, err := parseCertPEM([]byte(resp.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	id, err := mesh.ParseProxyIdentity(cert.Subject.CommonName)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.Service, bookstore; got != want {
		t.Errorf("issued for %v, want %v (the server decides the identity)", got, want)
	}
	if len(cert.DNSNames) != 0 {
		t.Errorf("issued DNS SANs %v, want none", cert.DNSNames)
	}
	for _, u := range cert.URIs {
		if !strings.HasPrefix(u.String(), "spiffe://osm.local/ns/default/sa/bookstore/") {
			t.Errorf("issued URI SAN %s, want only bookstore's", u)
		}
	}
}

func TestEnrollBadCSR(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	forged := func() string {
		// Flip a bit of the signature (the last byte of the DER): proof of
		// possession fails.
		der := pemBytes(t, csrFor(t, newKey(t), &x509.CertificateRequest{}))
		der[len(der)-1] ^= 1
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	}
	for _, tc := range []struct {
		name       string
		csr        func() string
		wantStatus int
		wantReason string
		wantText   string
	}{
		{"RSA 1024", func() string { return csrFor(t, rsaKey, &x509.CertificateRequest{}) }, http.StatusBadRequest, meshapi.ReasonWeakKey, "RSA key of 1024 bits is too weak"},
		{"not PEM", func() string { return "hello" }, http.StatusBadRequest, meshapi.ReasonBadRequest, "CERTIFICATE REQUEST"},
		{"bad signature", forged, http.StatusBadRequest, meshapi.ReasonBadRequest, "bad signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			secret, _ := e.token(t, TokenRequest{Service: bookstore})
			status, body := e.postJSON(t, e.client(), "/api/v1/enroll", meshapi.EnrollRequest{Token: secret, Service: bookstore, CSR: tc.csr()}, &meshapi.CertificateResponse{})
			if got, want := status, tc.wantStatus; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := body.Reason, tc.wantReason; got != want {
				t.Errorf("reason = %q, want %q", got, want)
			}
			if !strings.Contains(body.Error, tc.wantText) {
				t.Errorf("error %q does not say %q", body.Error, tc.wantText)
			}
			if got, want := e.storedToken(t, secret).UsesLeft, 1; got != want {
				t.Errorf("token uses left = %d, want %d", got, want)
			}
		})
	}

	t.Run("client refuses a weak key before sending", func(t *testing.T) {
		e := newTestEnv(t)
		secret, _ := e.token(t, TokenRequest{Service: bookstore})
		_, err := meshclient.Enroll(context.Background(), nil, e.join(secret), rsaKey)
		if err == nil || !strings.Contains(err.Error(), "too weak") {
			t.Errorf("Enroll with RSA 1024 = %v, want a weak key error", err)
		}
		if got := e.requests.Load(); got != 0 {
			t.Errorf("%d requests reached the server, want 0", got)
		}
	})
}

func TestEnrollChecksIssuerResult(t *testing.T) {
	e := newTestEnv(t)
	e.iss.Tamper = func(c *x509.Certificate) {
		c.Subject.CommonName = mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: "other"}).CommonName()
	}
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	_, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t))
	var apiErr *meshclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInternalServerError {
		t.Fatalf("Enroll with an issuer returning another identity = %v, want a 500", err)
	}
}

func TestEnrollConcurrentSingleUse(t *testing.T) {
	for _, uses := range []int{1, 3} {
		t.Run(fmt.Sprint("uses=", uses), func(t *testing.T) {
			e := newTestEnv(t)
			secret, _ := e.token(t, TokenRequest{Service: bookstore, Uses: uses})
			const n = 20
			errs := e.enrollAtOnce(t, secret, n)

			reasons := map[string]int{}
			for _, err := range errs {
				var apiErr *meshclient.APIError
				switch {
				case err == nil:
					reasons["ok"]++
				case errors.As(err, &apiErr):
					reasons[apiErr.Body.Reason]++
				default:
					t.Errorf("Enroll: %v", err)
				}
			}
			if diff := cmp.Diff(map[string]int{"ok": uses, meshapi.ReasonTokenUsedUp: n - uses}, reasons); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if got, want := e.proxies(t), uses; got != want {
				t.Errorf("proxy records = %d, want %d", got, want)
			}
			if got, want := e.storedToken(t, secret).UsesLeft, 0; got != want {
				t.Errorf("token uses left = %d, want %d", got, want)
			}
		})
	}
}

// racingIssuer plays a concurrent enrollment that spends the token between
// the handler's read of it and its own IssueProxy: the first call runs
// first() before issuing.
type racingIssuer struct {
	Issuer
	raced atomic.Bool
	first func()
}

func (r *racingIssuer) IssueProxy(ctx context.Context, csrDER []byte, svc mesh.MeshService, sa mesh.ServiceAccount, ops ...store.Op) ([]byte, string, error) {
	if r.raced.CompareAndSwap(false, true) { // not sync.Once: first() re-enters
		r.first()
	}
	return r.Issuer.IssueProxy(ctx, csrDER, svc, sa, ops...)
}

// TestEnrollTokenSpentMeanwhile covers the retry path deterministically:
// another replica spends the token between this one's read and its write,
// the version check fails, the handler reads the token again and either
// retries (uses left) or answers used up.
func TestEnrollTokenSpentMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		uses       int
		wantReason string
		wantIssued int
	}{
		{uses: 1, wantReason: meshapi.ReasonTokenUsedUp, wantIssued: 1},
		{uses: 2, wantReason: "", wantIssued: 2},
	} {
		t.Run(fmt.Sprint("uses=", tc.uses), func(t *testing.T) {
			var secret string
			e := newTestEnv(t, func(e *testEnv) {
				e.issuer = &racingIssuer{Issuer: e.iss, first: func() {
					// Another replica on the same store spends the token.
					replica := NewHandler(slog.New(slog.DiscardHandler), NewTokens(e.st, e.now), e.iss, func(string) string { return testXDS })
					body := jsonBody(t, meshapi.EnrollRequest{Token: secret, Service: bookstore, CSR: csrFor(t, newKey(t), &x509.CertificateRequest{})})
					rec := httptest.NewRecorder()
					replica.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/enroll", body))
					if rec.Code != http.StatusOK {
						t.Errorf("the racing enrollment on another replica: %d %s", rec.Code, rec.Body)
					}
				}}
			})
			secret, _ = e.token(t, TokenRequest{Service: bookstore, Uses: tc.uses})

			_, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t))

			reason := ""
			var apiErr *meshclient.APIError
			if errors.As(err, &apiErr) {
				reason = apiErr.Body.Reason
			} else if err != nil {
				t.Fatal(err)
			}
			if reason != tc.wantReason {
				t.Errorf("outcome = %q (%v), want %q", reason, err, tc.wantReason)
			}
			if got, want := e.iss.Issued(), tc.wantIssued; got != want {
				t.Errorf("certificates issued = %d, want %d", got, want)
			}
			if got, want := e.proxies(t), tc.wantIssued; got != want {
				t.Errorf("proxy records = %d, want %d", got, want)
			}
			if got, want := e.storedToken(t, secret).UsesLeft, tc.uses-tc.wantIssued; got != want {
				t.Errorf("uses left = %d, want %d", got, want)
			}
		})
	}
}

// failingIssuer fails every issue without touching the store.
type failingIssuer struct{ Issuer }

func (failingIssuer) IssueProxy(context.Context, []byte, mesh.MeshService, mesh.ServiceAccount, ...store.Op) ([]byte, string, error) {
	return nil, "", errors.New("signer unavailable")
}

func TestEnrollIssuerFailureSpendsNothing(t *testing.T) {
	e := newTestEnv(t, func(e *testEnv) { e.issuer = failingIssuer{e.iss} })
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	_, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t))
	var apiErr *meshclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInternalServerError || !strings.Contains(err.Error(), "signer unavailable") {
		t.Fatalf("Enroll = %v, want a 500 naming the issuer's error", err)
	}
	if got, want := e.storedToken(t, secret).UsesLeft, 1; got != want {
		t.Errorf("uses left = %d, want %d", got, want)
	}
}
