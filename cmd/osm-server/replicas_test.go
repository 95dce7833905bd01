//go:build consulintegration

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/presence"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// replica is one osm-server process of several sharing a Consul, with
// fixed addresses and data dir so it can be killed and started again.
type replica struct {
	name                      string
	bin, dir, dataDir, config string
	api, xds, debug           string
	consulAddr                string // CONSUL_HTTP_ADDR: its own Consul agent
	extraEnv                  []string
	netns                     string // when set, the network namespace it runs in
	cmd                       *exec.Cmd
	exited                    chan error
}

// endpointsYAML is what every replica's static provider reads: one
// endpoint per service the tests use.
const endpointsYAML = `services:
  - name: bookstore
    namespace: default
    endpoints:
      - {ip: 10.0.0.5, port: 14001}
  - name: bookbuyer
    namespace: default
    endpoints:
      - {ip: 10.0.0.6, port: 14001}
  - name: bookwarehouse
    namespace: default
    endpoints:
      - {ip: 10.0.0.7, port: 14001}
`

// newReplicas prepares n replicas, replica i talking to consul[i % len].
func newReplicas(t *testing.T, bin string, consul []*consultest.Agent, n int) []*replica {
	t.Helper()
	base := t.TempDir()
	endpoints := filepath.Join(base, "endpoints.yaml")
	if err := os.WriteFile(endpoints, []byte(endpointsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	out := make([]*replica, n)
	for i := range out {
		dir := filepath.Join(base, fmt.Sprintf("replica-%d", i+1))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r := &replica{name: fmt.Sprintf("replica-%d", i+1), bin: bin, dir: dir, dataDir: filepath.Join(dir, "data"),
			api: freeAddr(t), xds: freeAddr(t), debug: freeAddr(t), consulAddr: consul[i%len(consul)].HTTPAddr}
		// Only the providers come from the file: the store is --store
		// consul and Consul's own environment variables.
		r.config = filepath.Join(dir, "server.yaml")
		if err := os.WriteFile(r.config, []byte(fmt.Sprintf("providers:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n", endpoints)), 0o600); err != nil {
			t.Fatal(err)
		}
		out[i] = r
		t.Cleanup(func() {
			r.kill()
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", r.name, tail(r.output(), 6<<10))
			}
		})
	}
	return out
}

// addConfig appends keys to the replica's server config file.
func (r *replica) addConfig(t *testing.T, yaml string) {
	t.Helper()
	f, err := os.OpenFile(r.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

func (r *replica) output() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "server.log"))
	return string(b)
}

// launch starts the process without waiting for it.
func (r *replica) launch(t *testing.T) {
	t.Helper()
	args := []string{filepath.Join(r.bin, "osm-server"), "serve", "--store", "consul", "--config", r.config,
		"--data-dir", r.dataDir, "--plugin-dir", r.bin,
		"--api-address", r.api, "--debug-address", r.debug, "--xds-address", r.xds, "--log-level", "debug"}
	if r.netns != "" {
		args = append([]string{"ip", "netns", "exec", r.netns}, args...) // ip execs osm-server: the same pid
	}
	r.cmd = exec.Command(args[0], args[1:]...)
	r.cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+r.consulAddr)
	r.cmd.Env = append(r.cmd.Env, r.extraEnv...)
	logf, err := os.OpenFile(filepath.Join(r.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.exited = make(chan error, 1)
	cmd, exited := r.cmd, r.exited
	go func() { exited <- cmd.Wait() }()
}

// start launches the replica and waits until /readyz says ready.
func (r *replica) start(t *testing.T) {
	t.Helper()
	r.launch(t)
	r.waitReady(t)
}

func (r *replica) waitReady(t *testing.T) {
	t.Helper()
	testwait.Until(t, r.name+" ready", func() (bool, string) {
		select {
		case err := <-r.exited:
			r.exited <- err
			t.Fatalf("%s exited before it was ready: %v\n%s", r.name, err, tail(r.output(), 4<<10))
		default:
		}
		code, body := r.readyz()
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
}

func (r *replica) readyz() (int, string) {
	resp, err := http.Get("http://" + r.debug + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// kill sends SIGKILL and waits for the process to be gone.
func (r *replica) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	err := <-r.exited
	r.exited <- err
	r.cmd = nil
}

func (r *replica) osm() xdstest.Server {
	return xdstest.Server{API: r.api, XDS: r.xds, DataDir: r.dataDir}
}

// cli runs an osm-server admin subcommand in-process against r.
func (r *replica) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errw strings.Builder
	cmd := newRootCmd(&out, &errw)
	cmd.SetArgs(append(args, "--server", "https://"+r.api, "--data-dir", r.dataDir))
	err := cmd.ExecuteContext(t.Context())
	if err != nil && errw.Len() > 0 {
		err = fmt.Errorf("%w\n%s", err, errw.String())
	}
	return out.String(), err
}

// servingCert returns the leaf and chain r's HTTPS API presents.
func (r *replica) servingCert(t *testing.T) []*x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", r.api, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates
}

// startReplicas starts every replica at once and waits for all.
func startReplicas(t *testing.T, rs []*replica) {
	t.Helper()
	for _, r := range rs {
		r.launch(t)
	}
	for _, r := range rs {
		r.waitReady(t)
	}
}

// TestReplicasServeEverything is the test 1: three replicas on a
// three-server Consul, each started with `--store consul` and only
// CONSUL_HTTP_ADDR. They create one mesh CA between them (each with its
// own serving certificate), a specification applied on replica 1 reaches
// a proxy connected to replica 3, and a token created on replica 2
// enrolls a machine through replica 1.
func TestReplicasServeEverything(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 3)
	startReplicas(t, rs) // all at once: they race to create the CA

	t.Run("one CA, a serving certificate each", func(t *testing.T) {
		ca := map[string]bool{}
		leaves := map[string]bool{}
		for _, r := range rs {
			out, err := r.cli(t, "ca", "show")
			if err != nil {
				t.Fatal(err)
			}
			ca[out] = true
			chain := r.servingCert(t)
			leaves[chain[0].SerialNumber.String()] = true
		}
		if len(ca) != 1 {
			t.Errorf("%d different CAs across 3 replicas, want 1", len(ca))
		}
		if len(leaves) != 3 {
			t.Errorf("%d different serving certificates across 3 replicas, want 3", len(leaves))
		}
	})

	t.Run("each singleton duty held by one replica", func(t *testing.T) {
		client, err := api.NewClient(&api.Config{Address: consul[0].HTTPAddr})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"prune-tokens", "prune-proxy-records"} {
			testwait.For(t, "duty "+d+" to be held", func() bool {
				pair, _, err := client.KV().Get("osm/duty/"+d, nil)
				return err == nil && pair != nil && pair.Session != ""
			})
		}
		holders := 0
		for _, r := range rs {
			holders += strings.Count(r.output(), "singleton duty taken")
		}
		if holders != 2 {
			t.Errorf("%d duty holders logged across replicas, want 2 (one per duty)", holders)
		}
	})

	t.Run("apply on replica 1 reaches a proxy on replica 3", func(t *testing.T) {
		buyer := mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
		rs[0].osm().Apply(t, meshForBuyer)
		// The proxy's own Service must be known where it connects.
		testwait.For(t, "replica 3 to know Service bookbuyer", func() bool {
			out, err := rs[2].cli(t, "get", "services")
			return err == nil && strings.Contains(out, "bookbuyer")
		})
		pair := rs[2].osm().Enroll(t, buyer)
		proxy := rs[2].osm().Connect(t, pair, "10.0.0.6", "default/bookstore")
		// A Service applied on replica 1 reaches the live proxy on 3.
		rs[0].osm().Apply(t, bookstoreSvc)
		proxy.WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})
		// Every replica follows it (each on its own watch: replica 3
		// serving it says nothing of when replica 2 has read it).
		for _, r := range rs {
			testwait.For(t, r.name+" to list Service bookstore", func() bool {
				out, err := r.cli(t, "get", "services")
				return err == nil && strings.Contains(out, "bookstore")
			})
		}
		// Revoked on replica 1: its stream on replica 3 is closed.
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if out, err := rs[0].cli(t, "proxy", "revoke", leaf.Subject.CommonName); err != nil {
			t.Fatalf("proxy revoke on replica 1: %v\n%s", err, out)
		}
		deadline := time.After(testwait.Bound(t))
		for open := true; open; {
			select {
			case _, open = <-proxy.Responses():
			case <-deadline:
				t.Fatal("the proxy revoked on replica 1 is still connected to replica 3")
			}
		}
	})

	// The replicas share the TLS session ticket keys through the store: a
	// proxy that fails over to another replica resumes its session there.
	t.Run("a TLS session made with replica 1 resumes on replicas 2 and 3", func(t *testing.T) {
		pair := rs[0].osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookbuyer"})
		sessions := tls.NewLRUClientSessionCache(1)
		if rs[0].osm().Resumes(t, pair, sessions) {
			t.Fatal("the proxy's first connection resumed a session it cannot have had")
		}
		for _, r := range rs[1:] {
			if !rs[0].osm().Resumes(t, pair, sessions) { // a fresh ticket from replica 1
				t.Fatal("the proxy's second connection to replica 1 did not resume")
			}
			if !r.osm().Resumes(t, pair, sessions) {
				t.Errorf("a session from replica 1 did not resume on %s", r.name)
			}
		}
	})

	t.Run("token made on replica 2 enrolls through replica 1", func(t *testing.T) {
		join, err := rs[1].cli(t, "token", "create", "--service", "bookstore", "--print", "enroll")
		if err != nil {
			t.Fatal(err)
		}
		token, hash := parseJoin(t, strings.TrimSpace(join))
		res, err := enrollOnce(t.Context(), "https://"+rs[0].api, token, hash, mesh.MeshService{Namespace: "default", Name: "bookstore"})
		if err != nil {
			t.Fatalf("enroll through replica 1 with replica 2's token: %v", err)
		}
		// Every replica knows the proxy, and the token is spent on all.
		for _, r := range rs {
			recs := r.osmProxies(t)
			if !recs[res.Identity] {
				t.Errorf("%s does not list proxy %s", r.name, res.Identity)
			}
		}
		if _, err := enrollOnce(t.Context(), "https://"+rs[2].api, token, hash, mesh.MeshService{Namespace: "default", Name: "bookstore"}); err == nil || !strings.Contains(err.Error(), "used up") {
			t.Errorf("second use of the single-use token through replica 3: %v, want used up", err)
		}
	})

	// Every replica runs every provider instance itself (docs: "Providers
	// on several replicas"): an endpoint change in the provider's source
	// reaches a proxy on each replica, through each replica's own plugin.
	t.Run("an endpoint change reaches proxies on every replica", func(t *testing.T) {
		buyer := mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
		var proxies []*xdstest.Proxy
		for _, r := range rs {
			p := r.osm().Connect(t, r.osm().Enroll(t, buyer), "10.0.0.6", "default/bookstore")
			p.WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})
			proxies = append(proxies, p)
		}
		moved := strings.Replace(endpointsYAML, "{ip: 10.0.0.5, port: 14001}", "{ip: 10.0.0.9, port: 14001}", 1)
		start := time.Now()
		if err := os.WriteFile(filepath.Join(filepath.Dir(rs[0].dir), "endpoints.yaml"), []byte(moved), 0o600); err != nil {
			t.Fatal(err)
		}
		for i, p := range proxies {
			p.WaitEDS(t, "default/bookstore", []string{"10.0.0.9:14001"})
			t.Logf("%s's proxy has the moved endpoint %v after the file changed", rs[i].name, time.Since(start).Round(time.Millisecond))
		}
	})
}

// osmProxies returns the CNs r lists.
func (r *replica) osmProxies(t *testing.T) map[string]bool {
	t.Helper()
	is := &identityServer{api: r.api, dataDir: r.dataDir}
	out := map[string]bool{}
	for _, rec := range is.proxies(t) {
		out[rec.CN] = true
	}
	return out
}

// commits sums osm_store_commits_total over the replicas given.
func commits(t *testing.T, rs ...*replica) int {
	t.Helper()
	n := 0
	for _, r := range rs {
		resp, err := http.Get("http://" + r.debug + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v int
		for _, line := range strings.Split(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "osm_store_commits_total %d", &v); err == nil {
				n += v
			}
		}
	}
	return n
}

// meshForBuyer is a permissive mesh with Service bookbuyer; bookstoreSvc
// adds its upstream.
const (
	meshForBuyer = `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec: {traffic: {permissive: true}, endpoints: {requireConnectedProxy: false}}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookbuyer}
spec: {ports: [{port: 14001}]}
`
	bookstoreSvc = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore}
spec: {ports: [{port: 14001}]}
`
	meshForBuyers = meshForBuyer + "---\n" + bookstoreSvc
	// warehouseSvc is a Service whose endpoints the static provider has.
	warehouseSvc = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookwarehouse}
spec: {ports: [{port: 14001}]}
`
)

// TestReplicaConsulLoad measures the writes a fleet costs Consul (the
// figures docs/operator-guide.md quotes): per enrollment (with its first
// connection), at rest with every proxy connected, and when the proxies of
// a killed replica reconnect to the others.
func TestReplicaConsulLoad(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 3)
	startReplicas(t, rs)
	rs[0].osm().Apply(t, meshForBuyers)
	buyer := mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
	for _, r := range rs {
		testwait.For(t, r.name+" to know Service bookbuyer", func() bool {
			out, err := r.cli(t, "get", "services")
			return err == nil && strings.Contains(out, "bookbuyer")
		})
	}
	const n = 30
	certs := make([]tls.Certificate, n)
	before := commits(t, rs...)
	start := time.Now()
	for i := range certs {
		certs[i] = rs[i%3].osm().Enroll(t, buyer) // a token and an enrollment each
		rs[i%3].osm().Connect(t, certs[i], "10.0.0.6", "default/bookstore").WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})
	}
	// Claims are written in the background (gathered until none came for
	// 100 ms, at most 5 s),
	// and a replica's readers see its own claims before they are written:
	// wait until every replica sees every record claimed, which holds only
	// once each replica's claims are in the store.
	testwait.For(t, "every proxy claimed, as every replica sees it", func() bool {
		for _, r := range rs {
			is := &identityServer{api: r.api, dataDir: r.dataDir}
			claimed := 0
			for _, rec := range is.proxies(t) {
				if rec.State == "claimed" {
					claimed++
				}
			}
			if claimed != n {
				return false
			}
		}
		return true
	})
	// So is each replica's presence record, at most once a second
	// (presence.DefaultInterval): wait until all three name bookbuyer's
	// address, or the last of them lands in the rest window below.
	client, err := api.NewClient(&api.Config{Address: consul[0].HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "every replica's presence record naming bookbuyer at 10.0.0.6", func() (bool, string) {
		pairs, _, err := client.KV().List("osm/"+presence.Prefix, nil)
		if err != nil {
			return false, err.Error()
		}
		named := 0
		for _, p := range pairs {
			set, err := presence.Decode(p.Value)
			if err == nil && slices.Contains(set[buyer], netip.MustParseAddr("10.0.0.6")) {
				named++
			}
		}
		return named == len(rs), fmt.Sprintf("%d of %d records name it", named, len(rs))
	})
	enrolled := commits(t, rs...) - before
	t.Logf("%d enrollments (token create, enroll, first connection) in %s: %d Consul commits, %.1f per enrollment",
		n, time.Since(start).Round(time.Millisecond), enrolled, float64(enrolled)/n)
	// Three per enrollment (token, enrollment, claim), once the account's
	// service certificate, and once each replica's presence record (every
	// proxy is bookbuyer on one address: each replica's set changes once).
	if enrolled > 3*n+1+3 {
		t.Errorf("%d commits for %d enrollments, want at most %d (token, enrollment and claim each, one service certificate, a presence record per replica)", enrolled, n, 3*n+1+3)
	}

	// At rest: nothing is written, however many proxies are connected.
	rest := commits(t, rs...)
	const restFor = 5 * time.Second
	time.Sleep(restFor) // measuring a rate over an interval, not waiting for a condition
	if d := commits(t, rs...) - rest; d != 0 {
		t.Errorf("%d commits in %s at rest with %d proxies connected, want 0", d, restFor, n)
	}

	// Reconnect storm: replica 1 dies, its proxies reconnect to the others.
	// Their (service, address) is already in each survivor's presence
	// record, so nothing is written.
	rs[0].kill()
	survivors := rs[1:]
	storm := commits(t, survivors...)
	for i := 0; i < n; i += 3 {
		survivors[i%2].osm().Connect(t, certs[i], "10.0.0.6", "default/bookstore").WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})
	}
	if d := commits(t, survivors...) - storm; d != 0 {
		t.Errorf("%d commits while %d proxies reconnected to surviving replicas, want 0", d, n/3)
	}
	t.Logf("at rest: 0 commits in %s with %d proxies; reconnect of %d proxies: 0 commits", restFor, n, n/3)
}

// TestReplicaWithoutConsul is the Consul trouble when a replica's
// Consul agent dies: replica 1's Consul server is stopped (the other two
// keep a quorum). Replica 1 keeps its proxy's stream and what it was sent,
// says not ready on /readyz naming the store, refuses a write with an
// error naming Consul and what failed; a Service applied on replica 2
// meanwhile reaches replica 1's proxy within seconds of its Consul coming
// back (the test says how long), and writes resume.
func TestReplicaWithoutConsul(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 2)
	startReplicas(t, rs)
	r := rs[0]
	rs[1].osm().Apply(t, meshForBuyers)
	testwait.For(t, "replica 1 to know Service bookstore", func() bool {
		out, err := r.cli(t, "get", "services")
		return err == nil && strings.Contains(out, "bookstore")
	})
	proxy := r.osm().Connect(t, r.osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookbuyer"}), "10.0.0.6", "default/bookstore", "default/bookwarehouse")
	proxy.WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})

	consul[0].Stop()
	testwait.For(t, "/readyz to say not ready", func() bool {
		code, body := r.readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "store is unreachable") && strings.Contains(body, consul[0].HTTPAddr)
	})
	_, body := r.readyz()
	t.Logf("/readyz without Consul: %s", strings.TrimSpace(body))
	out, err := r.cli(t, "apply", "-f", bookstoreFile)
	if err == nil || !strings.Contains(err.Error(), "consul store at http://"+consul[0].HTTPAddr) || !strings.Contains(err.Error(), "retries") {
		t.Errorf("apply without Consul: %v\n%s; want an error naming the Consul store", err, out)
	} else {
		t.Logf("apply without Consul: %v", err)
	}
	// A change through the other replica, while this one's watches fail
	// and back off. Consul server 1 may have been the leader: the others
	// elect a new one first (a write meanwhile fails, and clients retry).
	testwait.For(t, "Consul servers 2 and 3 to have a leader", func() bool {
		l, err := consultest.Leader(t.Context(), consul[1].HTTPAddr)
		return err == nil && l != "" && !strings.HasPrefix(l, consul[0].Host+":")
	})
	rs[1].osm().Apply(t, warehouseSvc)
	// Long enough for its specification watch to back off to 16 s (the
	// ~30 s catch-up seen before came from that backoff).
	testwait.For(t, "replica 1's specification watch to fail six times", func() bool {
		return watchFailures(r.output(), "osm/spec/") >= 6
	})
	// The proxy's stream stays up.
	select {
	case _, ok := <-proxy.Responses():
		if !ok {
			t.Error("the proxy's stream was closed while Consul was down")
		}
	default:
	}

	consul[0].Start(t)
	back := time.Now()
	proxy.WaitEDS(t, "default/bookwarehouse", []string{"10.0.0.7:14001"})
	caughtUp := time.Since(back)
	r.waitReady(t)
	t.Logf("after its Consul came back, replica 1's proxy had the Service applied on replica 2 meanwhile in %s (Consul's own start included); ready in %s",
		caughtUp.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	if caughtUp > 15*time.Second {
		t.Errorf("catch-up took %s after Consul came back, want a few seconds", caughtUp.Round(time.Millisecond))
	}
	if out, err := r.cli(t, "apply", "-f", bookstoreFile); err != nil {
		t.Errorf("apply after Consul is back: %v\n%s", err, out)
	}
}

// watchFailures counts the failed queries of the watch on prefix a
// replica logged.
func watchFailures(log, prefix string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "watch query failed") && strings.Contains(l, "watch="+prefix+" ") {
			n++
		}
	}
	return n
}

// TestReplicaKills is the test 5: 50 kill -9s of a random
// replica while agents enroll with one multi-use token through random
// replicas, and documents are applied and tokens created through random
// replicas. Afterwards the token's uses spent equal the proxy records of
// its service, no VIP is held by two services, and no proxy record is
// half-written. Each cycle waits for conditions only: a few more
// enrollments, then kill, restart, ready.
func TestReplicaKills(t *testing.T) {
	kills := 50
	if s := os.Getenv("OSM_REPLICA_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("OSM_REPLICA_KILLS=%q: want a positive number of kills", s)
		}
		kills = n
	}
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 3)
	startReplicas(t, rs)
	w := startWorkload(t, rs)
	start := time.Now()
	var restarts []time.Duration
	for k := range kills {
		r := rs[rand.IntN(3)]
		w.progress(t)
		r.kill()
		down := time.Now()
		r.launch(t)
		r.waitReady(t)
		restarts = append(restarts, time.Since(down))
		t.Logf("kill %d: %s, ready again in %s", k+1, r.name, restarts[len(restarts)-1].Round(time.Millisecond))
	}
	cycles := time.Since(start)
	w.stop()
	w.check(t, rs)
	slices.Sort(restarts)
	t.Logf("%d kills in %s (%s a cycle; restart to ready p50 %s, max %s): %s", kills, cycles.Round(time.Millisecond),
		(cycles / time.Duration(kills)).Round(time.Millisecond), restarts[len(restarts)/2].Round(time.Millisecond), restarts[len(restarts)-1].Round(time.Millisecond), w)
}

// TestReplicaConsulLeaderStop is the test 3: the Consul leader is
// stopped, twice, while enrollments, applies and token creations run
// through every replica. Writes resume after each election, and nothing
// is lost or done twice (the same checks as TestReplicaKills).
func TestReplicaConsulLeaderStop(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 3)
	startReplicas(t, rs)
	w := startWorkload(t, rs)
	for round := range 2 {
		w.progress(t)
		var leader *consultest.Agent
		for _, a := range consul {
			addr, err := consultest.Leader(t.Context(), a.HTTPAddr)
			if err == nil && strings.HasPrefix(addr, strings.TrimSuffix(a.HTTPAddr, ":8500")+":") {
				leader = a
			}
		}
		if leader == nil {
			t.Fatal("no Consul server says it is the leader")
		}
		leader.Stop()
		w.progress(t) // writes resume under the new leader
		leader.Start(t)
		// It rejoins (knows the leader) before the next round stops
		// another: two of three servers down is no quorum.
		if err := consultest.WaitLeader(t.Context(), leader.HTTPAddr); err != nil {
			t.Fatalf("consul %s after restart: %v", leader.Name, err)
		}
		// Knowing the leader is not enough: until autopilot counts it a
		// healthy voter again the cluster cannot lose another server.
		client, err := api.NewClient(&api.Config{Address: leader.HTTPAddr})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "Consul to tolerate a server failure again", func() bool {
			h, err := client.Operator().AutopilotServerHealth(nil)
			return err == nil && h.Healthy && h.FailureTolerance >= 1
		})
		// The replica whose agent that was reports ready again.
		for _, r := range rs {
			r.waitReady(t)
		}
		t.Logf("round %d: stopped leader %s; writes resumed", round+1, leader.Name)
	}
	w.stop()
	w.check(t, rs)
	t.Logf("2 leader stops: %s", w)
}

// workload enrolls with one multi-use token, applies Services and creates
// tokens through random replicas until stopped.
type workload struct {
	token, hash string
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	mu       sync.Mutex
	enrolled map[string]bool
	applied  int
	records  int
	services int
}

func startWorkload(t *testing.T, rs []*replica) *workload {
	t.Helper()
	svc := mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
	join, err := rs[0].cli(t, "token", "create", "--service", "bookbuyer", "--uses", "100000", "--print", "enroll")
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{enrolled: map[string]bool{}}
	w.token, w.hash = parseJoin(t, strings.TrimSpace(join))
	ctx, cancel := context.WithCancel(t.Context())
	w.cancel = cancel
	for n := range 3 {
		w.wg.Go(func() { // enrollments
			for i := 0; ctx.Err() == nil; i++ {
				r := rs[(n+i)%3]
				if res, err := enrollOnce(ctx, "https://"+r.api, w.token, w.hash, svc); err == nil {
					w.mu.Lock()
					w.enrolled[res.Identity] = true
					w.mu.Unlock()
				}
			}
		})
	}
	dir := t.TempDir()
	w.wg.Go(func() { // applies and token creations
		for i := 0; ctx.Err() == nil; i++ {
			r := rs[i%3]
			doc := filepath.Join(dir, fmt.Sprintf("svc-%d.yaml", i))
			os.WriteFile(doc, []byte(fmt.Sprintf("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: svc-%d}\nspec: {ports: [{port: 80}]}\n", i)), 0o600)
			if _, err := r.cli(t, "apply", "-f", doc); err == nil {
				w.mu.Lock()
				w.applied++
				w.mu.Unlock()
			}
			_, _ = r.cli(t, "token", "create", "--service", "bookstore")
		}
	})
	return w
}

// progress waits until a few more enrollments succeeded.
func (w *workload) progress(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	before := len(w.enrolled)
	w.mu.Unlock()
	want := before + 1 + rand.IntN(5)
	testwait.For(t, "more enrollments", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.enrolled) >= want
	})
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) String() string {
	return fmt.Sprintf("%d proxies enrolled (%d seen by agents), %d applies, %d services with distinct VIPs", w.records, len(w.enrolled), w.applied, w.services)
}

// check: the token's uses spent equal its service's proxy records, every
// record is whole, every certificate an agent got has a record, and no
// two Services share a VIP.
func (w *workload) check(t *testing.T, rs []*replica) {
	t.Helper()
	out, err := rs[1].cli(t, "token", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var toks []meshapi.TokenStatus
	if err := json.Unmarshal([]byte(out), &toks); err != nil {
		t.Fatal(err)
	}
	spent := -1
	for _, tok := range toks {
		if tok.UsesTotal == 100000 {
			spent = tok.UsesTotal - tok.UsesLeft
		}
	}
	is := &identityServer{api: rs[2].api, dataDir: rs[2].dataDir}
	known := map[string]bool{}
	for _, rec := range is.proxies(t) {
		if rec.Serial == "" || rec.Issued.IsZero() || rec.Expires.IsZero() {
			t.Errorf("half-written proxy record: %+v", rec)
		}
		if strings.HasSuffix(rec.CN, ".bookbuyer.default") {
			w.records++
		}
		known[rec.CN] = true
	}
	if spent != w.records {
		t.Errorf("token uses spent %d, proxy records of its service %d: a use lost or a proxy issued without one", spent, w.records)
	}
	for cn := range w.enrolled {
		if !known[cn] {
			t.Errorf("an agent got certificate %s but no replica has its record", cn)
		}
	}
	// A replica whose Consul agent was away catches up through its watch
	// (which backs off while Consul is unreachable): wait for it.
	testwait.For(t, "replica 1 to list every applied Service", func() bool {
		out, err = rs[0].cli(t, "get", "services")
		return err == nil && strings.Count(out, "svc-") >= w.applied
	})
	out, err = rs[0].cli(t, "get", "services", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var services struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				VIP string `json:"vip"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &services); err != nil {
		t.Fatalf("get services -o json: %v\n%.500s", err, out)
	}
	vips := map[string]string{}
	for _, s := range services.Items {
		if s.Status.VIP == "" {
			t.Errorf("Service %s has no VIP", s.Metadata.Name)
		}
		if other, dup := vips[s.Status.VIP]; dup {
			t.Errorf("VIP %s held by %s and %s", s.Status.VIP, other, s.Metadata.Name)
		}
		vips[s.Status.VIP] = s.Metadata.Name
	}
	w.services = len(vips)
	if w.records == 0 || w.applied == 0 {
		t.Errorf("%d enrollments and %d applies succeeded: the test proves nothing", w.records, w.applied)
	}
}
