//go:build polyglot && linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testrig"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// The resilience rig's world: the Service flaky (gRPC on 14001), served by
// testrig backends on 127.0.32.10 and up, and the Service caller, whose
// machines 127.0.32.1-3 run the rig's callers in Go, Python (C-core) and
// Node (grpc-js), each with its own osm-agent. Permissive: these tests are
// about failures, not access.
const rigMesh = `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  traffic: {permissive: true}
  outbound: {vipRange: 127.78.0.0/16}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: caller, namespace: default}
spec:
  ports: [{name: http, port: 14001, appProtocol: http}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: flaky, namespace: default}
spec:
  ports: [{name: grpc, port: 14001, appProtocol: grpc}]
`

// rigTarget is what the callers call.
const rigTarget = "xds:///flaky.default.mesh:14001"

// resilienceRig is a real osm-server, backends of flaky and a caller per
// language, all with real agents.
type resilienceRig struct {
	p        *polyglot
	backends []testrig.Control // flaky-1, flaky-2, ... on 127.0.32.10, .11, ...
	callers  []*testrig.Caller // Go, Python (C-core), Node (grpc-js)
}

func rigEndpoints(backends int) string {
	var eps []string
	for i := range backends {
		eps = append(eps, fmt.Sprintf("{ip: 127.0.32.%d, port: 14001}", 10+i))
	}
	return "services:\n" +
		"  - {name: caller, namespace: default, endpoints: [{ip: 127.0.32.1, port: 14001}, {ip: 127.0.32.2, port: 14001}, {ip: 127.0.32.3, port: 14001}]}\n" +
		"  - {name: flaky, namespace: default, endpoints: [" + strings.Join(eps, ", ") + "]}\n"
}

// newResilienceRig starts the world with n healthy backends and returns
// once every caller's call is answered.
func newResilienceRig(t *testing.T, n int) *resilienceRig {
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
	r := &resilienceRig{p: p}
	p.serve(rigEndpoints(n), "testrig-backend", "./internal/testrig/backend", "testrig-caller", "./internal/testrig/caller")
	mesh := filepath.Join(dir, "rig-mesh.yaml")
	os.WriteFile(mesh, []byte(rigMesh), 0o644)
	p.admin("apply", "-f", mesh)

	for i := range n {
		name, ip := fmt.Sprintf("flaky-%d", i+1), fmt.Sprintf("127.0.32.%d", 10+i)
		ctl := testrig.Control{Addr: freeAddr(t)}
		p.start("testrig-backend "+name, []string{p.agent("flaky", ip)}, nil, filepath.Join(p.bin, "testrig-backend"),
			"-name", name, "-listen", ip+":14001", "-control", ctl.Addr)
		testwait.Until(t, name+" serving with its listener from xDS", func() (bool, string) {
			s, err := ctl.State(t.Context())
			return err == nil && s.Serving, fmt.Sprintf("%+v %v", s, err)
		})
		r.backends = append(r.backends, ctl)
	}

	rig, _ := filepath.Abs("../internal/testrig")
	r.caller("Go", "127.0.32.1", nil, exec.Command(filepath.Join(p.bin, "testrig-caller"), "-target", rigTarget))
	r.caller("Python (C-core)", "127.0.32.2", nil, exec.Command(python, filepath.Join(rig, "python", "caller.py"), "--target", rigTarget))
	r.caller("Node (grpc-js)", "127.0.32.3", []string{"NODE_PATH=" + nodeModules}, exec.Command(nodeJS, filepath.Join(rig, "node", "caller.js"), "--target", rigTarget))
	r.each(t, "a call answered", func(t *testing.T, c *testrig.Caller) {
		testwait.Until(t, c.Name()+": a call answered", func() (bool, string) {
			l := r.run(t, c, testrig.Batch{N: 1, DeadlineMS: 5000})
			return l[0].OK, l[0].String()
		})
	})
	return r
}

// caller starts a caller process on its own machine (agent) at addr.
func (r *resilienceRig) caller(name, addr string, env []string, cmd *exec.Cmd) {
	t := r.p.t
	t.Helper()
	boot := r.p.agent("caller", addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, w := io.Pipe()
	c := testrig.NewCaller(name, stdin)
	go c.Read(out)
	t.Cleanup(func() { w.Close() })
	r.p.startCmd("caller "+name, append([]string{boot}, env...), w, cmd)
	r.callers = append(r.callers, c)
}

// run runs a batch on c, failing t if it cannot.
func (r *resilienceRig) run(t *testing.T, c *testrig.Caller, b testrig.Batch) []testrig.Result {
	t.Helper()
	l, err := c.Run(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// each runs f for every caller at once, as subtests named by language.
func (r *resilienceRig) each(t *testing.T, what string, f func(t *testing.T, c *testrig.Caller)) {
	t.Helper()
	t.Run(what, func(t *testing.T) {
		for _, c := range r.callers {
			t.Run(c.Name(), func(t *testing.T) {
				t.Parallel()
				f(t, c)
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
}

// inTurn runs f for every caller, one after the other, as subtests
// named by language: for counting at a backend what each caller did.
func (r *resilienceRig) inTurn(t *testing.T, what string, f func(t *testing.T, c *testrig.Caller)) {
	t.Helper()
	t.Run(what, func(t *testing.T) {
		for _, c := range r.callers {
			t.Run(c.Name(), func(t *testing.T) { f(t, c) })
		}
	})
	if t.Failed() {
		t.FailNow()
	}
}

func (r *resilienceRig) set(t *testing.T, backend int, b testrig.Behaviour) testrig.State {
	t.Helper()
	s, err := r.backends[backend].Set(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *resilienceRig) state(t *testing.T, backend int) testrig.State {
	t.Helper()
	s, err := r.backends[backend].State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apply applies a YAML document.
func (r *resilienceRig) apply(t *testing.T, name, doc string) {
	t.Helper()
	path := filepath.Join(r.p.dir, name+".yaml")
	os.WriteFile(path, []byte(doc), 0o644)
	t.Logf("apply %s: %s", name, strings.TrimSpace(r.p.admin("apply", "-f", path)))
}

// delete deletes a document of the default namespace.
func (r *resilienceRig) delete(t *testing.T, kind, name string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(r.p.bin, "osm-server"), "delete", kind, name, "-n", "default", "--server", "https://"+r.p.api, "--data-dir", r.p.serverDir).CombinedOutput()
	if err != nil {
		t.Errorf("osm-server delete %s %s: %v\n%s", kind, name, err, out)
	}
}

// converged waits until every caller's proxy has been sent, since the
// given time, and has ACKed a configuration in which has holds for the
// resources of some type (has sees one type's resources as JSON).
func (r *resilienceRig) converged(t *testing.T, what string, since time.Time, has func(resources string) bool) {
	t.Helper()
	testwait.Until(t, "every caller ACKed "+what, func() (bool, string) {
		b, err := r.p.debugGet(r.p.debug, "/debug/proxies")
		var body struct{ Proxies []debugProxy }
		if err == nil {
			err = json.Unmarshal(b, &body)
		}
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, px := range body.Proxies {
			if px.Service.Name != "caller" {
				continue
			}
			n++
			b, err := r.p.debugGet(r.p.debug, "/debug/config/"+px.NodeID)
			var config map[string]json.RawMessage
			if err == nil {
				err = json.Unmarshal(b, &config)
			}
			if err != nil {
				return false, fmt.Sprintf("%s: %v", px.NodeID, err)
			}
			found := false
			for _, ty := range px.Types {
				if len(ty.NACK) > 0 && string(ty.NACK) != "null" {
					t.Fatalf("%s NACKed %s: %s", px.NodeID, ty.TypeURL, ty.NACK)
				}
				if !has(string(config[ty.TypeURL])) {
					continue
				}
				found = true
				if !ty.SentAt.After(since) || ty.ACKed != ty.Sent {
					return false, fmt.Sprintf("%s: %s sent %q at %v, ACKed %q (want sent after %v, and ACKed)", px.NodeID, ty.TypeURL, ty.Sent, ty.SentAt, ty.ACKed, since)
				}
			}
			if !found {
				return false, fmt.Sprintf("%s: no configuration published with %s", px.NodeID, what)
			}
		}
		return n == len(r.callers), fmt.Sprintf("%d caller proxies connected, want %d", n, len(r.callers))
	})
}

// TestPolyglotResilience runs the resilience rig (internal/testrig)
// through the mesh, for each of gRPC-Go, C-core (Python) and grpc-js
// (Node), configured only by their agents' bootstraps: a backend failing
// every call is seen as UNAVAILABLE, and a hanging backend's calls end at
// an HTTPRoute's request timeout (max_stream_duration), not at the
// callers' own deadline.
func TestPolyglotResilience(t *testing.T) {
	r := newResilienceRig(t, 1)

	// The baseline of the retry tests: no policy, so every call reaches
	// the backend once and fails with its status.
	t.Run("a backend failing every call", func(t *testing.T) {
		before := r.set(t, 0, testrig.Behaviour{Fail: 1})
		const n = 20
		r.each(t, "is UNAVAILABLE", func(t *testing.T, c *testrig.Caller) {
			for _, k := range r.run(t, c, testrig.Batch{N: n, Concurrency: 4, DeadlineMS: 10_000}) {
				if k.OK || k.Code != "UNAVAILABLE" || k.From != "flaky-1" || !strings.Contains(k.Error, "testrig backend flaky-1 fails 1 of its calls") || k.Duration() > 5*time.Second {
					t.Errorf("%s: %v, want UNAVAILABLE from flaky-1 (its trailer) with its message, at once", c.Name(), k)
				}
			}
		})
		after := r.set(t, 0, testrig.Behaviour{})
		if got, want := after.Failed-before.Failed, int64(n*len(r.callers)); got != want {
			t.Errorf("the backend failed %d calls, want %d: each call once (no retries without a policy)", got, want)
		}
	})

	t.Run("a hanging backend, a route timeout of 500ms", func(t *testing.T) {
		applied := time.Now()
		r.apply(t, "route-timeout", `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: flaky-timeout, namespace: default}
spec:
  parentRefs: [{group: "", kind: Service, name: flaky, port: 14001}]
  rules:
    - backendRefs: [{name: flaky, port: 14001}]
      timeouts: {request: 500ms}
`)
		t.Cleanup(func() { r.delete(t, "httproute", "flaky-timeout") })
		r.converged(t, "the route's max_stream_duration of 0.5s", applied, func(cfg string) bool {
			return strings.Contains(cfg, `"maxStreamDuration"`) && strings.Contains(cfg, `"0.500s"`)
		})
		r.set(t, 0, testrig.Behaviour{Hang: true})
		const n = 8
		r.inTurn(t, "calls end at the route's timeout", func(t *testing.T, c *testrig.Caller) {
			before := r.state(t, 0)
			// The callers' own deadline is 10s: a call that ends after
			// 5s did not get the route's timeout. The lower bound is the
			// timeout less the clocks' difference (the client starts its
			// timer before the caller's). The backend gets the deadline
			// too (grpc-timeout) and gRPC-Go's server resets the stream
			// when it passes (RST_STREAM CANCEL): a client that reads
			// the reset before its own timer fires reports CANCELLED
			// (seen with grpc-js), at the same time.
			lo, hi := 450*time.Millisecond, 5*time.Second
			if c.Name() == "Python (C-core)" {
				// C-core 1.51 (Debian's python3-grpcio) ends each call
				// far sooner than the route's max_stream_duration, with
				// DEADLINE_EXCEEDED: at 0.5s in a few milliseconds,
				// before the call reaches the backend; at 1.5s within
				// 200ms, after. Asserted as it is, so that a C-core that
				// honours the timeout fails here and is noticed.
				lo, hi = 0, 450*time.Millisecond
			}
			codes := map[string]int{}
			var slowest time.Duration
			for _, k := range r.run(t, c, testrig.Batch{N: n, Concurrency: 4, DeadlineMS: 10_000}) {
				codes[k.Code]++
				slowest = max(slowest, k.Duration())
				if (k.Code != "DEADLINE_EXCEEDED" && k.Code != "CANCELLED") || k.Duration() < lo || k.Duration() >= hi {
					t.Errorf("%s: %v, want DEADLINE_EXCEEDED (or CANCELLED) after %v to %v (the route's timeout is 500ms, the caller's deadline 10s)", c.Name(), k, lo, hi)
				}
			}
			t.Logf("%s: %d calls to a hanging backend: %v, the slowest ended after %v", c.Name(), n, codes, slowest.Round(time.Millisecond))
			// Each call reached the backend once, and ended there too.
			testwait.Until(t, "no call in flight at the backend", func() (bool, string) {
				s := r.state(t, 0)
				return s.InFlight == 0, fmt.Sprintf("%+v", s)
			})
			got := r.state(t, 0).Calls - before.Calls
			t.Logf("%s: the backend got %d calls", c.Name(), got)
			if got != n && c.Name() != "Python (C-core)" {
				t.Errorf("%s: the backend got %d calls, want %d", c.Name(), got, n)
			}
		})
		r.set(t, 0, testrig.Behaviour{})
	})
}
