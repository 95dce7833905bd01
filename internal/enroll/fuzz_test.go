package enroll

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/store"
)

// fuzzSeeds adds request bodies around csrPEM: valid, truncated, with
// other PEM types and keys, and not JSON at all.
func fuzzSeeds(f *testing.F, body func(csr string) []byte) {
	key := enrolltest.NewKey(f)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		f.Fatal(err)
	}
	csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	weak, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, p224)
	for _, c := range []string{
		csr,
		csr[:len(csr)/2],
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: weak})),
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der[:len(der)-3]})),
		"",
	} {
		f.Add(body(c))
	}
	f.Add([]byte(`{"csr": 1}`))
	f.Add([]byte(`{"token":"` + string(bytes.Repeat([]byte("a"), 64)) + `","unknown":true}`))
	f.Add([]byte("not json"))
}

// checkAnswer fails unless the answer is a known status with a JSON body.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	switch rec.Code {
	case http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge:
	default:
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if rec.Code != http.StatusOK {
		var e meshapi.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Reason == "" || e.Error == "" {
			t.Fatalf("error answer %q is not an ErrorBody: %v", rec.Body, err)
		}
	}
}

// FuzzEnrollRequest feeds the enrollment handler arbitrary bodies: the
// JSON decoding, the service check and the CSR parsing and key check.
func FuzzEnrollRequest(f *testing.F) {
	st := store.NewMemory()
	tokens := NewTokens(st, nil)
	ca := enrolltest.NewCA(f, "fuzz root")
	h := NewHandler(slog.New(slog.DiscardHandler), tokens, enrolltest.NewIssuer(ca, st), func(string) string { return testXDS })
	secret, _, err := tokens.Create(f.Context(), TokenRequest{Service: bookstore, Uses: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f, func(csr string) []byte {
		b, _ := json.Marshal(meshapi.EnrollRequest{Token: secret, Service: bookstore, CSR: csr})
		return b
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/enroll", bytes.NewReader(body)))
		checkAnswer(t, rec)
	})
}

// FuzzRenewRequest feeds the renewal handler arbitrary bodies from an
// enrolled proxy: the JSON decoding and the CSR parsing and key check.
func FuzzRenewRequest(f *testing.F) {
	st := store.NewMemory()
	ca := enrolltest.NewCA(f, "fuzz root")
	iss := enrolltest.NewIssuer(ca, st)
	h := NewHandler(slog.New(slog.DiscardHandler), NewTokens(st, nil), iss, func(string) string { return testXDS })
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, enrolltest.NewKey(f))
	if err != nil {
		f.Fatal(err)
	}
	certPEM, _, err := iss.IssueProxy(f.Context(), der, bookstore, mesh.ServiceAccount{Namespace: "default", Name: "bookstore"})
	if err != nil {
		f.Fatal(err)
	}
	peer, err := parseCertPEM(certPEM)
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f, func(csr string) []byte {
		b, _ := json.Marshal(meshapi.RenewRequest{CSR: csr})
		return b
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/renew", io.NopCloser(bytes.NewReader(body)))
		req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{peer, ca.Cert}}}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}
