package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// debugGet sends GET path to the debug listener with the Host header and
// bearer token given ("" for none) and returns the status and body (0 and
// the error when the request failed).
func debugGet(t *testing.T, addr, path, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error() // not listening yet: callers poll
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDebugListenerAgainstAnAttacker is the penetration test of the debug
// listener against the real binary: a connected Envoy proxy's
// configuration holds its service's private key, and the debug listener
// must neither hand it out nor answer a DNS-rebound browser.
func TestDebugListenerAgainstAnAttacker(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	xdsAddr := freeAddr(t)
	s.launch(t, xdsAddr, "")
	if out, err := s.cli(t, "apply", "-f", bookstoreFile); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	pair := osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookstore"})
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	cn := leaf.Subject.CommonName
	osm.Connect(t, pair, "127.0.0.1")
	tokenBytes, err := os.ReadFile(filepath.Join(s.dataDir, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))

	// Wait until the proxy's SDS secrets are published.
	const secretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	var dump string
	for deadline := time.Now().Add(testwait.Bound(t)); ; {
		code, body := debugGet(t, s.debug, "/debug/config/"+cn, "", token)
		if code == http.StatusOK && strings.Contains(body, secretType) && strings.Contains(body, "service-cert") {
			dump = body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no SDS secrets published for %s: %d %s", cn, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The service key the server holds (what the agent config carries).
	keyPEM := serviceKeyPEM(t, s.api, s.dataDir, pair)
	if !strings.Contains(string(keyPEM), "PRIVATE KEY") {
		t.Fatalf("the agent config's service key is not a PEM private key: %.40q", keyPEM)
	}

	t.Run("the admin's dump shows key material redacted", func(t *testing.T) {
		if strings.Contains(dump, "PRIVATE KEY") {
			t.Errorf("GET /debug/config/%s with the admin token holds a PEM private key", cn)
		}
		if strings.Contains(dump, base64.StdEncoding.EncodeToString(keyPEM)) {
			t.Errorf("GET /debug/config/%s holds the service key as inline bytes", cn)
		}
		if !strings.Contains(dump, "redacted") || !strings.Contains(dump, "serial") {
			t.Errorf("GET /debug/config/%s does not say what was redacted (want the certificate's serial):\n%.2000s", cn, dump)
		}
	})
	for _, tc := range []struct {
		name, path, host, token string
		wantCode                int
		wantBody                string
	}{
		{"config without a token", "/debug/config/" + cn, "", "", 401, "admin token"},
		{"config with a wrong token", "/debug/config/" + cn, "", "nope", 401, "wrong admin token"},
		{"proxies without a token", "/debug/proxies", "", "", 401, "admin token"},
		{"pprof without a token", "/debug/pprof/", "", "", 401, "admin token"},
		{"pprof cmdline without a token", "/debug/pprof/cmdline", "", "", 401, "admin token"},
		{"a rebound name with the token", "/debug/config/" + cn, "attacker.example:" + port(s.debug), token, 421, "localhost"},
		{"a rebound name on an open route", "/api/v1/services", "attacker.example", "", 421, "127.0.0.1"},
		{"a rebound name on health", "/healthz", "attacker.example", "", 421, "localhost"},
		{"health stays open", "/healthz", "", "", 200, "ok"},
		{"readiness stays open", "/readyz", "", "", 200, "ok"},
		{"metrics stay open", "/metrics", "", "", 200, "osm_catalog_version"},
		{"localhost is accepted", "/healthz", "localhost:" + port(s.debug), "", 200, "ok"},
		{"config with the token", "/debug/config/" + cn, "", token, 200, "service-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := debugGet(t, s.debug, tc.path, tc.host, tc.token)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s (Host %q) = %d %.300q; want %d containing %q", tc.path, tc.host, code, body, tc.wantCode, tc.wantBody)
			}
			if strings.Contains(body, "PRIVATE KEY") {
				t.Errorf("GET %s (Host %q) returned a PEM private key", tc.path, tc.host)
			}
		})
	}
}

func port(addr string) string {
	return addr[strings.LastIndexByte(addr, ':')+1:]
}

// serviceKeyPEM reads the service private key from the agent config, as
// the proxy's own agent does (mutual TLS with its proxy certificate).
func serviceKeyPEM(t *testing.T, apiAddr, dataDir string, pair tls.Certificate) []byte {
	t.Helper()
	return []byte(agentConfig(t, apiAddr, dataDir, pair).ServiceCertificate.PrivateKeyPEM)
}
