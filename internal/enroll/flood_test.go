package enroll_test

// This file wires the real certificate.Manager behind the enrollment API,
// as osm-server does, to test renewal against the real proxy records. It
// is an external test package: internal/enroll itself never imports
// internal/certificate.

import (
	"context"
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/enroll"
	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

var bookstore = mesh.MeshService{Namespace: "default", Name: "bookstore"}

// realServer is the enrollment API over HTTPS on 127.0.0.1 with the real
// certificate manager on a real bbolt file.
type realServer struct {
	certs  *certificate.Manager
	tokens *enroll.Tokens
	srv    *httptest.Server
}

func newRealServer(t *testing.T) *realServer {
	t.Helper()
	return newRealServerWith(t, certificate.Options{})
}

// newRealServerWith is newRealServer with the manager's options; its TLS
// layer checks client certificates at the manager's clock.
func newRealServerWith(t *testing.T, opts certificate.Options) *realServer {
	t.Helper()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	certs, err := certificate.New(t.Context(), log, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &realServer{certs: certs, tokens: enroll.NewTokens(st, nil)}
	h := enroll.NewHandler(log, s.tokens, certs, func(string) string { return "127.0.0.1:15128" },
		certificate.ErrNotFound, certificate.ErrRevoked, certificate.ErrExpired, certificate.ErrInvalidCSR)
	s.srv = httptest.NewUnstartedServer(h)
	// httptest serves Certificates[0] to a client without SNI (by IP), so
	// take the serving certificate osm-server would serve.
	serving, err := certs.ServingCertificate([]string{"127.0.0.1", "localhost"})(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	s.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{*serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    certs.CertPool(),
		MinVersion:   tls.VersionTLS12,
		Time:         opts.Now,
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// enrolled enrolls a machine with secret and returns its TLS certificate.
func (s *realServer) enroll(t testing.TB, secret string) (tls.Certificate, meshclient.Result, time.Duration) {
	t.Helper()
	key := newKey(t)
	start := time.Now()
	res, err := meshclient.Enroll(context.Background(), nil, meshclient.JoinRequest{Server: s.srv.URL, Token: secret, CACertHash: s.certs.CAHash(), Service: bookstore}, key)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	cert := enrolltest.TLSCertificate(t, key, res.CertificatePEM)
	return cert, res, took
}

func (s *realServer) token(t testing.TB, uses int) string {
	t.Helper()
	secret, _, err := s.tokens.Create(context.Background(), enroll.TokenRequest{Service: bookstore, Uses: uses})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// A renewal right after enrollment is refused 429 with Retry-After, and
// the agent-side client reports it as too early with the wait.
func TestRenewTooEarlyRealIssuer(t *testing.T) {
	s := newRealServer(t)
	cert, res, _ := s.enroll(t, s.token(t, 1))

	_, err := meshclient.Renew(context.Background(), s.srv.URL, res.CAPEM, cert, newKey(t))

	wait, ok := meshclient.RenewalTooEarly(err)
	if !ok {
		t.Fatalf("Renew right after enrollment = %v, want refused as too early", err)
	}
	if wait < 59*time.Minute || wait > time.Hour {
		t.Errorf("Retry-After = %s, want about an hour", wait)
	}
	if !strings.Contains(err.Error(), "renewal is allowed from") {
		t.Errorf("error %q does not say when renewal is allowed", err)
	}
	recs, err := s.certs.ListProxies(context.Background())
	if err != nil || len(recs) != 1 || recs[0].Serial != strings.ToLower(cert.Leaf.SerialNumber.Text(16)) || recs[0].Overlap != nil {
		t.Errorf("record after a refused renewal = %+v, %v; want unchanged", recs, err)
	}
}

// TestRenewalFloodRefusedOthersServed: a renewal flood from one machine leaves other machines' enrollments and
// connects (the xDS check, VerifyProxy) working, every flooded renewal is
// answered 429, never 500, and the record stays as it was. The latencies
// under the flood are logged, not bounded: a timed assertion fails on a
// busy machine, not on a regression.
func TestRenewalFloodRefusedOthersServed(t *testing.T) {
	s := newRealServer(t)
	ctx := context.Background()
	flooder, res, _ := s.enroll(t, s.token(t, 1))
	other, _, _ := s.enroll(t, s.token(t, 1))
	secret := s.token(t, 1000)

	// measure returns the median enrollment and connect-check latencies
	// of other machines.
	const samples = 25
	measure := func() (enrollMed, connectMed time.Duration) {
		var enrolls, connects []time.Duration
		for range samples {
			_, _, took := s.enroll(t, secret)
			enrolls = append(enrolls, took)
			start := time.Now()
			if _, err := s.certs.VerifyProxy(ctx, other.Leaf); err != nil {
				t.Fatalf("VerifyProxy(other machine): %v", err)
			}
			connects = append(connects, time.Since(start))
		}
		slices.Sort(enrolls)
		slices.Sort(connects)
		return enrolls[samples/2], connects[samples/2]
	}
	baseEnroll, baseConnect := measure()

	// The flood: keep-alive connections with the flooder's certificate
	// posting one valid CSR as fast as the server answers.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(res.CAPEM)
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{flooder}},
		MaxIdleConnsPerHost: 32,
	}}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(meshapi.RenewRequest{CSR: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))})
	floodCtx, stop := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		statuses sync.Map // status -> *atomic.Int64
		sent     atomic.Int64
	)
	// More flooders than the server queues for one identity, so both the
	// queue and the answers beyond it are exercised.
	for range 32 {
		wg.Go(func() {
			for floodCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(floodCtx, http.MethodPost, s.srv.URL+"/api/v1/renew", strings.NewReader(string(body)))
				resp, err := hc.Do(req)
				if err != nil {
					continue // stopped
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				sent.Add(1)
			}
		})
	}
	testwait.For(t, "the flood under way", func() bool { return sent.Load() >= 20 })
	start, before := time.Now(), sent.Load()
	floodEnroll, floodConnect := measure()
	rate := float64(sent.Load()-before) / time.Since(start).Seconds()
	stop()
	wg.Wait()
	hc.CloseIdleConnections()

	t.Logf("enrollment median: %s alone, %s under the flood (%.2fx)", baseEnroll, floodEnroll, float64(floodEnroll)/float64(baseEnroll))
	t.Logf("connect check median: %s alone, %s under the flood (%.2fx)", baseConnect, floodConnect, float64(floodConnect)/float64(baseConnect))
	t.Logf("flood: %d renewals, %.0f/s while measuring", sent.Load(), rate)
	statuses.Range(func(k, v any) bool {
		if k.(int) != http.StatusTooManyRequests {
			t.Errorf("%d flooded renewals answered %d, want every one 429", v.(*atomic.Int64).Load(), k)
		}
		return true
	})
	recs, err := s.certs.ListProxies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.CN == res.Identity && (r.Overlap != nil || r.Serial != strings.ToLower(flooder.Leaf.SerialNumber.Text(16))) {
			t.Errorf("flooder's record = %+v, want unchanged", r)
		}
	}
}
