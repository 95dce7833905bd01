package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHTTPSAdminToken(t *testing.T) {
	admin := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "admin") })
	public := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "public") })
	h := NewHTTPSHandler(slog.New(slog.DiscardHandler), "s3cret", []Route{{Pattern: "POST /api/v1/enroll", Handler: public}}, admin)
	for _, tc := range []struct {
		name, method, path, auth string
		wantCode                 int
		wantBody                 string
	}{
		{"public route needs no token", "POST", "/api/v1/enroll", "", 200, "public"},
		{"admin route without token", "GET", "/api/v1/tokens", "", 401, "no admin token"},
		{"admin route with a wrong token", "GET", "/api/v1/tokens", "Bearer nope", 401, "wrong admin token"},
		{"admin route with a non-bearer header", "GET", "/api/v1/tokens", "Basic s3cret", 401, "no admin token"},
		{"admin route with the token", "GET", "/api/v1/tokens", "Bearer s3cret", 200, "admin"},
		{"the scheme is case-insensitive", "GET", "/api/v1/tokens", "bearer s3cret", 200, "admin"},
		{"a token with a prefix is wrong", "GET", "/api/v1/tokens", "Bearer xs3cret", 401, "wrong admin token"},
		{"GET on a public POST route is an admin route", "GET", "/api/v1/enroll", "", 401, "no admin token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestServeTLS(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "osm-server"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	go func() {
		done <- ServeTLS(ctx, slog.New(slog.DiscardHandler), "127.0.0.1:0", cfg, h, ServeOptions{Ready: ready})
	}()
	addr := <-ready
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" {
		t.Errorf("body %q, want hello", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeTLS after cancel: %v, want nil", err)
	}
}
