package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	return testaddr.Free(t)
}

func waitLog(t *testing.T, what string, log *testlog.Buffer, cond func(string) bool) {
	t.Helper()
	bound := testwait.Bound(t)
	deadline := time.Now().Add(bound)
	for !cond(log.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; log:\n%s", what, bound.Round(time.Millisecond), log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAgentFullPath: install-config -> enroll -> bootstrap -> connected to
// a real osm-server -> the Envoy stand-in (which strictly parses the
// bootstrap and connects with the certificate files it names) receives and
// ACKs its listeners; then supervision (a killed Envoy is restarted),
// renewal (a short proxy certificate is renewed without restarting Envoy)
// and drain on SIGTERM.
func TestAgentFullPath(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinaries(t, dir, "osm-server", "osm-provider-static", "osm-agent")
	api, _, debug, serverDir := writeServerConfig(t, dir, bin)
	admin := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "osm-server"), append(args, "--server", "https://"+api, "--data-dir", serverDir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("osm-server %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var server *exec.Cmd
	serverLog := &testlog.Buffer{}
	startServer := func() {
		server = exec.Command(filepath.Join(bin, "osm-server"), "serve", "--config", filepath.Join(dir, "server.yaml"))
		server.Stdout, server.Stderr = serverLog, serverLog
		server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		waitLog(t, "osm-server up", serverLog, func(s string) bool {
			return strings.Count(s, "xDS listening") >= 1 && strings.Contains(s, "HTTPS API listening")
		})
	}
	stopServer := func() {
		server.Process.Kill()
		server.Wait()
	}
	startServer()
	t.Cleanup(stopServer)
	// A 9 s proxy certificate, renewed at two thirds; the running server
	// takes the lifetime from the applied MeshConfig.
	mesh, _ := os.ReadFile("../examples/bookstore/mesh.yaml")
	mesh = bytes.Replace(mesh, []byte("spec:\n  traffic:"), []byte("spec:\n  certificate: {proxyLifetime: 9s}\n  traffic:"), 1)
	if !bytes.Contains(mesh, []byte("proxyLifetime: 9s")) {
		t.Fatal("examples/bookstore/mesh.yaml's MeshConfig no longer starts with spec.traffic; update the test")
	}
	os.WriteFile(filepath.Join(dir, "mesh.yaml"), mesh, 0o600)
	admin("apply", "-f", filepath.Join(dir, "mesh.yaml"))
	waitLog(t, "the server took the MeshConfig's proxy lifetime", serverLog, func(s string) bool {
		return strings.Contains(s, "certificate lifetimes set by MeshConfig") && strings.Contains(s, "proxy=9s")
	})

	join := strings.Fields(strings.TrimSpace(admin("token", "create", "--service", "bookbuyer")))
	flags := map[string]string{}
	for i := 0; i+1 < len(join); i++ {
		if strings.HasPrefix(join[i], "--") {
			flags[join[i][2:]] = join[i+1]
		}
	}
	agentDir := filepath.Join(dir, "agent")
	install := exec.Command(filepath.Join(bin, "osm-agent"), "install", "--no-service", "--server", flags["server"], "--token", flags["token"],
		"--ca-cert-hash", flags["ca-cert-hash"], "--service", "bookbuyer", "--advertise-address", "127.0.20.1", // not the demo's 127.0.10.x: its test runs in parallel
		"--envoy-path", os.Args[0], "--hosts-file", filepath.Join(dir, "hosts"), "--config-dir", agentDir, "--data-dir", agentDir)
	os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("osm-agent install: %v\n%s", err, out)
	}
	// The agent's metrics on a loopback address of the test's own.
	agentMetrics := freeAddr(t)
	agentYAML, _ := os.ReadFile(filepath.Join(agentDir, "agent.yaml"))
	withMetrics := bytes.Replace(agentYAML, []byte("metricsAddress: 127.0.0.1:15091\n"), []byte("metricsAddress: "+agentMetrics+"\n"), 1)
	if bytes.Equal(agentYAML, withMetrics) {
		t.Fatalf("osm-agent install wrote no default metricsAddress:\n%s", agentYAML)
	}
	os.WriteFile(filepath.Join(agentDir, "agent.yaml"), withMetrics, 0o600)
	agentLog := &testlog.Buffer{}
	agent := exec.Command(filepath.Join(bin, "osm-agent"), "run", "--config", filepath.Join(agentDir, "agent.yaml"))
	agent.Env = append(os.Environ(), agenttest.FakeEnvoyEnv+"=1")
	agent.Stdout, agent.Stderr = agentLog, agentLog
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-agent.Process.Pid, syscall.SIGKILL)
		<-agentDone
		if t.Failed() {
			t.Logf("agent log:\n%s\nserver log:\n%s", agentLog, serverLog)
		}
	})

	acked := func(s string) int { return strings.Count(s, "lds: ACKed version") }
	waitLog(t, "the Envoy stand-in received and ACKed its listeners from the real server", agentLog, func(s string) bool { return acked(s) >= 1 })
	// The stand-in binds listeners as Envoy does: bookbuyer's inbound on its
	// advertise address and an outbound one on bookstore's VIP.
	for _, want := range []string{"bound to 127.0.20.1:14001", "bound to 127.77."} {
		if !strings.Contains(agentLog.String(), want) {
			t.Errorf("the Envoy stand-in's log has no %q: the listeners were not bound", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "hosts")); err != nil {
		t.Fatal(err)
	}
	waitLog(t, "hosts block", agentLog, func(string) bool {
		b, _ := os.ReadFile(filepath.Join(dir, "hosts"))
		return strings.Contains(string(b), "bookstore.default.mesh")
	})

	// Metrics: the server's and the agent's, each clean by promtool.
	waitMetrics(t, "osm-server metrics", "http://"+debug+"/metrics",
		`^osm_xds_streams_opened_total [1-9]`,
		`^osm_xds_responses_total\{type="lds"\} [1-9]`,
		`^osm_xds_change_to_ack_seconds_count `,
		`^osm_xds_config_generation_seconds_count [1-9]`,
		`^osm_certificates_issued_total\{kind="proxy"\} [1-9]`,
		`^osm_api_requests_total\{code="200",route="POST /api/v1/enroll"\} 1$`,
		`^osm_enrollment_duration_seconds_count\{code="200"\} 1$`,
		`^osm_provider_up\{provider="onprem"\} 1$`,
		`^osm_store_transaction_duration_seconds_count\{op="txn"\} [1-9]`,
		`^osm_ca_expiry_seconds [1-9]`,
		`^process_resident_memory_bytes `, `^go_goroutines `)
	waitMetrics(t, "osm-agent metrics", "http://"+agentMetrics+"/metrics",
		`^osm_agent_xds_connected 1$`,
		`^osm_agent_proxy_running\{driver="envoy"\} 1$`,
		`^osm_agent_proxy_certificate_expiry_seconds [0-9]`,
		`^osm_agent_server_reachable 1$`,
		`^process_resident_memory_bytes `)

	// Supervision: kill the Envoy stand-in; the agent starts a new one, which
	// connects and ACKs again.
	pid := childOf(t, agent.Process.Pid)
	syscall.Kill(pid, syscall.SIGKILL)
	waitLog(t, "Envoy restarted by the agent and configured again", agentLog, func(s string) bool { return acked(s) >= 2 })
	envoyPID := childOf(t, agent.Process.Pid)

	// Renewal: the 9 s certificate is renewed at 6 s, without restarting Envoy.
	waitLog(t, "proxy certificate renewed", agentLog, func(s string) bool { return strings.Contains(s, "renewed proxy certificate") })
	if now := childOf(t, agent.Process.Pid); now != envoyPID {
		t.Errorf("Envoy pid %d -> %d across a certificate renewal: renewal must not restart Envoy", envoyPID, now)
	}
	agentBody := waitMetrics(t, "osm-agent metrics after a restart and a renewal", "http://"+agentMetrics+"/metrics",
		`^osm_agent_certificate_renewals_total\{result="ok"\} [1-9]`,
		`^osm_agent_proxy_restarts_total\{driver="envoy"\} [1-9]`)
	serverBody := waitMetrics(t, "osm-server metrics after a renewal", "http://"+debug+"/metrics",
		`^osm_proxy_certificate_renewals_total\{result="ok"\} [1-9]`,
		`^osm_proxy_certificate_expiry_seconds_count 1$`,
		`^osm_xds_connected_proxies\{flavor="envoy",service="default/bookbuyer"\} 1$`)
	checkGrafanaDashboard(t, serverBody, agentBody)

	// Drain: SIGTERM to the agent drains Envoy, then both exit.
	agent.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-agentDone:
		agentDone <- err
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("agent did not exit after SIGTERM")
	}
	if !strings.Contains(agentLog.String(), "draining listeners (graceful=true)") {
		t.Errorf("Envoy was not drained on stop; agent log:\n%s", agentLog)
	}
}

// buildBinaries builds the named commands (osm-provider-static from
// providers/static) into dir/bin and returns that directory.
func buildBinaries(t *testing.T, dir string, names ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	for _, name := range names {
		pkg := "./cmd/" + name
		if p, ok := strings.CutPrefix(name, "osm-provider-"); ok {
			pkg = "./providers/" + p
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return bin
}

// writeServerConfig writes dir/server.yaml: osm-server on free loopback
// ports, its data in dir/server, the static provider reading the bookstore's
// endpoints.
func writeServerConfig(t *testing.T, dir, bin string) (api, xds, debug, serverDir string) {
	t.Helper()
	endpoints, _ := filepath.Abs("../examples/bookstore/endpoints.yaml")
	return writeServerConfigWith(t, dir, bin, endpoints)
}

// writeServerConfigWith is writeServerConfig with the static provider
// reading endpoints.
func writeServerConfigWith(t *testing.T, dir, bin, endpoints string) (api, xds, debug, serverDir string) {
	t.Helper()
	api, xds, debug = freeAddr(t), freeAddr(t), freeAddr(t)
	serverDir = filepath.Join(dir, "server")
	config := fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s\napiAddress: %s\nxdsAddress: %s\nproviders:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n",
		serverDir, bin, debug, api, xds, endpoints)
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return api, xds, debug, serverDir
}

// childOf returns the one child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound(t))
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		var kids []int
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			b2, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			b = append(b, ' ')
			b = append(b, b2...)
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
		if len(kids) > 0 {
			return kids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has no child", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
