package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// TestEgressThroughTheServer applies an Egress to a running osm-server and
// checks what a source proxy receives: its agent config's hosts block maps
// the external name to a VIP, and its xDS configuration (rendered,
// validated and published by the real publisher) holds the egress
// listener and cluster; a proxy of a service that is not a source gets
// neither.
func TestEgressThroughTheServer(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	xdsAddr := freeAddr(t)
	s.launch(t, xdsAddr, "")
	egress := filepath.Join(t.TempDir(), "egress.yaml")
	if err := os.WriteFile(egress, []byte(`apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bookstoreFile, egress} {
		if out, err := s.cli(t, "apply", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	tokenBytes, err := os.ReadFile(filepath.Join(s.dataDir, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))
	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	var buyerCN string
	var buyerPair tls.Certificate
	for _, c := range []struct {
		service string
		source  bool
	}{{"bookbuyer", true}, {"bookthief", false}} {
		pair := osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: c.service})
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		cn := leaf.Subject.CommonName
		osm.Connect(t, pair, "127.0.0.1")
		if c.source {
			buyerCN, buyerPair = cn, pair
		}

		cfg := agentConfig(t, s.api, s.dataDir, pair)
		var vip string
		for _, h := range cfg.Hosts {
			if h.Hostname == "api.github.com" {
				vip = h.IP
			}
		}
		if (vip != "") != c.source {
			t.Errorf("%s: agent config hosts %v: api.github.com present = %v, want %v", c.service, cfg.Hosts, vip != "", c.source)
		}
		// Wait for the proxy's configuration (its secrets come last).
		var dump string
		for deadline := time.Now().Add(testwait.Bound(t)); ; {
			code, body := debugGet(t, s.debug, "/debug/config/"+cn, "", token)
			if code == http.StatusOK && strings.Contains(body, "service-cert") {
				dump = body
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no configuration published: %d %s", c.service, code, body)
			}
			time.Sleep(50 * time.Millisecond) // polling a condition
		}
		has := strings.Contains(dump, `egress|api.github.com|443`) && strings.Contains(dump, vip)
		if has != c.source {
			t.Errorf("%s: xDS configuration holds the egress listener on %s = %v, want %v:\n%.2000s", c.service, vip, has, c.source, dump)
		}
	}

	// Deleting the Egress takes the listener from the source's Envoy and
	// the name from its hosts block.
	if out, err := s.cli(t, "delete", "egress", "github"); err != nil {
		t.Fatalf("delete egress: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(testwait.Bound(t)); ; {
		_, body := debugGet(t, s.debug, "/debug/config/"+buyerCN, "", token)
		if !strings.Contains(body, "egress|api.github.com") && strings.Contains(body, "service-cert") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bookbuyer keeps its egress listener after the Egress was deleted:\n%.2000s", body)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
	for _, h := range agentConfig(t, s.api, s.dataDir, buyerPair).Hosts {
		if h.Hostname == "api.github.com" {
			t.Errorf("agent config still maps api.github.com after the Egress was deleted: %v", h)
		}
	}
}

// agentConfig reads the agent config as the proxy's agent does.
func agentConfig(t *testing.T, apiAddr, dataDir string, pair tls.Certificate) meshapi.AgentConfig {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(dataDir, caCertFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get("https://" + apiAddr + "/api/v1/agent/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg meshapi.AgentConfig
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatalf("agent config: %d %v", resp.StatusCode, err)
	}
	return cfg
}

// launch runs osm-server on s's addresses (xDS on xdsAddr) with extra
// config lines, and waits until it is up: the CA written and /healthz OK.
func (s *identityServer) launch(t *testing.T, xdsAddr, extra string) *runningServer {
	t.Helper()
	srv := launchServer(t, s.bin, filepath.Dir(s.dataDir), "dataDir: "+s.dataDir+"\npluginDir: "+s.bin+"\ndebugAddress: "+s.debug+"\napiAddress: "+s.api+"\nxdsAddress: "+xdsAddr+"\n"+extra)
	for deadline := time.Now().Add(testwait.Bound(t)); ; {
		if _, err := os.Stat(filepath.Join(s.dataDir, caCertFile)); err == nil {
			if code, _ := debugGet(t, s.debug, "/healthz", "", ""); code == http.StatusOK {
				return srv
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("osm-server not up:\n%s", srv.output())
		}
		time.Sleep(20 * time.Millisecond) // polling readiness
	}
}
