package agent_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/atomicfile"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// shopGateway is a Gateway with an HTTP listener and an HTTPS listener
// whose certificateRef is Secret default/shop-cert.
var shopGateway = meshapi.GatewayConfig{Gateway: "default/ingress", Listeners: []meshapi.GatewayListener{
	{Name: "web", Port: 8080, Protocol: "HTTP"},
	{Name: "shop", Port: 8443, Protocol: "HTTPS", Hostname: "shop.example.com", CertificateNamespace: "default", CertificateName: "shop-cert"},
}}

// writeCert writes chain and key as the files of default/shop-cert under
// dir, each replaced atomically (a temporary file renamed into place).
func writeCert(t *testing.T, dir string, chain, key []byte) {
	t.Helper()
	crt, k := agent.GatewayCertFiles(dir, "default", "shop-cert")
	if err := os.MkdirAll(filepath.Dir(crt), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(k, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(crt, chain, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckGatewayCertificates checks real files: each way a listener's
// certificate files can be unusable is one problem naming the listener,
// the file and the fix; good files (then replaced atomically by others)
// are none.
func TestCheckGatewayCertificates(t *testing.T) {
	ca := agenttest.NewCA(t)
	good, goodKey := ca.KeyPair(t, "shop", time.Hour, "shop.example.com")
	other, otherKey := ca.KeyPair(t, "other", time.Hour, "other.example.com")
	expired, expiredKey := ca.KeyPair(t, "shop", -time.Hour, "shop.example.com")
	wild, wildKey := ca.KeyPair(t, "wild", time.Hour, "*.example.com")
	dir := t.TempDir()
	crt, key := agent.GatewayCertFiles(dir, "default", "shop-cert")
	check := func() []meshapi.CertificateProblem {
		return agent.CheckGatewayCertificates(dir, shopGateway, time.Now())
	}
	wantProblem := func(t *testing.T, wants ...string) {
		t.Helper()
		ps := check()
		if len(ps) != 1 || ps[0].Listener != "shop" {
			t.Fatalf("problems = %+v, want one of listener shop", ps)
		}
		for _, w := range append(wants, "listener shop (port 8443, certificateRef Secret default/shop-cert)") {
			if !strings.Contains(ps[0].Error, w) {
				t.Errorf("problem %q does not say %q", ps[0].Error, w)
			}
		}
	}

	t.Run("missing", func(t *testing.T) {
		wantProblem(t, crt+" does not exist", "put the certificate chain, PEM, leaf first there")
		writeCert(t, dir, good, goodKey)
		if err := os.Remove(key); err != nil {
			t.Fatal(err)
		}
		wantProblem(t, key+" does not exist", "private key")
	})
	t.Run("unreadable", func(t *testing.T) {
		// A directory where the key should be is unreadable by anyone
		// (root included, which these tests may run as).
		if err := os.Mkdir(key, 0o755); err != nil {
			t.Fatal(err)
		}
		wantProblem(t, "read "+key)
		if err := os.Remove(key); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() != 0 {
			writeCert(t, dir, good, goodKey)
			if err := os.Chmod(key, 0); err != nil {
				t.Fatal(err)
			}
			wantProblem(t, key+" is not readable by the agent")
		}
	})
	t.Run("key mismatch", func(t *testing.T) {
		writeCert(t, dir, good, otherKey)
		wantProblem(t, "are not a certificate and its private key", "private key does not match public key")
	})
	t.Run("not PEM", func(t *testing.T) {
		writeCert(t, dir, []byte("not a certificate\n"), goodKey)
		wantProblem(t, "are not a certificate and its private key")
	})
	t.Run("wrong hostname", func(t *testing.T) {
		writeCert(t, dir, other, otherKey)
		wantProblem(t, "is for other.example.com, not the listener's hostname shop.example.com")
	})
	t.Run("expired", func(t *testing.T) {
		writeCert(t, dir, expired, expiredKey)
		wantProblem(t, "expired at")
	})
	t.Run("good, then replaced atomically", func(t *testing.T) {
		writeCert(t, dir, good, goodKey)
		if ps := check(); len(ps) != 0 {
			t.Fatalf("problems = %+v, want none for a good certificate", ps)
		}
		// A wildcard certificate covers shop.example.com too.
		writeCert(t, dir, wild, wildKey)
		if ps := check(); len(ps) != 0 {
			t.Fatalf("problems = %+v, want none for *.example.com", ps)
		}
		writeCert(t, dir, other, otherKey)
		wantProblem(t, "not the listener's hostname")
		writeCert(t, dir, good, goodKey)
		if ps := check(); len(ps) != 0 {
			t.Fatalf("problems = %+v after the good certificate came back, want none", ps)
		}
	})
	t.Run("wildcard listener", func(t *testing.T) {
		gc := meshapi.GatewayConfig{Listeners: []meshapi.GatewayListener{{Name: "any", Port: 443, Protocol: "HTTPS", Hostname: "*.example.com", CertificateNamespace: "default", CertificateName: "shop-cert"}}}
		if ps := agent.CheckGatewayCertificates(dir, gc, time.Now()); len(ps) != 1 {
			t.Errorf("a certificate for shop.example.com on listener *.example.com: problems = %+v, want one", ps)
		}
		writeCert(t, dir, wild, wildKey)
		if ps := agent.CheckGatewayCertificates(dir, gc, time.Now()); len(ps) != 0 {
			t.Errorf("a *.example.com certificate on listener *.example.com: problems = %+v, want none", ps)
		}
	})
}

// TestGatewayMachineReportsCertificates: a gateway machine's agent checks
// the certificate files of the Gateway the server's agent config names and
// reports them (at every poll, here only the first); its status, log and
// metrics say the same; the fix (files written into place), and a later
// atomic replacement by a certificate for another name, are seen at once,
// by the watch on the directory, not at the next poll (an hour).
func TestGatewayMachineReportsCertificates(t *testing.T) {
	h := newHarness(t)
	certDir := t.TempDir()
	h.cfg.Gateway, h.cfg.GatewayCertDir = agent.GatewayIngress, certDir
	h.metrics, h.cfg.MetricsAddress = prometheus.NewRegistry(), "127.0.0.1:0"
	h.gateway = &shopGateway
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	crt, _ := agent.GatewayCertFiles(certDir, "default", "shop-cert")
	waitReport := func(what string, ok func(meshapi.GatewayReport) bool) {
		t.Helper()
		deadline := time.After(testwait.Bound(t))
		for {
			select {
			case rep := <-h.reports:
				if ok(rep) {
					return
				}
			case <-deadline:
				t.Fatalf("no gateway report with %s", what)
			}
		}
	}
	waitReport("the missing certificate", func(rep meshapi.GatewayReport) bool {
		return len(rep.Certificates) == 1 && rep.Certificates[0].Listener == "shop" && strings.Contains(rep.Certificates[0].Error, crt+" does not exist")
	})
	if st := r.agent.Status(); len(st.GatewayCertificateProblems) != 1 {
		t.Errorf("status gatewayCertificateProblems = %+v, want the shop listener's", st.GatewayCertificateProblems)
	}
	waitGather(t, h.metrics, "osm_agent_gateway_certificate_problems 1")
	if rec := r.logs.Wait(t, "gateway listener certificate unusable"); rec.Level != slog.LevelError || !strings.Contains(rec.Attrs["err"], crt+" does not exist") {
		t.Errorf("the agent's log record %+v does not name the missing file as an error", rec)
	}

	good, goodKey := h.ca.KeyPair(t, "shop", time.Hour, "shop.example.com")
	writeCert(t, certDir, good, goodKey)
	waitReport("no problem", func(rep meshapi.GatewayReport) bool { return len(rep.Certificates) == 0 })
	waitGather(t, h.metrics, "osm_agent_gateway_certificate_problems 0")

	// Replaced atomically by a certificate for another name.
	other, otherKey := h.ca.KeyPair(t, "other", time.Hour, "other.example.com")
	writeCert(t, certDir, other, otherKey)
	waitReport("the wrong host name", func(rep meshapi.GatewayReport) bool {
		return len(rep.Certificates) == 1 && strings.Contains(rep.Certificates[0].Error, "not the listener's hostname shop.example.com")
	})
	waitGather(t, h.metrics, "osm_agent_gateway_certificate_problems 1")
}

// TestGatewayReportGoesToEveryReplica: with several osm-server replicas,
// the report goes to each (the machine's Envoy may be connected to any,
// and each renders and shows what was reported to it).
func TestGatewayReportGoesToEveryReplica(t *testing.T) {
	h := newHarness(t)
	h.cfg.Gateway, h.cfg.GatewayCertDir = agent.GatewayIngress, t.TempDir()
	h.gateway = &shopGateway
	second := make(chan meshapi.GatewayReport, 100)
	api2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/agent/gateway-report" {
			var rep meshapi.GatewayReport
			if json.NewDecoder(r.Body).Decode(&rep) == nil {
				select {
				case second <- rep:
				default:
				}
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.api.Config.Handler.ServeHTTP(w, r)
	}))
	api2.TLS = h.ca.ServerTLS(t)
	api2.StartTLS()
	t.Cleanup(api2.Close)
	h.replicas = []meshapi.Replica{{API: h.api.URL, XDS: h.ads.Addr}, {API: api2.URL, XDS: h.ads.Addr}}
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	for name, ch := range map[string]chan meshapi.GatewayReport{"the first replica": h.reports, "the second replica": second} {
		select {
		case rep := <-ch:
			if len(rep.Certificates) != 1 || rep.Certificates[0].Listener != "shop" {
				t.Errorf("%s got report %+v, want the shop listener's problem", name, rep)
			}
		case <-time.After(testwait.Bound(t)):
			t.Errorf("%s got no gateway report", name)
		}
	}
}
