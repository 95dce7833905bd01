package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/hostsfile"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

func TestMain(m *testing.M) {
	agenttest.RunFakeEnvoyIfAsked()
	os.Exit(m.Run())
}

// harness is a test CA, a mutual-TLS ADS server, an agent-config HTTPS
// server, a fake enroller and an agent configuration whose Envoy is the
// test binary acting as the Envoy stand-in.
type harness struct {
	ca       *agenttest.CA
	ads      *agenttest.ADSServer
	api      *httptest.Server
	enroller *agenttest.Enroller
	cfg      agent.Config
	// metrics, when set, is the agent's registry (served on cfg.MetricsAddress).
	metrics *prometheus.Registry

	mu       sync.Mutex
	apiCalls int
	apiPeer  string
	xdsAddr  string            // what the agent config route answers; default ads.Addr
	replicas []meshapi.Replica // what it lists as the replicas
	gateway  *meshapi.GatewayConfig
	// reports receives the gateway reports the agent sends.
	reports chan meshapi.GatewayReport
	// ejections receives the ejection reports the agent sends.
	ejections chan meshapi.EjectionReport
	// ejectionCheck is the agent's Options.EjectionCheck (its default
	// when zero).
	ejectionCheck time.Duration
}

const token = "abcdef.0123456789abcdef"

func newHarness(t *testing.T) *harness {
	t.Helper()
	t.Setenv(agenttest.FakeEnvoyEnv, "1")
	t.Setenv(agenttest.FakeEnvoyCrashEnv, "")
	h := &harness{ca: agenttest.NewCA(t), reports: make(chan meshapi.GatewayReport, 100), ejections: make(chan meshapi.EjectionReport, 100)}
	h.ads = agenttest.StartADS(t, h.ca)
	h.enroller = &agenttest.Enroller{CA: h.ca, Token: token, XDSAddress: h.ads.Addr}
	svcCert, svcKey := h.ca.KeyPair(t, "bookstore.default.svc", time.Hour)
	h.api = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/agent/gateway-report" && r.Method == http.MethodPost && len(r.TLS.PeerCertificates) > 0 {
			var rep meshapi.GatewayReport
			if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
				http.Error(w, `{"error":"bad report"}`, http.StatusBadRequest)
				return
			}
			select {
			case h.reports <- rep:
			default:
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.URL.Path == "/api/v1/agent/ejections" && r.Method == http.MethodPost && len(r.TLS.PeerCertificates) > 0 {
			var rep meshapi.EjectionReport
			if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
				http.Error(w, `{"error":"bad report"}`, http.StatusBadRequest)
				return
			}
			select {
			case h.ejections <- rep:
			default:
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.URL.Path != "/api/v1/agent/config" || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		h.mu.Lock()
		h.apiCalls++
		h.apiPeer = cn
		xdsAddr := h.xdsAddr
		if xdsAddr == "" {
			xdsAddr = h.ads.Addr
		}
		replicas, gateway := h.replicas, h.gateway
		h.mu.Unlock()
		json.NewEncoder(w).Encode(meshapi.AgentConfig{
			Identity:   cn,
			Replicas:   replicas,
			Gateway:    gateway,
			XDSAddress: xdsAddr,
			Hosts: []meshapi.HostEntry{
				{Hostname: "bookstore.default.mesh", IP: "127.77.0.3"},
				{Hostname: "bookbuyer.default.mesh", IP: "127.77.0.2"},
			},
			ServiceCertificate: meshapi.ServiceCertificate{
				CertificatePEM: string(svcCert), PrivateKeyPEM: string(svcKey), CAPEM: string(h.ca.PEM),
				Expires: time.Now().Add(time.Hour).UTC().Truncate(time.Second),
			},
		})
	}))
	h.api.TLS = h.ca.ServerTLS(t)
	h.api.StartTLS()
	t.Cleanup(h.api.Close)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.cfg = agent.Config{
		Server: h.api.URL, Service: "bookstore", Namespace: "default",
		EnvoyPath: exe, AdminPort: freePort(t),
		DataDir: filepath.Join(dir, "data"), HostsFile: hosts,
		DrainTimeout: 100 * time.Millisecond, PollInterval: time.Hour,
		Labels: map[string]string{"zone": "a"},
	}.WithDefaults()
	if err := h.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return h
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	return uint16(testaddr.FreePort(t))
}

type running struct {
	agent  *agent.Agent
	logs   *agenttest.Logs
	cancel context.CancelFunc
	done   chan error
}

func (h *harness) start(t *testing.T) *running {
	t.Helper()
	d, err := envoy.New(sidecar.Options{BinaryPath: h.cfg.EnvoyPath, DataDir: h.cfg.DataDir, AdminPort: h.cfg.AdminPort, DrainTime: h.cfg.DrainTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return h.startWith(t, d, nil)
}

// startWith runs the agent with driver d, passing the supervisor's events
// to onEvent when it is not nil.
func (h *harness) startWith(t *testing.T, d sidecar.Driver, onEvent func(sidecar.Event)) *running {
	t.Helper()
	log, logs := agenttest.NewLogger()
	a := agent.New(h.cfg, log, h.enroller, d, agent.Options{
		Version: "test", RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Supervisor: sidecar.SupervisorOptions{OnEvent: onEvent},
		Metrics:    h.metrics, EjectionCheck: h.ejectionCheck,
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{agent: a, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(testwait.Bound(t)):
		t.Fatal("agent did not stop")
	}
	return nil
}

func waitAck(t *testing.T, h *harness) agenttest.Ack {
	t.Helper()
	select {
	case a := <-h.ads.Acks:
		return a
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no ADS ACK from the proxy")
	}
	return agenttest.Ack{}
}

func proxyCN(t *testing.T, dir string) (string, *x509.Certificate) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, agent.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName, c
}

func TestRunEnrollsOnceAndRunsTheProxy(t *testing.T) {
	h := newHarness(t)
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	ack := waitAck(t, h)
	cn, _ := proxyCN(t, h.cfg.DataDir)
	if ack.NodeID != cn || ack.PeerCN != cn {
		t.Errorf("ACK from node %q with certificate %q, want both %q", ack.NodeID, ack.PeerCN, cn)
	}
	if !strings.HasSuffix(cn, ".bookstore.default") {
		t.Errorf("identity %q, want <uuid>.bookstore.default", cn)
	}
	r.logs.Wait(t, "updated mesh host names")
	r.logs.Wait(t, "wrote service certificate")

	if _, err := os.Stat(filepath.Join(h.cfg.DataDir, agent.JoinTokenFile)); !os.IsNotExist(err) {
		t.Errorf("join token still there after enrollment (%v)", err)
	}
	hosts, _ := os.ReadFile(h.cfg.HostsFile)
	wantHosts := "127.0.0.1 localhost\n" + hostsfile.BeginMarker + "\n127.77.0.2\tbookbuyer.default.mesh\n127.77.0.3\tbookstore.default.mesh\n" + hostsfile.EndMarker + "\n"
	if diff := cmp.Diff(string(hosts), wantHosts); diff != "" {
		t.Errorf("hosts file (-got +want):\n%s", diff)
	}
	for name, mode := range map[string]os.FileMode{
		agent.KeyFile: 0o600, agent.ServiceKeyFile: 0o600, agent.ServiceCertFile: 0o644, agent.ServiceCAFile: 0o644,
		agent.GRPCBootstrapFile: 0o644, envoy.BootstrapFile: 0o644, envoy.ClientCertSDS: 0o644, envoy.CASDS: 0o644,
	} {
		fi, err := os.Stat(filepath.Join(h.cfg.DataDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	svc, err := tls.LoadX509KeyPair(filepath.Join(h.cfg.DataDir, agent.ServiceCertFile), filepath.Join(h.cfg.DataDir, agent.ServiceKeyFile))
	if err != nil || len(svc.Certificate) == 0 {
		t.Errorf("service key pair: %v", err)
	}
	st := r.agent.Status()
	if st.Identity != cn || !st.Proxy.Running || st.Hosts != 2 || st.XDSAddress != h.ads.Addr {
		t.Errorf("status = %+v, want identity %s, proxy running, 2 hosts, xDS %s", st, cn, h.ads.Addr)
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v, want nil after stop", err)
	}
	onDisk, err := agent.ReadStatus(h.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Identity != cn || onDisk.Proxy.Running {
		t.Errorf("status file after stop = %+v, want identity %s, proxy not running", onDisk, cn)
	}
	if enrolls, _ := h.enroller.Calls(); enrolls != 1 {
		t.Errorf("enrollments = %d, want 1", enrolls)
	}

	// A restart (a reboot) needs no token: same identity, no enrollment.
	h.start(t)
	waitAck(t, h)
	if again, _ := proxyCN(t, h.cfg.DataDir); again != cn {
		t.Errorf("identity after restart = %s, want %s", again, cn)
	}
	if enrolls, _ := h.enroller.Calls(); enrolls != 1 {
		t.Errorf("enrollments after restart = %d, want 1", enrolls)
	}
}

// When the server reports a new xDS address the agent rewrites the Envoy
// bootstrap and restarts Envoy, which then connects to the new address.
func TestXDSAddressChangeRestartsTheProxy(t *testing.T) {
	h := newHarness(t)
	h.cfg.PollInterval = 100 * time.Millisecond
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	waitAck(t, h)
	moved := agenttest.StartADS(t, h.ca)
	h.mu.Lock()
	h.xdsAddr = moved.Addr
	h.mu.Unlock()
	r.logs.Wait(t, "restarting the proxy")
	select {
	case a := <-moved.Acks:
		if cn, _ := proxyCN(t, h.cfg.DataDir); a.NodeID != cn {
			t.Errorf("ACK at the new address from %q, want %q", a.NodeID, cn)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("the proxy did not connect to the new xDS address")
	}
	if st := r.agent.Status(); st.XDSAddress != moved.Addr || !st.Proxy.Running || st.Proxy.Restarts != 0 {
		t.Errorf("status = %+v, want xDS %s, the proxy running, no crash restarts", st, moved.Addr)
	}
}

// The agent learns the replicas from the agent config, keeps them in
// state.json, lists every replica's xDS address in the Envoy bootstrap, and
// when the server it was told dies its polls go to another replica, also
// after a restart.
func TestLearnsReplicasAndFailsOver(t *testing.T) {
	h := newHarness(t)
	h.cfg.PollInterval = 50 * time.Millisecond
	second := httptest.NewUnstartedServer(h.api.Config.Handler)
	second.TLS = h.ca.ServerTLS(t)
	second.StartTLS()
	t.Cleanup(second.Close)
	ads2 := agenttest.StartADS(t, h.ca)
	h.mu.Lock()
	h.replicas = []meshapi.Replica{{API: h.api.URL, XDS: h.ads.Addr}, {API: second.URL, XDS: ads2.Addr}}
	h.mu.Unlock()
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	// The proxy's bootstrap names one replica or, once it learned them,
	// both (the list rotated by its identity): it ACKs at one of them.
	select {
	case <-h.ads.Acks:
	case <-ads2.Acks:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no ADS ACK from the proxy at either replica")
	}
	var st struct {
		Replicas []meshapi.Replica `json:"replicas"`
	}
	testwait.For(t, "state.json to list both replicas", func() bool {
		b, err := os.ReadFile(filepath.Join(h.cfg.DataDir, agent.StateFile))
		return err == nil && json.Unmarshal(b, &st) == nil && len(st.Replicas) == 2
	})
	testwait.For(t, "the Envoy bootstrap to name both xDS servers", func() bool {
		b, _ := os.ReadFile(filepath.Join(h.cfg.DataDir, envoy.BootstrapFile))
		return strings.Contains(string(b), portOf(h.ads.Addr)) && strings.Contains(string(b), portOf(ads2.Addr))
	})
	if got := r.agent.Status().XDSServers; len(got) != 2 {
		t.Errorf("status xDS servers %v, want both replicas'", got)
	}

	h.api.Close() // the server the agent was told dies
	testwait.For(t, "a config poll answered by the other replica", func() bool {
		st := r.agent.Status()
		return st.APIServer == second.URL && st.LastConfig.After(time.Now().Add(-time.Second)) && st.LastConfigError == ""
	})
	r.stop(t)

	// A restart knows the replicas from state.json.
	r = h.start(t)
	testwait.For(t, "a config poll after the restart answered by the other replica", func() bool {
		st := r.agent.Status()
		return st.APIServer == second.URL && !st.LastConfig.IsZero()
	})
}

func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

func TestRunServerUnreachableAtStart(t *testing.T) {
	h := newHarness(t)
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	h.enroller.SetUnreachable(true)
	r := h.start(t)
	r.logs.Wait(t, "enrollment failed; retrying")
	r.logs.Wait(t, "enrollment failed; retrying") // still retrying, not given up
	h.enroller.SetUnreachable(false)
	waitAck(t, h)
}

func TestRunOnLastBootstrapWhileServerIsDown(t *testing.T) {
	h := newHarness(t)
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	waitAck(t, h)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// The server's API goes away and the remembered xDS address is lost:
	// the proxy still starts from the bootstrap on disk.
	h.api.Close()
	if err := os.Remove(filepath.Join(h.cfg.DataDir, agent.StateFile)); err != nil {
		t.Fatal(err)
	}
	r = h.start(t)
	r.logs.Wait(t, "runs on its last bootstrap")
	waitAck(t, h)
	r.logs.Wait(t, "agent config from the server failed; retrying")
	if st := r.agent.Status(); st.LastConfigError == "" {
		t.Errorf("status LastConfigError empty while the server is down: %+v", st)
	}
}

func TestRunCorruptIdentity(t *testing.T) {
	t.Run("with a join token: enrolls again", func(t *testing.T) {
		h := newHarness(t)
		writeGarbageIdentity(t, h.cfg.DataDir)
		if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
			t.Fatal(err)
		}
		r := h.start(t)
		r.logs.Wait(t, "enrolling again")
		waitAck(t, h)
	})
	t.Run("without a token: says how to get one", func(t *testing.T) {
		h := newHarness(t)
		writeGarbageIdentity(t, h.cfg.DataDir)
		r := h.start(t)
		err := r.stop(t)
		for _, want := range []string{"no join token", "osm-server token create", "osm-agent enroll"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Run = %v, want it to mention %q", err, want)
			}
		}
	})
	t.Run("missing files without a token", func(t *testing.T) {
		h := newHarness(t)
		err := h.start(t).stop(t)
		if err == nil || !strings.Contains(err.Error(), "osm-server token create") {
			t.Errorf("Run = %v, want it to say how to get a token", err)
		}
	})
	t.Run("a refused token is not retried", func(t *testing.T) {
		h := newHarness(t)
		if err := agent.SaveJoinToken(h.cfg.DataDir, "wrong.token"); err != nil {
			t.Fatal(err)
		}
		err := h.start(t).stop(t)
		if err == nil || !strings.Contains(err.Error(), "enrollment refused") || !strings.Contains(err.Error(), "osm-server token create --service bookstore --namespace default") {
			t.Errorf("Run = %v, want a refused enrollment naming the token command", err)
		}
	})
}

func writeGarbageIdentity(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{agent.KeyFile, agent.CertFile, agent.CAFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunEnvoyMissing(t *testing.T) {
	h := newHarness(t)
	h.cfg.EnvoyPath = filepath.Join(t.TempDir(), "envoy")
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	err := h.start(t).stop(t)
	if err == nil || !strings.Contains(err.Error(), h.cfg.EnvoyPath) || !strings.Contains(err.Error(), "--envoy-path") || !strings.Contains(err.Error(), "envoyPath") {
		t.Errorf("Run = %v, want one error naming %s, --envoy-path and envoyPath", err, h.cfg.EnvoyPath)
	}
	if enrolls, _ := h.enroller.Calls(); enrolls != 0 {
		t.Errorf("enrolled %d times before noticing Envoy is missing, want 0 (the token stays for the next try)", enrolls)
	}
}

func TestRenewsAtTwoThirdsWithoutRestartingTheProxy(t *testing.T) {
	h := newHarness(t)
	h.enroller.Lifetime = 3 * time.Second
	h.enroller.Renewed = make(chan string, 10)
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	waitAck(t, h)
	cn, first := proxyCN(t, h.cfg.DataDir)
	select {
	case got := <-h.enroller.Renewed:
		if got != cn {
			t.Errorf("renewed %s, want %s", got, cn)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no renewal of a 3s certificate")
	}
	r.logs.Wait(t, "renewed proxy certificate")
	again, second := proxyCN(t, h.cfg.DataDir)
	if again != cn || second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Errorf("after renewal: CN %s serial %v, want CN %s and a new serial (old %v)", again, second.SerialNumber, cn, first.SerialNumber)
	}
	if st := r.agent.Status(); st.Proxy.Restarts != 0 || !st.Proxy.Running {
		t.Errorf("proxy status after renewal = %+v, want running with no restarts", st.Proxy)
	}
}

// A renewal the server made but whose answer was lost leaves the agent
// with the certificate it replaced, which renews only for the same key:
// the agent asks again with the key of the lost renewal and gets its
// certificate, without enrolling again.
func TestRenewalAfterLostAnswerKeepsKey(t *testing.T) {
	h := newHarness(t)
	h.enroller.Lifetime = 3 * time.Second
	h.enroller.LoseRenewals = 1
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	waitAck(t, h)
	cn, _ := proxyCN(t, h.cfg.DataDir)
	// The lost answer is a network error: the agent retries it at once
	// (on another of the server's addresses) or after its backoff.
	r.logs.Wait(t, "renewed proxy certificate")
	if got := h.enroller.AskedAgain(); got != 1 {
		t.Errorf("renewals that asked again for the lost one = %d, want 1 (a retry with another key is refused)", got)
	}
	if again, _ := proxyCN(t, h.cfg.DataDir); again != cn {
		t.Errorf("after renewal: CN %s, want %s", again, cn)
	}
	if enrolls, renews := h.enroller.Calls(); enrolls != 1 || renews < 1 {
		t.Errorf("enrollments %d, renewals answered %d; want 1 enrollment and the renewal answered", enrolls, renews)
	}
}

// TestRenewalFailureLogsTimeLeft: a renewal that fails while the
// certificate has time left says how much. The certificate lives 15 s, so
// the first renewal (at two thirds) fails with 5 s left: with a 3 s one,
// the 1 s left was lost under load (-race, a busy machine) and the failure
// was logged as EXPIRED instead.
func TestRenewalFailureLogsTimeLeft(t *testing.T) {
	h := newHarness(t)
	h.enroller.Lifetime = 15 * time.Second
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	r := h.start(t)
	waitAck(t, h)
	h.enroller.SetUnreachable(true)
	rec := r.logs.Wait(t, "proxy certificate renewal failed; retrying")
	if rec.Level != slog.LevelError || rec.Attrs["expiresIn"] == "" {
		t.Errorf("renewal failure logged as %v %v, want ERROR with expiresIn", rec.Level, rec.Attrs)
	}
	r.logs.Wait(t, "proxy certificate renewal failed; retrying") // keeps retrying
	h.enroller.SetUnreachable(false)
	r.logs.Wait(t, "renewed proxy certificate")
}

func TestFetchServerConfigErrors(t *testing.T) {
	h := newHarness(t)
	certPEM, keyPEM := h.ca.KeyPair(t, "x", time.Hour)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	refusing := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error":"proxy certificate refused: revoked (enroll again with a new join token)"}`))
	}))
	refusing.TLS = h.ca.ServerTLS(t)
	refusing.StartTLS()
	defer refusing.Close()
	_, err = meshclient.FetchAgentConfig(context.Background(), refusing.URL, h.ca.PEM, pair)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("FetchServerConfig = %v, want the 403 and the server's reason", err)
	}
	other := agenttest.NewCA(t)
	_, err = meshclient.FetchAgentConfig(context.Background(), h.api.URL, other.PEM, pair)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("FetchServerConfig with the wrong CA = %v, want a TLS verification error", err)
	}
}

func TestDriversRegistersEnvoyAndNone(t *testing.T) {
	if diff := cmp.Diff(agent.Drivers().Names(), []string{"envoy", "none"}); diff != "" {
		t.Errorf("driver names (-got +want):\n%s", diff)
	}
}

// TestRunProxyless: with `proxy: none` the agent needs no Envoy binary,
// starts no process, and still enrolls, writes the gRPC bootstrap (which
// `osm-agent bootstrap` prints), the service certificate and the hosts
// block, and renews the proxy certificate.
func TestRunProxyless(t *testing.T) {
	h := newHarness(t)
	h.cfg.Proxy = agent.ProxyNone
	h.cfg.EnvoyPath = filepath.Join(t.TempDir(), "no-envoy-here")
	h.enroller.Lifetime = 3 * time.Second
	h.enroller.Renewed = make(chan string, 10)
	h.metrics, h.cfg.MetricsAddress = prometheus.NewRegistry(), "127.0.0.1:0"
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	d, err := agent.NewDriver(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []sidecar.Event
	)
	r := h.startWith(t, d, func(ev sidecar.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	r.logs.Wait(t, "no proxy process to run")
	r.logs.Wait(t, "updated mesh host names")
	r.logs.Wait(t, "wrote service certificate")
	cn, _ := proxyCN(t, h.cfg.DataDir)
	select {
	case got := <-h.enroller.Renewed:
		if got != cn {
			t.Errorf("renewed %s, want %s", got, cn)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no renewal of a 3s certificate")
	}

	boot, err := os.ReadFile(filepath.Join(h.cfg.DataDir, agent.GRPCBootstrapFile))
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		XDSServers []struct {
			ServerURI string `json:"server_uri"`
		} `json:"xds_servers"`
		Node struct {
			ID       string         `json:"id"`
			Metadata map[string]any `json:"metadata"`
		} `json:"node"`
	}
	if err := json.Unmarshal(boot, &b); err != nil {
		t.Fatalf("grpc-bootstrap.json: %v", err)
	}
	socket := "unix:" + filepath.Join(h.cfg.DataDir, agent.LocalXDSSocket)
	if len(b.XDSServers) != 1 || b.XDSServers[0].ServerURI != socket || b.Node.ID != cn || b.Node.Metadata["osm.flavor"] != "grpc" {
		t.Errorf("gRPC bootstrap: servers %+v node %q flavor %v, want %s, %s, grpc", b.XDSServers, b.Node.ID, b.Node.Metadata["osm.flavor"], socket, cn)
	}
	// An app's ADS stream through the local endpoint reaches the server
	// with the proxy certificate and the agent's node id, whatever the app
	// claims.
	cc, err := grpc.NewClient(b.XDSServers[0].ServerURI, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "an-app"}, TypeUrl: agenttest.ListenerType}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("ADS through the local xDS endpoint: %v", err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: agenttest.ListenerType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	select {
	case ack := <-h.ads.Acks:
		if ack.NodeID != cn || ack.PeerCN != cn || ack.Node.GetMetadata().GetFields()["osm.flavor"].GetStringValue() != "grpc" {
			t.Errorf("the server saw node %q over a certificate of %q with metadata %v, want %s, %s, osm.flavor grpc", ack.NodeID, ack.PeerCN, ack.Node.GetMetadata(), cn, cn)
		}
	case <-ctx.Done():
		t.Fatal("no ACK through the local xDS endpoint within 20s")
	}
	// The agent's metrics say an application is connected and its stream
	// reaches the server; and when it leaves, that none is.
	waitGather(t, h.metrics, "osm_agent_local_xds_streams 1", "osm_agent_local_xds_upstream_streams 1", "osm_agent_xds_connected 1", "osm_agent_xds_reconnects_total 0")
	cancel()
	waitGather(t, h.metrics, "osm_agent_local_xds_streams 0", "osm_agent_local_xds_upstream_streams 0", "osm_agent_xds_reconnects_total 0")
	if body := gathered(t, h.metrics); strings.Contains(body, "osm_agent_xds_connected") {
		t.Errorf("osm_agent_xds_connected reported with no application connected:\n%s", body)
	}
	for _, name := range []string{agent.ServiceCertFile, agent.ServiceKeyFile, agent.ServiceCAFile} {
		if _, err := os.Stat(filepath.Join(h.cfg.DataDir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.cfg.DataDir, envoy.BootstrapFile)); !os.IsNotExist(err) {
		t.Errorf("%s written for a proxyless machine (stat: %v)", envoy.BootstrapFile, err)
	}
	if hosts, _ := os.ReadFile(h.cfg.HostsFile); !strings.Contains(string(hosts), "127.77.0.3\tbookstore.default.mesh") {
		t.Errorf("hosts file has no mesh block:\n%s", hosts)
	}

	if err := r.stop(t); err != nil {
		t.Errorf("Run = %v, want nil after stop", err)
	}
	st, err := agent.ReadStatus(h.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Proxy.Driver != agent.ProxyNone || st.Proxy.Running || st.Proxy.Restarts != 0 || st.Identity != cn || st.Hosts != 2 {
		t.Errorf("status = %+v, want driver none, not running, no restarts, identity %s, 2 hosts", st, cn)
	}
	mu.Lock()
	if len(events) != 0 {
		t.Errorf("supervisor events %+v, want none: no process runs", events)
	}
	mu.Unlock()

	a := agent.New(h.cfg, slog.New(slog.DiscardHandler), h.enroller, d, agent.Options{Version: "test"})
	printed, err := a.RenderBootstrap("")
	if err != nil {
		t.Fatalf("RenderBootstrap: %v", err)
	}
	if diff := cmp.Diff(string(printed), string(boot)); diff != "" {
		t.Errorf("RenderBootstrap differs from the written grpc-bootstrap.json (-got +want):\n%s", diff)
	}
}

// gathered returns reg's unlabelled gauges and counters as "name value"
// lines.
func gathered(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 && (m.GetGauge() != nil || m.GetCounter() != nil) {
				fmt.Fprintf(&b, "%s %g\n", mf.GetName(), m.GetGauge().GetValue()+m.GetCounter().GetValue())
			}
		}
	}
	return b.String()
}

// waitGather waits until every line is in reg's exposition.
func waitGather(t *testing.T, reg *prometheus.Registry, lines ...string) {
	t.Helper()
	testwait.Until(t, "the agent's metrics to have every line", func() (bool, string) {
		body := gathered(t, reg)
		for _, l := range lines {
			if !strings.Contains("\n"+body, "\n"+l+"\n") {
				return false, fmt.Sprintf("no line %q:\n%s", l, body)
			}
		}
		return true, ""
	})
}
