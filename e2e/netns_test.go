//go:build linux

// Package e2e runs the bookstore mesh across separate hosts: osm-server and
// every service's agent and app each in its own network namespace with its
// own address, joined by veth pairs to a bridge in a hub namespace. Nothing
// touches the machine's own network namespace.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestMain doubles as a tiny HTTP GET helper run inside a namespace (the
// test process itself lives in the root namespace, which has no route to
// the test hosts).
func TestMain(m *testing.M) {
	agenttest.RunFakeEnvoyIfAsked() // the test binary doubles as the Envoy stand-in
	if url := os.Getenv("OSM_E2E_GET"); url != "" {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if tok := os.Getenv("OSM_E2E_ADMIN_TOKEN"); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok) // the /debug/ routes need it
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(os.Stdout, resp.Body)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type host struct {
	name, ip string
	ns       string
}

type mesh struct {
	t      *testing.T
	bin    string
	dir    string
	prefix string
	hosts  map[string]*host
	server *proc
	mu     sync.Mutex
	stats  map[string]map[string]int64 // app -> latest counters
}

func (m *mesh) sh(args ...string) {
	m.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		m.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// network makes the hub namespace with a bridge and one namespace per host.
func (m *mesh) network(names []string) {
	hub := m.prefix + "hub"
	m.sh("ip", "netns", "add", hub)
	m.t.Cleanup(func() { exec.Command("ip", "netns", "del", hub).Run() })
	m.sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
	m.sh("ip", "-n", hub, "link", "set", "br0", "up")
	for i, name := range names {
		h := &host{name: name, ip: fmt.Sprintf("10.99.0.%d", i+2), ns: fmt.Sprintf("%s%d", m.prefix, i)}
		m.hosts[name] = h
		m.sh("ip", "netns", "add", h.ns)
		m.t.Cleanup(func() { exec.Command("ip", "netns", "del", h.ns).Run() })
		peer := fmt.Sprintf("p%d", i)
		m.sh("ip", "-n", h.ns, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", hub)
		m.sh("ip", "-n", hub, "link", "set", peer, "master", "br0", "up")
		m.sh("ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		m.sh("ip", "-n", h.ns, "link", "set", "eth0", "up")
		m.sh("ip", "-n", h.ns, "link", "set", "lo", "up")
	}
}

// proc is a started process; done yields its Wait result once.
type proc struct {
	cmd  *exec.Cmd
	done chan error
}

// run starts a process in a host's namespace; it is killed at cleanup and
// if the test process dies.
func (m *mesh) run(h *host, logName string, env []string, stdout io.Writer, path string, args ...string) *proc {
	m.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns, path}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	logf, err := os.Create(filepath.Join(m.dir, logName+".log"))
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	m.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-p.done
		p.done <- err
		logf.Close()
		if m.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			m.t.Logf("--- %s (last lines):\n%s", logName, b)
		}
	})
	return p
}

// admin runs an osm-server admin subcommand from the server's namespace.
func (m *mesh) admin(args ...string) string {
	m.t.Helper()
	srv := m.hosts["server"]
	full := append([]string{"netns", "exec", srv.ns, filepath.Join(m.bin, "osm-server")}, args...)
	full = append(full, "--server", "https://"+srv.ip+":15443", "--data-dir", filepath.Join(m.dir, "server"))
	out, err := exec.Command("ip", full...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("osm-server %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// debug GETs a debug API path from inside the server's namespace.
func (m *mesh) debug(path string, v any) error {
	srv := m.hosts["server"]
	cmd := exec.Command("ip", "netns", "exec", srv.ns, os.Args[0])
	cmd.Env = append(os.Environ(), "OSM_E2E_GET=http://"+srv.ip+":15090"+path)
	if tok, err := os.ReadFile(filepath.Join(m.dir, "server", "admin.token")); err == nil {
		cmd.Env = append(cmd.Env, "OSM_E2E_ADMIN_TOKEN="+strings.TrimSpace(string(tok)))
	}
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

func (m *mesh) startServer() {
	m.t.Helper()
	srv := m.hosts["server"]
	m.server = m.run(srv, "server", nil, nil, filepath.Join(m.bin, "osm-server"), "serve", "--config", filepath.Join(m.dir, "server.yaml"))
	testwait.For(m.t, "osm-server ready", func() bool {
		var v map[string]any
		return m.debug("/api/v1/services", &v) == nil
	})
}

// collect reads an app's JSON stats lines into m.stats.
func (m *mesh) collect(app string) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			var st struct {
				App    string           `json:"app"`
				Counts map[string]int64 `json:"counts"`
			}
			if json.Unmarshal(s.Bytes(), &st) == nil && st.Counts != nil {
				m.mu.Lock()
				m.stats[app] = st.Counts
				m.mu.Unlock()
			}
		}
	}()
	m.t.Cleanup(func() { pw.Close() })
	return pw
}

func (m *mesh) counts(app string) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for k, v := range m.stats[app] {
		out[k] = v
	}
	return out
}

// window returns bookbuyer's counter increases over the next n purchases.
func (m *mesh) window(n int64) map[string]int64 {
	m.t.Helper()
	start := m.counts("bookbuyer")
	var d map[string]int64
	testwait.For(m.t, fmt.Sprintf("%d more bookbuyer calls", n), func() bool {
		now := m.counts("bookbuyer")
		d = map[string]int64{}
		total := int64(0)
		for k, v := range now {
			d[k] = v - start[k]
			total += d[k]
		}
		return total >= n
	})
	return d
}

func (m *mesh) connected() []string {
	var body struct {
		Proxies []struct {
			Service struct{ Name string }
		}
	}
	if err := m.debug("/debug/proxies", &body); err != nil {
		return nil
	}
	var out []string
	for _, p := range body.Proxies {
		out = append(out, p.Service.Name)
	}
	return out
}

func (m *mesh) writeEndpoints(withV2 bool) {
	m.t.Helper()
	h := m.hosts
	v2 := ""
	rootV2 := ""
	if withV2 {
		v2 = fmt.Sprintf("  - name: bookstore-v2\n    namespace: default\n    endpoints: [{ip: %s, port: 14001}]\n", h["bookstore-v2"].ip)
		rootV2 = fmt.Sprintf(", {ip: %s, port: 14001}", h["bookstore-v2"].ip)
	}
	y := fmt.Sprintf(`services:
  - name: bookbuyer
    namespace: default
    endpoints: [{ip: %s, port: 14001}]
  - name: bookthief
    namespace: default
    endpoints: [{ip: %s, port: 14001}]
  - name: bookstore
    namespace: default
    endpoints: [{ip: %s, port: 14001}%s]
  - name: bookstore-v1
    namespace: default
    endpoints: [{ip: %s, port: 14001}]
%s  - name: bookwarehouse
    namespace: default
    endpoints: [{ip: %s, port: 14001}]
`, h["bookbuyer"].ip, h["bookthief"].ip, h["bookstore-v1"].ip, rootV2, h["bookstore-v1"].ip, v2, h["bookwarehouse"].ip)
	tmp := filepath.Join(m.dir, ".endpoints.yaml")
	if err := os.WriteFile(tmp, []byte(y), 0o644); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "endpoints.yaml")); err != nil {
		m.t.Fatal(err)
	}
}

func TestBookstoreAcrossHosts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the multi-host e2e test needs root to create network namespaces (run make test as root)")
	}
	if out, err := exec.Command("ip", "netns", "add", "osme2eprobe").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: network namespaces are not available here (%v: %s); the multi-host e2e test did not run", err, out)
	}
	exec.Command("ip", "netns", "del", "osme2eprobe").Run()

	m := &mesh{t: t, dir: t.TempDir(), prefix: fmt.Sprintf("osme%d", os.Getpid()%100000), hosts: map[string]*host{}, stats: map[string]map[string]int64{}}
	m.bin = filepath.Join(m.dir, "bin")
	for name, pkg := range map[string]string{
		"osm-server": "./cmd/osm-server", "osm-provider-static": "./providers/static", "osm-agent": "./cmd/osm-agent",
		"bookbuyer": "./examples/bookstore/bookbuyer", "bookthief": "./examples/bookstore/bookthief",
		"bookstore": "./examples/bookstore/bookstore", "bookwarehouse": "./examples/bookstore/bookwarehouse",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(m.bin, name), pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	m.network([]string{"server", "bookwarehouse", "bookstore-v1", "bookstore-v2", "bookbuyer", "bookthief"})
	srv := m.hosts["server"]

	m.writeEndpoints(true)
	// xDS on the wildcard address, the default operators get: the server
	// must tell each agent the address that agent reached it on. (The
	// wildcard is inside the server's own test namespace.)
	config := fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s:15090\napiAddress: %s:15443\nxdsAddress: 0.0.0.0:15128\nproviders:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n",
		filepath.Join(m.dir, "server"), m.bin, srv.ip, srv.ip, filepath.Join(m.dir, "endpoints.yaml"))
	if err := os.WriteFile(filepath.Join(m.dir, "server.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	m.startServer()
	m.admin("apply", "-f", "../examples/bookstore/mesh.yaml", "-f", "../examples/bookstore/grpc.yaml")

	type machine struct{ service, account, app string }
	machines := []machine{
		{"bookwarehouse", "", "bookwarehouse"}, {"bookstore-v1", "bookstore", "bookstore"}, {"bookstore-v2", "bookstore", "bookstore"},
		{"bookbuyer", "", "bookbuyer"}, {"bookthief", "", "bookthief"},
	}
	for _, mc := range machines {
		h := m.hosts[mc.service]
		dir := filepath.Join(m.dir, mc.service)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		args := []string{"token", "create", "--service", mc.service, "--join-server", "https://" + srv.ip + ":15443"}
		if mc.account != "" {
			args = append(args, "--service-account", mc.account)
		}
		join := strings.Fields(strings.TrimSpace(m.admin(args...)))
		flags := map[string]string{}
		for i := 0; i+1 < len(join); i++ {
			if strings.HasPrefix(join[i], "--") {
				flags[join[i][2:]] = join[i+1]
			}
		}
		os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
		install := exec.Command(filepath.Join(m.bin, "osm-agent"), "install", "--no-service", "--server", flags["server"], "--token", flags["token"],
			"--ca-cert-hash", flags["ca-cert-hash"], "--service", mc.service, "--namespace", "default", "--proxy", "none",
			"--advertise-address", h.ip, "--hosts-file", filepath.Join(dir, "hosts"), "--config-dir", dir, "--data-dir", dir)
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("osm-agent install %s: %v\n%s", mc.service, err, out)
		}
		m.run(h, mc.service+"-agent", nil, nil, filepath.Join(m.bin, "osm-agent"), "run", "--config", filepath.Join(dir, "agent.yaml"))
		testwait.For(m.t, mc.service+" agent wrote its gRPC bootstrap", func() bool {
			_, e1 := os.Stat(filepath.Join(dir, "grpc-bootstrap.json"))
			_, e2 := os.Stat(filepath.Join(dir, "service.crt"))
			_, e3 := os.Stat(filepath.Join(dir, "state.json"))
			return e1 == nil && e2 == nil && e3 == nil
		})
		// The apps reach the agent's local xDS endpoint; the agent carries
		// their streams to the xDS address the server told it.
		if b, _ := os.ReadFile(filepath.Join(dir, "grpc-bootstrap.json")); !strings.Contains(string(b), "unix:"+filepath.Join(dir, "xds.sock")) {
			t.Fatalf("%s's gRPC bootstrap does not name the agent's local xDS endpoint %s:\n%s", mc.service, filepath.Join(dir, "xds.sock"), b)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "state.json")); !strings.Contains(string(b), srv.ip+":15128") {
			t.Fatalf("%s's agent does not carry its apps' xDS to the server's xDS address %s:15128 (the server listens on 0.0.0.0); its state:\n%s", mc.service, srv.ip, b)
		}
		var appArgs []string
		switch mc.app {
		case "bookstore":
			appArgs = []string{"-listen", h.ip + ":14001", "-name", mc.service}
		case "bookwarehouse":
			appArgs = []string{"-listen", h.ip + ":14001"}
		case "bookthief":
			appArgs = []string{"-direct", m.hosts["bookstore-v1"].ip + ":14001", "-cert-dir", dir}
		}
		env := []string{"GRPC_XDS_BOOTSTRAP=" + filepath.Join(dir, "grpc-bootstrap.json")}
		var stdout io.Writer
		if mc.app == "bookbuyer" || mc.app == "bookthief" {
			stdout = m.collect(mc.app)
		}
		m.run(h, mc.service+"-app", env, stdout, filepath.Join(m.bin, mc.app), appArgs...)
	}
	testwait.For(m.t, "five proxies connected", func() bool { return len(m.connected()) == 5 })

	t.Run("enrollment from another host names the xDS address that host can reach", func(t *testing.T) {
		lines := strings.Split(strings.TrimSpace(m.admin("token", "create", "--print", "enroll", "--service", "bookbuyer", "--join-server", "https://"+srv.ip+":15443")), "\n")
		join := strings.Fields(lines[len(lines)-1]) // the join command; the line before it is the note on stderr
		buyer := m.hosts["bookbuyer"]
		args := append([]string{"netns", "exec", buyer.ns, filepath.Join(m.bin, "osm-agent")}, join[1:]...)
		out, err := exec.Command("ip", append(args, "--data-dir", filepath.Join(m.dir, "extra-agent"))...).CombinedOutput()
		if err != nil {
			t.Fatalf("osm-agent enroll from the bookbuyer host: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), srv.ip+":15128") {
			t.Errorf("enrollment answered with an xDS address other than %s:15128 (the server listens on 0.0.0.0:15128):\n%s", srv.ip, out)
		}
	})

	t.Run("the 80/20 split holds across hosts", func(t *testing.T) {
		m.window(20) // warm-up
		d := m.window(400)
		share := float64(d["v1"]) / float64(d["v1"]+d["v2"])
		if d["v2"] == 0 || share < 0.7 || share > 0.9 {
			t.Errorf("bookbuyer over 400 calls: %v; v1 share %.2f, want about 0.8", d, share)
		}
		if d["errors"] > 0 {
			t.Errorf("bookbuyer had %d errors in steady state", d["errors"])
		}
	})

	t.Run("bookthief is refused by bookstore itself", func(t *testing.T) {
		testwait.For(m.t, "bookthief tried", func() bool { return m.counts("bookthief")["deniedDirect"] > 0 })
		c := m.counts("bookthief")
		if c["stolenMesh"]+c["stolenDirect"] > 0 {
			t.Errorf("bookthief stole books: %v", c)
		}
	})

	t.Run("a provider endpoint change reaches the callers", func(t *testing.T) {
		m.writeEndpoints(false)
		testwait.For(m.t, "bookstore-v2 withdrawn", func() bool { d := m.window(20); return d["v2"] == 0 })
		m.writeEndpoints(true)
		testwait.For(m.t, "bookstore-v2 back", func() bool { d := m.window(30); return d["v2"] > 0 })
	})

	t.Run("the server restarts under load and no request is lost", func(t *testing.T) {
		m.window(20)
		before := m.counts("bookbuyer")
		syscall.Kill(-m.server.cmd.Process.Pid, syscall.SIGKILL)
		err := <-m.server.done
		m.server.done <- err
		time.Sleep(2 * time.Second) // bookbuyer keeps buying with its last configuration
		m.startServer()
		testwait.For(m.t, "proxies reconnected", func() bool { return len(m.connected()) == 5 })
		m.window(100)
		after := m.counts("bookbuyer")
		if after["errors"] != before["errors"] {
			t.Errorf("bookbuyer errors went from %d to %d across the server restart", before["errors"], after["errors"])
		}
		if after["v1"]-before["v1"] == 0 || after["v2"]-before["v2"] == 0 {
			t.Errorf("bookbuyer not served by both versions across the restart: %v -> %v", before, after)
		}
	})

	t.Run("a revoked proxy is disconnected", func(t *testing.T) {
		var cn string
		var body struct {
			Proxies []struct {
				CN      string
				Service struct{ Name string }
			}
		}
		if err := m.debug("/debug/proxies", &body); err != nil {
			t.Fatal(err)
		}
		for _, p := range body.Proxies {
			if p.Service.Name == "bookthief" {
				cn = p.CN
			}
		}
		if cn == "" {
			t.Fatalf("bookthief is not connected: %+v", body)
		}
		m.admin("proxy", "revoke", cn)
		testwait.For(m.t, "bookthief disconnected", func() bool {
			for _, s := range m.connected() {
				if s == "bookthief" {
					return false
				}
			}
			return true
		})
		time.Sleep(2 * time.Second)
		for _, s := range m.connected() {
			if s == "bookthief" {
				t.Error("the revoked bookthief proxy reconnected")
			}
		}
	})
}
