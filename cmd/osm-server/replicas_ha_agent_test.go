//go:build consulintegration

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// haMesh: bookbuyer calls bookstore, split between bookstore-v1 and v2.
const haMesh = meshForBuyers + `---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore-v1}
spec: {ports: [{port: 14001}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore-v2}
spec: {ports: [{port: 14001}]}
---
`

func haSplit(v1, v2 int) string {
	return fmt.Sprintf("apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  backends: [{service: bookstore-v1, weight: %d}, {service: bookstore-v2, weight: %d}]\n", v1, v2)
}

// TestReplicaKillProxylessFailover is the test 2: a real osm-agent
// (told only replica 1's API; it learns the others from the server) serves
// a proxyless gRPC-Go client through its local xDS endpoint, which calls
// bookstore in a loop. kill -9 of the replica holding the agent's upstream
// stream: no RPC fails (the client keeps its last config, and its stream
// to the agent stays up), and within 30 s a surviving replica has the
// stream and configures the client: a split applied after the kill
// reaches it.
func TestReplicaKillProxylessFailover(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 3)

	// The backends' ports are fixed before the replicas start: their
	// static provider reads them.
	lisV1, lisV2 := listenLoopback(t), listenLoopback(t)
	portOf := func(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }
	endpoints := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(endpoints, fmt.Appendf(nil, `services:
  - {name: bookstore-v1, namespace: default, endpoints: [{ip: 127.0.0.1, port: %d}]}
  - {name: bookstore-v2, namespace: default, endpoints: [{ip: 127.0.0.1, port: %d}]}
  - {name: bookstore, namespace: default, endpoints: [{ip: 127.0.0.1, port: %d}, {ip: 127.0.0.1, port: %d}]}
  - {name: bookbuyer, namespace: default, endpoints: [{ip: 127.0.0.1, port: 14001}]}
`, portOf(lisV1), portOf(lisV2), portOf(lisV1), portOf(lisV2)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := os.WriteFile(r.config, fmt.Appendf(nil, "providers:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n", endpoints), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	startReplicas(t, rs)
	// bookstore-v2 takes 1% from the start, so its cluster is known before
	// the split moves: a split that brings a new cluster in can fail one
	// RPC in gRPC-Go ("unknown cluster selected"), kill or no kill.
	rs[0].osm().Apply(t, haMesh+haSplit(99, 1))

	// bookstore's two versions, each with its service certificate.
	caPEM, err := os.ReadFile(filepath.Join(rs[0].dataDir, caCertFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]net.Listener{"bookstore-v1": lisV1, "bookstore-v2": lisV2} {
		proxy := rs[0].osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: name})
		sc, err := meshclient.FetchAgentConfig(t.Context(), "https://"+rs[0].api, caPEM, proxy)
		if err != nil {
			t.Fatal(err)
		}
		serveBackend(t, l, sc.ServiceCertificate)
	}

	// The agent, told only replica 1's API.
	join, err := rs[1].cli(t, "token", "create", "--service", "bookbuyer", "--print", "enroll")
	if err != nil {
		t.Fatal(err)
	}
	token, hash := parseJoin(t, strings.TrimSpace(join))
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "join-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentConfig := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(agentConfig, fmt.Appendf(nil, `server: https://%s
caCertHash: %s
service: bookbuyer
namespace: default
proxy: none
dataDir: %s
hostsFile: %s
advertiseAddress: 127.0.0.1
metricsAddress: "off"
pollInterval: 2s
`, rs[0].api, hash, data, filepath.Join(dir, "hosts")), 0o600); err != nil {
		t.Fatal(err)
	}
	agentLog, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer agentLog.Close()
	agentCmd := exec.Command(filepath.Join(bin, "osm-agent"), "run", "--config", agentConfig, "--log-level", "debug")
	agentCmd.Stdout, agentCmd.Stderr = agentLog, agentLog
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan struct{})
	go func() { _ = agentCmd.Wait(); close(agentDone) }()
	t.Cleanup(func() {
		_ = agentCmd.Process.Signal(syscall.SIGTERM)
		<-agentDone
		b, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		if t.Failed() {
			t.Logf("agent log (tail):\n%s", tail(string(b), 8<<10))
		}
		// The app's stream to the agent stayed up: the agent carried it.
		if !t.Failed() && !strings.Contains(string(b), "carrying the application's stream to another server") {
			t.Errorf("the agent's log does not say it carried the app's xDS stream to another server:\n%s", tail(string(b), 4<<10))
		}
	})

	// It learns every replica from the server and keeps them in its state.
	var st struct {
		Replicas []meshapi.Replica `json:"replicas"`
	}
	testwait.For(t, "the agent to learn the three replicas and write its service certificate", func() bool {
		b, err := os.ReadFile(filepath.Join(data, "state.json"))
		if err != nil || json.Unmarshal(b, &st) != nil {
			return false
		}
		_, err = os.Stat(filepath.Join(data, "service.crt"))
		return len(st.Replicas) == 3 && err == nil
	})
	for _, r := range rs {
		want := meshapi.Replica{API: "https://" + r.api, XDS: r.xds}
		if !containsReplica(st.Replicas, want) {
			t.Errorf("agent state lists %v, want %v among them", st.Replicas, want)
		}
	}

	// The proxyless client, from the agent's gRPC bootstrap.
	bootstrap, err := os.ReadFile(filepath.Join(data, "grpc-bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///bookstore.default.mesh:14001", grpc.WithTransportCredentials(creds), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v2Port := portOf(lisV2)
	// v2Streak counts the RPCs in a row that reached bookstore-v2.
	var calls, failures, v2Streak atomic.Int64
	var lastErr atomic.Value
	ctx, stop := context.WithCancel(t.Context())
	var loop sync.WaitGroup
	defer func() { stop(); loop.Wait() }()
	hc := healthpb.NewHealthClient(conn)
	first := make(chan struct{})
	loop.Go(func() {
		for ctx.Err() == nil {
			var p peer.Peer
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(calls.Load() == 0))
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				failures.Add(1)
				lastErr.Store(err.Error())
			case p.Addr.(*net.TCPAddr).Port == v2Port:
				v2Streak.Add(1)
			default:
				v2Streak.Store(0)
			}
			if calls.Add(1) == 1 {
				close(first)
			}
			time.Sleep(20 * time.Millisecond) // the call rate, not a wait for a condition
		}
	})
	select {
	case <-first:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no RPC through xds:///bookstore.default.mesh:14001")
	}
	testwait.For(t, "25 RPCs", func() bool { return calls.Load() >= 25 })
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d RPCs failed before the kill: %v", n, lastErr.Load())
	}

	// Which replica holds the agent's upstream stream?
	cn := certCN(t, filepath.Join(data, "proxy.crt"))
	holder := func() *replica {
		for _, r := range rs {
			if r.cmd == nil {
				continue
			}
			if code, body := debugGet(t, r.debug, "/debug/proxies", "", r.adminToken(t)); code == 200 && strings.Contains(body, cn) {
				return r
			}
		}
		return nil
	}
	var victim *replica
	testwait.For(t, "a replica to list the agent's proxy as connected", func() bool { victim = holder(); return victim != nil })
	before := calls.Load()
	victim.kill()
	killed := time.Now()
	t.Logf("killed %s, which held %s's stream, after %d RPCs", victim.name, cn, before)

	// A surviving replica has the stream and configures the client.
	var survivor *replica
	testwait.For(t, "a surviving replica to hold the agent's stream", func() bool { survivor = holder(); return survivor != nil })
	reconnected := time.Since(killed)
	survivor.osm().Apply(t, haSplit(0, 100))
	// Ten RPCs in a row to v2 happen by chance once in 10^20 at 1%.
	testwait.For(t, "the client to follow the split applied after the kill", func() bool {
		return v2Streak.Load() >= 10
	})
	// The requirement, checked after the wait so that a slow
	// failover is reported as such, not as a condition that never held.
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("the split applied after the kill reached the client %v after it, want within 30s", took.Round(time.Millisecond))
	}
	// The agent's config polls reach a survivor too (through the replicas
	// it learned, when the dead one was the one it was told).
	testwait.For(t, "the agent to fetch its config from a surviving replica", func() bool {
		var st struct {
			LastConfig time.Time `json:"lastConfig"`
			APIServer  string    `json:"apiServer"`
		}
		b, err := os.ReadFile(filepath.Join(data, "status.json"))
		return err == nil && json.Unmarshal(b, &st) == nil && st.LastConfig.After(killed) && st.APIServer != "https://"+victim.api
	})
	testwait.For(t, "50 more RPCs", func() bool { return calls.Load() >= before+50 })
	t.Logf("%s holds the stream %s after the kill; the split applied there reached the client %s after the kill; %d RPCs since the kill, %d failed",
		survivor.name, reconnected.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), calls.Load()-before, failures.Load())
	if n := failures.Load(); n != 0 {
		t.Errorf("%d of %d RPCs failed across the kill, want none: %v", n, calls.Load(), lastErr.Load())
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serveBackend serves gRPC health on l over mTLS with the service
// certificate, requiring a client certificate from the mesh.
func serveBackend(t *testing.T, l net.Listener, sc meshapi.ServiceCertificate) {
	t.Helper()
	pair, err := tls.X509KeyPair([]byte(sc.CertificatePEM), []byte(sc.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(sc.CAPEM))
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(l) })
	t.Cleanup(func() { g.Stop(); wg.Wait() })
}

func containsReplica(list []meshapi.Replica, r meshapi.Replica) bool {
	for _, x := range list {
		if x == r {
			return true
		}
	}
	return false
}

func certCN(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := meshapi.ParseCertificatePEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName
}

func (r *replica) adminToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dataDir, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
