package enroll

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store"
)

// enrolled enrolls one proxy of bookstore and returns its TLS certificate.
func (e *testEnv) enrolled(t *testing.T) (tls.Certificate, meshclient.Result) {
	t.Helper()
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	key := newKey(t)
	res, err := meshclient.Enroll(context.Background(), nil, e.join(secret), key)
	if err != nil {
		t.Fatal(err)
	}
	cert := enrolltest.TLSCertificate(t, key, res.CertificatePEM)
	return cert, res
}

func TestRenew(t *testing.T) {
	e := newTestEnv(t)
	cert, first := e.enrolled(t)
	newKey := newKey(t)

	res, err := meshclient.Renew(context.Background(), e.srv.URL, first.CAPEM, cert, newKey)
	if err != nil {
		t.Fatal(err)
	}

	if got, want := res.Identity, first.Identity; got != want {
		t.Errorf("renewed identity = %q, want %q", got, want)
	}
	renewed, err := parseCertPEM(res.CertificatePEM)
	if err != nil {
		t.Fatal(err)
	}
	if !newKey.PublicKey.Equal(renewed.PublicKey) {
		t.Error("renewed certificate is not for the new key")
	}
	if renewed.SerialNumber.Cmp(cert.Leaf.SerialNumber) == 0 {
		t.Error("renewed certificate has the old serial number")
	}
	if got, want := res.XDSAddress, testXDS; got != want {
		t.Errorf("xDS address = %q, want %q", got, want)
	}
}

func TestRenewRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cert returns the client certificate to present, nil for none.
		cert       func(t *testing.T, e *testEnv) *tls.Certificate
		wantStatus int
		wantReason string
	}{
		{
			name:       "no client certificate",
			cert:       func(*testing.T, *testEnv) *tls.Certificate { return nil },
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonClientCertRequired,
		},
		{
			name: "revoked proxy",
			cert: func(t *testing.T, e *testEnv) *tls.Certificate {
				c, res := e.enrolled(t)
				e.iss.Revoke(res.Identity)
				return &c
			},
			wantStatus: http.StatusForbidden, wantReason: meshapi.ReasonRefused,
		},
		{
			name: "proxy the issuer does not know",
			cert: func(t *testing.T, e *testEnv) *tls.Certificate {
				c, res := e.enrolled(t)
				if _, err := e.st.Txn(context.Background(), store.Delete(enrolltest.ProxyPrefix+res.Identity, store.AnyVersion)); err != nil {
					t.Fatal(err)
				}
				return &c
			},
			wantStatus: http.StatusForbidden, wantReason: meshapi.ReasonRefused,
		},
		{
			name: "expired by the server's clock",
			cert: func(t *testing.T, e *testEnv) *tls.Certificate {
				c, _ := e.enrolled(t)
				e.setNow(c.Leaf.NotAfter.Add(time.Second))
				return &c
			},
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonCertificateExpired,
		},
		{
			name: "a mesh certificate that is not a proxy's",
			cert: func(t *testing.T, e *testEnv) *tls.Certificate {
				key := newKey(t)
				leaf := e.ca.Sign(t, &x509.Certificate{
					Subject:   pkix.Name{CommonName: "bookstore.default.svc"},
					NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
					ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
				}, key.Public())
				return &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
			},
			wantStatus: http.StatusUnauthorized, wantReason: meshapi.ReasonNotProxyCertificate,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			c := tc.cert(t, e)
			var certs []tls.Certificate
			if c != nil {
				certs = append(certs, *c)
			}
			issued := e.iss.Issued()
			csr := csrFor(t, newKey(t), &x509.CertificateRequest{})
			status, body := e.postJSON(t, e.client(certs...), "/api/v1/renew", meshapi.RenewRequest{CSR: csr}, &meshapi.CertificateResponse{})
			if got, want := status, tc.wantStatus; got != want {
				t.Errorf("status = %d, want %d (%s)", got, want, body.Error)
			}
			if got, want := body.Reason, tc.wantReason; got != want {
				t.Errorf("reason = %q, want %q (%s)", got, want, body.Error)
			}
			if tc.wantReason == meshapi.ReasonRefused || tc.wantReason == meshapi.ReasonCertificateExpired {
				if !strings.Contains(body.Error, "enroll again") {
					t.Errorf("error %q does not say to enroll again", body.Error)
				}
			}
			if got, want := e.iss.Issued(), issued; got != want {
				t.Errorf("certificates issued = %d, want %d", got, want)
			}
		})
	}
}

// TestRenewExpiredCertificateFailsHandshake shows that a really expired
// proxy certificate does not even get through TLS (VerifyClientCertIfGiven
// checks validity), so the handler is never reached.
func TestRenewExpiredCertificateFailsHandshake(t *testing.T) {
	e := newTestEnv(t)
	current, res := e.enrolled(t)
	expired := e.ca.Sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: res.Identity},
		NotBefore:   time.Now().Add(-2 * time.Hour),
		NotAfter:    time.Now().Add(-time.Minute),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, current.Leaf.PublicKey)
	cert := tls.Certificate{Certificate: [][]byte{expired.Raw}, PrivateKey: current.PrivateKey, Leaf: expired}
	before := e.requests.Load()

	_, err := meshclient.Renew(context.Background(), e.srv.URL, res.CAPEM, cert, newKey(t))

	var apiErr *meshclient.APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("Renew with an expired certificate = %v, want a TLS handshake failure", err)
	}
	if got := e.requests.Load() - before; got != 0 {
		t.Errorf("renew reached the handler %d times, want 0", got)
	}
	t.Log(err)
}

func TestRenewChecksIdentityBeforeSending(t *testing.T) {
	e := newTestEnv(t)
	key := newKey(t)
	leaf := e.ca.Sign(t, &x509.Certificate{
		Subject:   pkix.Name{CommonName: "not-a-proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public())
	_, err := meshclient.Renew(context.Background(), e.srv.URL, e.ca.PEM(), tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}, key)
	if err == nil || !strings.Contains(err.Error(), "not-a-proxy") {
		t.Errorf("Renew with a non-proxy certificate = %v, want an error naming it", err)
	}
	if got := e.requests.Load(); got != 0 {
		t.Errorf("%d requests reached the server, want 0", got)
	}
}
