//go:build polyglot && linux

// The polyglot suite: proxyless gRPC in Python (gRPC C-core, Debian's
// python3-grpcio) and Node.js (grpc-js with grpc-js-xds) against a real
// osm-server and real osm-agents, every app its own process started as a
// user would, configured only by GRPC_XDS_BOOTSTRAP. `make test` installs
// what it needs and runs it:
//
//	go test -tags polyglot -run TestPolyglot ./e2e/   (with OSM_NODE_MODULES set)
//
// It fails, never skips, when python3-grpcio or the node modules are missing.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
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
)

// call is one call of a buyer, as its --per-call line reports it.
type call struct {
	OK    bool    `json:"ok"`
	From  string  `json:"from"`
	Code  string  `json:"code"`
	Error string  `json:"error"`
	MS    float64 `json:"ms"`
	at    time.Time
}

// calls collects a buyer's calls from its stdout.
type calls struct {
	mu   sync.Mutex
	list []call
	cond *sync.Cond
}

func newCalls() *calls {
	c := &calls{}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *calls) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var k call
		if json.Unmarshal(sc.Bytes(), &k) != nil {
			continue
		}
		k.at = time.Now()
		c.mu.Lock()
		c.list = append(c.list, k)
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.list = append(c.list, call{Code: "EXITED", at: time.Now()})
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *calls) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.list)
}

// until waits until cond holds for the calls so far (or fails at the
// test's deadline).
func (c *calls) until(t *testing.T, what string, cond func([]call) bool) []call {
	t.Helper()
	bound := testwait.Bound(t)
	deadline := time.Now().Add(bound)
	timer := time.AfterFunc(bound, func() { c.mu.Lock(); c.cond.Broadcast(); c.mu.Unlock() })
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond(c.list) {
		if n := len(c.list); n > 0 && c.list[n-1].Code == "EXITED" {
			t.Fatalf("%s: the client exited; last calls: %+v", what, c.list[max(0, n-5):])
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last calls: %+v", what, bound.Round(time.Millisecond), c.list[max(0, len(c.list)-5):])
		}
		c.cond.Wait()
	}
	return append([]call(nil), c.list...)
}

// runOf returns whether the last n calls all satisfy ok.
func runOf(n int, ok func(call) bool) func([]call) bool {
	return func(l []call) bool {
		if len(l) < n {
			return false
		}
		for _, k := range l[len(l)-n:] {
			if !ok(k) {
				return false
			}
		}
		return true
	}
}

// buyer is one client process's calls.
type buyer struct {
	name string
	c    *calls
}

// followed makes a change and waits until each buyer's last 300 calls are
// ok; a call that was not ok (elsewhere, or failed) more than 2s after the
// change fails the test.
func followed(t *testing.T, buyers []buyer, what string, change func(), ok func(call) bool) {
	t.Helper()
	starts := make([]int, len(buyers))
	for i, b := range buyers {
		starts[i] = b.c.len()
	}
	t0 := time.Now()
	change()
	for i, b := range buyers {
		l := b.c.until(t, b.name+": 300 calls in a row after "+what, runOf(300, ok))
		d := switchTime(l, starts[i], t0, ok)
		t.Logf("%s buyer followed %s in %v", b.name, what, d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("%s buyer: a call went elsewhere (or failed) %v after %s, want within 2s", b.name, d, what)
		}
	}
}

func from(name string) func(call) bool { return func(k call) bool { return k.OK && k.From == name } }

// switchTime is how long after t0 the calls from start on last did
// something other than ok (0: never).
func switchTime(l []call, start int, t0 time.Time, ok func(call) bool) time.Duration {
	var last time.Duration
	for _, k := range l[start:] {
		if !ok(k) {
			last = k.at.Sub(t0)
		}
	}
	return last
}

type polyglot struct {
	t              *testing.T
	dir, bin       string
	api            string
	debug          string // the server's debug address
	serverDir      string
	python, nodeJS string
	nodeModules    string
	logs           map[string]*testlog.Buffer
}

func (p *polyglot) admin(args ...string) string {
	p.t.Helper()
	out, err := exec.Command(filepath.Join(p.bin, "osm-server"), append(args, "--server", "https://"+p.api, "--data-dir", p.serverDir)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("osm-server %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// serve builds osm-server, the static provider, osm-agent and the extra
// binaries (name, package pairs), and runs osm-server with the static
// provider reading the file writeEndpoints writes (first with endpoints),
// until the test ends.
func (p *polyglot) serve(endpoints string, extra ...string) {
	p.t.Helper()
	pkgs := map[string]string{"osm-server": "./cmd/osm-server", "osm-provider-static": "./providers/static", "osm-agent": "./cmd/osm-agent"}
	for i := 0; i+1 < len(extra); i += 2 {
		pkgs[extra[i]] = extra[i+1]
	}
	for name, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(p.bin, name), pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			p.t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	p.api = freeAddr(p.t)
	xds := freeAddr(p.t)
	p.debug = freeAddr(p.t)
	p.serverDir = filepath.Join(p.dir, "server")
	p.writeEndpoints(endpoints)
	config := fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s\napiAddress: %s\nxdsAddress: %s\nproviders:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n",
		p.serverDir, p.bin, p.debug, p.api, xds, filepath.Join(p.dir, "endpoints.yaml"))
	os.WriteFile(filepath.Join(p.dir, "server.yaml"), []byte(config), 0o600)
	p.start("osm-server", nil, nil, filepath.Join(p.bin, "osm-server"), "serve", "--config", filepath.Join(p.dir, "server.yaml"))
	waitLog(p.t, "osm-server up", p.logs["osm-server"], func(s string) bool {
		return strings.Contains(s, "xDS listening") && strings.Contains(s, "HTTPS API listening")
	})
}

// start runs a process until the test ends; its stderr (and stdout unless
// given) go to the log named name.
func (p *polyglot) start(name string, env []string, stdout io.Writer, path string, args ...string) {
	p.t.Helper()
	p.startCmd(name, env, stdout, exec.Command(path, args...))
}

// startCmd is start for a command made by the caller (with its stdin).
func (p *polyglot) startCmd(name string, env []string, stdout io.Writer, cmd *exec.Cmd) {
	p.t.Helper()
	log := &testlog.Buffer{}
	p.logs[name] = log
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = log
	cmd.Stdout = log
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
}

// agent enrolls and runs a proxyless osm-agent for service (running as
// the service account of the same name, or account) on addr and returns
// the GRPC_XDS_BOOTSTRAP setting for its apps.
func (p *polyglot) agent(service, addr string, account ...string) string {
	p.t.Helper()
	args := []string{"token", "create", "--service", service}
	if len(account) > 0 {
		args = append(args, "--service-account", account[0])
	}
	join := strings.Fields(strings.TrimSpace(p.admin(args...)))
	flags := map[string]string{}
	for i := 0; i+1 < len(join); i++ {
		if strings.HasPrefix(join[i], "--") {
			flags[join[i][2:]] = join[i+1]
		}
	}
	dir := filepath.Join(p.dir, service+"-"+addr)
	hosts := filepath.Join(dir, "hosts")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644)
	install := exec.Command(filepath.Join(p.bin, "osm-agent"), "install", "--no-service", "--proxy", "none",
		"--server", flags["server"], "--token", flags["token"], "--ca-cert-hash", flags["ca-cert-hash"],
		"--service", service, "--advertise-address", addr, "--hosts-file", hosts, "--config-dir", dir, "--data-dir", dir)
	if out, err := install.CombinedOutput(); err != nil {
		p.t.Fatalf("osm-agent install %s: %v\n%s", service, err, out)
	}
	p.start("agent "+service+" "+addr, nil, nil, filepath.Join(p.bin, "osm-agent"), "run", "--config", filepath.Join(dir, "agent.yaml"))
	boot := filepath.Join(dir, "grpc-bootstrap.json")
	waitFile(p.t, boot, p.logs["agent "+service+" "+addr])
	waitFile(p.t, filepath.Join(dir, "service.crt"), p.logs["agent "+service+" "+addr])
	return "GRPC_XDS_BOOTSTRAP=" + boot
}

func waitFile(t *testing.T, path string, log *testlog.Buffer) {
	t.Helper()
	waitLog(t, path, log, func(string) bool { _, err := os.Stat(path); return err == nil })
}

// endpoints writes the static provider's file of the bookstore; extraV1
// adds a second bookstore-v1 machine, 127.0.30.6, and gone names the
// backends (bookstore-v1, bookstore-v2) left without their machines.
func (p *polyglot) endpoints(extraV1 bool, gone ...string) {
	p.t.Helper()
	p.writeEndpoints(bookstoreEndpoints(extraV1, gone...))
}

// bookstoreEndpoints is the static provider's file of endpoints.
func bookstoreEndpoints(extraV1 bool, gone ...string) string {
	v1 := "[{ip: 127.0.30.3, port: 14001, labels: {version: v1}}"
	if extraV1 {
		v1 += ", {ip: 127.0.30.6, port: 14001, labels: {version: v1}}"
	}
	v1 += "]"
	v2 := "[{ip: 127.0.30.4, port: 14001, labels: {version: v2}}]"
	for _, g := range gone {
		switch g {
		case "bookstore-v1":
			v1 = "[]"
		case "bookstore-v2":
			v2 = "[]"
		}
	}
	doc := "services:\n" +
		"  - {name: bookbuyer, namespace: default, endpoints: [{ip: 127.0.30.1, port: 14001}, {ip: 127.0.30.2, port: 14001}]}\n" +
		"  - {name: bookthief, namespace: default, endpoints: [{ip: 127.0.30.5, port: 14001}]}\n" +
		"  - {name: bookstore, namespace: default, endpoints: [{ip: 127.0.30.3, port: 14001}, {ip: 127.0.30.4, port: 14001}]}\n" +
		"  - {name: bookstore-v1, namespace: default, endpoints: " + v1 + "}\n" +
		"  - {name: bookstore-v2, namespace: default, endpoints: " + v2 + "}\n"
	return doc
}

// writeEndpoints replaces the static provider's file with doc.
func (p *polyglot) writeEndpoints(doc string) {
	p.t.Helper()
	path := filepath.Join(p.dir, "endpoints.yaml")
	if err := os.WriteFile(path+".tmp", []byte(doc), 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		p.t.Fatal(err)
	}
}

func (p *polyglot) split(name string, weights ...any) {
	p.t.Helper()
	doc := "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  backends:\n"
	for i := 0; i+1 < len(weights); i += 2 {
		doc += fmt.Sprintf("    - {service: %s, weight: %d}\n", weights[i], weights[i+1])
	}
	path := filepath.Join(p.dir, name+".yaml")
	os.WriteFile(path, []byte(doc), 0o644)
	p.admin("apply", "-f", path)
}

// requirePolyglotDeps finds python3 with grpcio and the node modules, or
// fails naming the fix.
func requirePolyglotDeps(t *testing.T) (python, nodeJS, nodeModules string) {
	python = "/usr/bin/python3" // Debian's, with python3-grpcio (not a pyenv shim's)
	if out, err := exec.Command(python, "-c", "import grpc; print(grpc.__version__)").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import grpc (%v: %s): install Debian's python3-grpcio (make test-deps does)", python, err, out)
	}
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH: install Debian's nodejs (make test-deps does)")
	}
	nodeModules = os.Getenv("OSM_NODE_MODULES")
	if nodeModules == "" {
		t.Fatal("OSM_NODE_MODULES is not set: run `make test-polyglot` (it runs npm ci from examples/bookstore/node/package-lock.json into the cache) or set it to a node_modules directory holding @grpc/grpc-js and @grpc/grpc-js-xds")
	}
	if _, err := os.Stat(filepath.Join(nodeModules, "@grpc", "grpc-js-xds", "package.json")); err != nil {
		t.Fatalf("OSM_NODE_MODULES=%s holds no @grpc/grpc-js-xds: %v", nodeModules, err)
	}
	return python, nodeJS, nodeModules
}

// TestPolyglotProxyless: a Python (C-core) and a Node (grpc-js) buyer call
// bookstore through xds:/// via their agents' local xDS endpoints;
// bookstore-v1 is a Python xDS-enabled server and bookstore-v2 a Node one,
// both enforcing the mesh's RBAC. Checked: the 80/20 split over 1,000
// calls of each buyer, a split change followed within a second, a denied
// caller refused at once with PERMISSION_DENIED (through the mesh, and by
// each server's RBAC when it dials directly), an endpoint removal followed.
func TestPolyglotProxyless(t *testing.T) {
	python, nodeJS, nodeModules := requirePolyglotDeps(t)
	dir := t.TempDir()
	p := &polyglot{t: t, dir: dir, bin: filepath.Join(dir, "bin"), python: python, nodeJS: nodeJS, nodeModules: nodeModules, logs: map[string]*testlog.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range p.logs {
				t.Logf("== %s\n%s", name, l)
			}
		}
	})
	p.serve(bookstoreEndpoints(false), "bookthief", "./examples/bookstore/bookthief")
	applied := p.admin("apply", "-f", "../examples/bookstore/mesh.yaml", "-f", "../examples/bookstore/grpc.yaml")
	// No machine serves bookwarehouse here: apply says so, naming the
	// TrafficTarget that leads to it.
	if want := `TrafficTarget default/bookstore-access-bookwarehouse`; !strings.Contains(applied, want) || !strings.Contains(applied, `service "bookwarehouse" has no endpoints`) {
		t.Errorf("apply of the bookstore mesh: want a warning naming %s and bookwarehouse, which no machine serves; got:\n%s", want, applied)
	}

	examples, _ := filepath.Abs("../examples/bookstore")
	nodeEnv := []string{"NODE_PATH=" + nodeModules, "GRPC_XDS_EXPERIMENTAL_RBAC=true"}

	// The servers: bookstore-v1 in Python, bookstore-v2 in Node.
	v1Boot := p.agent("bookstore-v1", "127.0.30.3", "bookstore")
	p.start("store.py bookstore-v1", []string{v1Boot}, io.Discard, python, filepath.Join(examples, "python", "store.py"), "--addr", "127.0.30.3:14001", "--name", "bookstore-v1")
	v2Boot := p.agent("bookstore-v2", "127.0.30.4", "bookstore")
	p.start("store.js bookstore-v2", append([]string{v2Boot}, nodeEnv...), io.Discard, nodeJS, filepath.Join(examples, "node", "store.js"), "--addr", "127.0.30.4:14001", "--name", "bookstore-v2")
	waitLog(t, "the Node server serving with its xDS listener", p.logs["store.js bookstore-v2"], func(s string) bool { return strings.Contains(s, "bookstore-v2 serving on") })

	// The buyers: bookbuyer in Python on one machine and in Node on another.
	pyCalls, nodeCalls := newCalls(), newCalls()
	pyOut, pyW := io.Pipe()
	go pyCalls.read(pyOut)
	p.start("buyer.py", []string{p.agent("bookbuyer", "127.0.30.1")}, pyW, python, filepath.Join(examples, "python", "buyer.py"), "--per-call", "--interval", "0.002")
	nodeOut, nodeW := io.Pipe()
	go nodeCalls.read(nodeOut)
	p.start("buyer.js", append([]string{p.agent("bookbuyer", "127.0.30.2")}, nodeEnv...), nodeW, nodeJS, filepath.Join(examples, "node", "buyer.js"), "--per-call", "--interval", "0.002")
	t.Cleanup(func() { pyW.Close(); nodeW.Close() })

	buyers := []buyer{{"Python (C-core)", pyCalls}, {"Node (grpc-js)", nodeCalls}}
	ok := func(k call) bool { return k.OK }
	for _, b := range buyers {
		b.c.until(t, b.name+" buyer: 20 calls in a row answered", runOf(20, ok))
	}

	t.Run("80/20 split over 1,000 calls", func(t *testing.T) {
		for _, b := range buyers {
			start := b.c.len()
			l := b.c.until(t, b.name+": 1,000 calls", func(l []call) bool { return len(l) >= start+1000 })[start : start+1000]
			n := map[string]int{}
			for _, k := range l {
				if k.OK {
					n[k.From]++
				} else {
					n[k.Code]++
				}
			}
			v1 := float64(n["bookstore-v1"]) / 1000
			t.Logf("%s buyer: %v (v1 %.1f%%)", b.name, n, 100*v1)
			if v1 < 0.75 || v1 > 0.85 || n["bookstore-v1"]+n["bookstore-v2"] != 1000 {
				t.Errorf("%s buyer: %v over 1,000 calls, want 80%% ±5 on bookstore-v1, the rest on bookstore-v2, no errors", b.name, n)
			}
		}
	})

	t.Run("a denied caller is refused at once", func(t *testing.T) {
		thiefCalls := newCalls()
		out, w := io.Pipe()
		go thiefCalls.read(out)
		t.Cleanup(func() { w.Close() })
		thiefBoot := p.agent("bookthief", "127.0.30.5")
		p.start("buyer.py as bookthief", []string{thiefBoot}, w, python, filepath.Join(examples, "python", "buyer.py"), "--per-call", "--interval", "0.05")
		l := thiefCalls.until(t, "bookthief's calls through the mesh", func(l []call) bool { return len(l) >= 5 })
		for _, k := range l[:5] {
			if k.OK || k.Code != "PERMISSION_DENIED" || k.MS >= 1000 {
				t.Errorf("bookthief (Python) through the mesh: %+v, want PERMISSION_DENIED in under a second", k)
			}
		}
		t.Logf("bookthief through the mesh: %s %q in %.1f ms", l[0].Code, l[0].Error, l[0].MS)

		// Dialing each server directly with its own mesh certificate, the
		// server's RBAC refuses it.
		certDir := strings.TrimSuffix(strings.TrimPrefix(thiefBoot, "GRPC_XDS_BOOTSTRAP="), "grpc-bootstrap.json")
		for _, srv := range []struct{ name, addr string }{{"Python bookstore-v1", "127.0.30.3:14001"}, {"Node bookstore-v2", "127.0.30.4:14001"}} {
			stats := &testlog.Buffer{}
			p.start("bookthief -direct "+srv.addr, []string{thiefBoot}, stats, filepath.Join(p.bin, "bookthief"), "-direct", srv.addr, "-cert-dir", certDir, "-interval", "50ms")
			waitLog(t, srv.name+" refuses bookthief by RBAC", stats, func(s string) bool { return strings.Contains(s, `"deniedDirect"`) })
			lines := strings.Split(strings.TrimSpace(stats.String()), "\n")
			last := lines[len(lines)-1]
			if strings.Contains(last, `"stolenDirect"`) {
				t.Errorf("%s served bookthief: %s", srv.name, last)
			}
			log := p.logs["bookthief -direct "+srv.addr]
			waitLog(t, srv.name+": bookthief's direct call refused with PERMISSION_DENIED", log, func(s string) bool {
				return strings.Contains(s, "direct call refused: rpc error: code = PermissionDenied")
			})
			t.Logf("%s refuses bookthief: %s; %s", srv.name, last, strings.TrimSpace(log.String()))
		}
	})

	t.Run("a split change is followed within a second", func(t *testing.T) {
		starts := []int{pyCalls.len(), nodeCalls.len()}
		t0 := time.Now()
		p.split("split-v2", "bookstore-v2", 100)
		for i, b := range buyers {
			l := b.c.until(t, b.name+": 100 calls in a row on bookstore-v2", runOf(100, from("bookstore-v2")))
			d := switchTime(l, starts[i], t0, from("bookstore-v2"))
			t.Logf("%s buyer followed the split change in %v", b.name, d.Round(time.Millisecond))
			if d > time.Second {
				t.Errorf("%s buyer: a call went elsewhere than bookstore-v2 %v after the apply, want under a second", b.name, d)
			}
		}
		p.split("split-80-20", "bookstore-v1", 80, "bookstore-v2", 20)
		for _, b := range buyers {
			b.c.until(t, b.name+": back on bookstore-v1", runOf(1, from("bookstore-v1")))
		}
	})

	t.Run("an endpoint removal is followed", func(t *testing.T) {
		// A second bookstore-v1 machine joins, takes calls, and leaves.
		boot := p.agent("bookstore-v1", "127.0.30.6", "bookstore")
		p.start("store.py bookstore-v1 second", []string{boot}, io.Discard, python, filepath.Join(examples, "python", "store.py"), "--addr", "127.0.30.6:14001", "--name", "bookstore-v1-second")
		p.endpoints(true)
		second := from("bookstore-v1-second")
		for _, b := range buyers {
			b.c.until(t, b.name+": a call answered by the second bookstore-v1", func(l []call) bool { return len(l) > 0 && second(l[len(l)-1]) })
		}
		followed(t, buyers, "the endpoint removal", func() { p.endpoints(false) }, func(k call) bool { return k.OK && k.From != "bookstore-v1-second" })
	})

	t.Run("a split root without endpoints reaches its backends", func(t *testing.T) {
		// The machines enrolled as bookstore-v1 and bookstore-v2, so the
		// root bookstore has no participant endpoints. The split is
		// limited to GET paths, which no gRPC call matches: the calls
		// still reach the backends (before, every call failed).
		doc := "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  matches: [{kind: HTTPRouteGroup, name: bookstore-service-routes}]\n  backends: [{service: bookstore-v1, weight: 80}, {service: bookstore-v2, weight: 20}]\n"
		path := filepath.Join(p.dir, "split-matches.yaml")
		os.WriteFile(path, []byte(doc), 0o644)
		p.admin("apply", "-f", path)
		t.Cleanup(func() { p.dumpConfigs(t, p.debug, "bookbuyer") })
		backend := func(k call) bool { return k.OK && (k.From == "bookstore-v1" || k.From == "bookstore-v2") }
		for _, b := range buyers {
			l := b.c.until(t, b.name+": 300 calls in a row answered by bookstore-v1 or v2", runOf(300, backend))
			n := map[string]int{}
			for _, k := range l[len(l)-300:] {
				n[k.From]++
			}
			t.Logf("%s buyer, split with GET-only matches, empty root: %v", b.name, n)
			if n["bookstore-v2"] == 0 || n["bookstore-v1"] < n["bookstore-v2"] {
				t.Errorf("%s buyer: %v over 300 calls, want both backends, most on bookstore-v1 (80/20)", b.name, n)
			}
		}

		// bookstore-v2 loses its last endpoint: bookstore-v1 takes every
		// call, and no client rejects the configuration. On a fast
		// machine this runs within the server's 20 s startup grace, when
		// the root once counted the backends' addresses as its own and
		// the switch waited for the grace's end (TestModelStartupGrace-
		// KnowsReconnectedMachines in internal/catalog).
		followed(t, buyers, "bookstore-v2's last endpoint leaving", func() { p.endpoints(false, "bookstore-v2") }, from("bookstore-v1"))
		// Nobody serves: the clients hold both clusters with empty load
		// assignments, which they must accept (no NACK); the calls fail
		// with UNAVAILABLE until the machines are back.
		p.endpoints(false, "bookstore-v1", "bookstore-v2")
		for _, b := range buyers {
			l := b.c.until(t, b.name+": 20 calls in a row UNAVAILABLE while no backend has endpoints", runOf(20, func(k call) bool { return k.Code == "UNAVAILABLE" }))
			t.Logf("%s buyer with no backend: %s %q", b.name, l[len(l)-1].Code, l[len(l)-1].Error)
		}
		p.endpoints(false)
		for _, b := range buyers {
			b.c.until(t, b.name+": both backends answer again", func(l []call) bool {
				n := map[string]int{}
				for _, k := range l[max(0, len(l)-100):] {
					n[k.From]++
				}
				return n["bookstore-v1"] > 0 && n["bookstore-v2"] > 0 && n["bookstore-v1"]+n["bookstore-v2"] == 100
			})
		}
		if nacks := p.nacks(p.debug); len(nacks) > 0 {
			t.Errorf("proxies NACKed: %v", nacks)
		}
	})
}

// debugGet GETs path from the server's debug address with the admin token.
func (p *polyglot) debugGet(debugAddr, path string) ([]byte, error) {
	tok, err := os.ReadFile(filepath.Join(p.serverDir, "admin.token"))
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+debugAddr+path, nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b, err
}

// proxies returns GET /debug/proxies.
func (p *polyglot) proxies(debugAddr string) []debugProxy {
	p.t.Helper()
	b, err := p.debugGet(debugAddr, "/debug/proxies")
	if err != nil {
		p.t.Fatal(err)
	}
	var body struct{ Proxies []debugProxy }
	if err := json.Unmarshal(b, &body); err != nil {
		p.t.Fatalf("GET /debug/proxies: %v", err)
	}
	return body.Proxies
}

type debugProxy struct {
	NodeID  string
	Service struct{ Name string }
	Types   []struct {
		TypeURL                string
		Published, Sent, ACKed string
		SentAt                 time.Time
		NACK                   json.RawMessage
	}
}

// dumpConfigs logs, when the test failed, the configuration the server
// publishes to each proxy of service.
func (p *polyglot) dumpConfigs(t *testing.T, debugAddr, service string) {
	if !t.Failed() {
		return
	}
	for _, px := range p.proxies(debugAddr) {
		if px.Service.Name == service {
			b, err := p.debugGet(debugAddr, "/debug/config/"+px.NodeID)
			t.Logf("configuration of %s: %v\n%s", px.NodeID, err, b)
		}
	}
}

// nacks returns, per connected proxy, the NACKs its debug status records
// (GET /debug/proxies on the debug address, with the admin token).
func (p *polyglot) nacks(debugAddr string) []string {
	p.t.Helper()
	var body struct{ Proxies []debugProxy }
	body.Proxies = p.proxies(debugAddr)
	if len(body.Proxies) == 0 {
		p.t.Fatal("GET /debug/proxies lists no proxy")
	}
	var out []string
	for _, px := range body.Proxies {
		for _, ty := range px.Types {
			if len(ty.NACK) > 0 && string(ty.NACK) != "null" {
				out = append(out, fmt.Sprintf("%s %s: %s", px.NodeID, ty.TypeURL, ty.NACK))
			}
		}
	}
	return out
}
