//go:build consulintegration && linux

package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"golang.org/x/sys/unix"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestReplicaCutOffFromConsul is the test 4. Replica 2 runs in a
// network namespace of its own ("the host"), whose only way to Consul is a
// veth link to a second namespace ("the switch") where a forwarder relays to
// a Consul server; the test reaches the replica's API, xDS and debug ports
// through forwarders into its namespace that do not cross the link. With
// the link down the replica keeps its proxy's stream and configuration,
// says not ready on /readyz with the reason, and refuses writes naming the
// store, what failed and that it retries. Meanwhile a Service is applied on
// replica 1; once the link is back the replica catches up and its proxy
// gets the new Service's endpoints: the test says how long that took.
func TestReplicaCutOffFromConsul(t *testing.T) {
	consul := consultest.StartCluster(t, 3)
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 2)
	cut := rs[1]
	nw := newCutNetwork(t, consul[1].HTTPAddr)
	cut.netns = nw.host
	cut.consulAddr = nw.consul
	cut.api, cut.xds, cut.debug = nw.expose(t), nw.expose(t), nw.expose(t)
	startReplicas(t, rs)

	rs[0].osm().Apply(t, meshForBuyers)
	testwait.For(t, "the cut-off replica to know Service bookstore", func() bool {
		out, err := cut.cli(t, "get", "services")
		return err == nil && strings.Contains(out, "bookstore")
	})
	cert := cut.osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookbuyer"})
	proxy := cut.osm().Connect(t, cert, "10.0.0.6", "default/bookstore", "default/bookwarehouse")
	proxy.WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})

	nw.link(t, "down")
	downAt := time.Now()
	testwait.For(t, "/readyz to say not ready", func() bool {
		code, body := cut.readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "store is unreachable") && strings.Contains(body, nw.consul)
	})
	_, body := cut.readyz()
	t.Logf("/readyz %s after the link went down: %s", time.Since(downAt).Round(time.Millisecond), strings.TrimSpace(body))

	// Writes are refused, naming the store, what failed and that it retries.
	doc := filepath.Join(t.TempDir(), "bookwarehouse.yaml")
	if err := os.WriteFile(doc, []byte(warehouseSvc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, w := range [][]string{{"apply", "-f", doc}, {"token", "create", "--service", "bookbuyer"}} {
		start := time.Now()
		out, err := cut.cli(t, w...)
		if err == nil || !strings.Contains(err.Error(), "consul store at http://"+nw.consul) || !strings.Contains(err.Error(), "retr") {
			t.Errorf("%s on the cut-off replica: %v\n%s\nwant an error naming the Consul store, what failed and that it retries", strings.Join(w[:2], " "), err, out)
			continue
		}
		t.Logf("%s refused in %s: %v", strings.Join(w[:2], " "), time.Since(start).Round(time.Millisecond), err)
	}

	// A change made elsewhere meanwhile; the replica cannot know it yet.
	rs[0].osm().Apply(t, warehouseSvc)

	// The proxy's stream stays up, and nothing it was sent is withdrawn.
	drain := func() {
		for {
			select {
			case r, ok := <-proxy.Responses():
				if !ok {
					t.Fatal("the proxy's stream was closed while the replica was cut off from Consul")
				}
				for _, a := range r.GetResources() {
					var cla endpointv3.ClusterLoadAssignment
					if a.UnmarshalTo(&cla) == nil && cla.GetClusterName() == "default/bookstore" && len(cla.GetEndpoints()) == 0 {
						t.Error("the cut-off replica withdrew bookstore's endpoints from its proxy")
					}
				}
			default:
				return
			}
		}
	}
	drain()
	// An outage long enough to matter: the replica's blocking queries,
	// sent before the link went down, have found their connections dead
	// (its keepalives went unanswered) and its watches back off.
	testwait.For(t, "the cut-off replica's watches to find their connections dead", func() bool {
		return strings.Count(cut.output(), "watch query failed") >= 3
	})
	drain()
	if code, _ := cut.readyz(); code == http.StatusOK {
		t.Error("/readyz says ready while the link is down")
	}

	nw.link(t, "up")
	upAt := time.Now()
	proxy.WaitEDS(t, "default/bookwarehouse", []string{"10.0.0.7:14001"})
	caughtUp := time.Since(upAt)
	cut.waitReady(t)
	t.Logf("link down for %s; after it came back the proxy had the Service applied elsewhere meanwhile in %s, /readyz ready in %s",
		upAt.Sub(downAt).Round(time.Millisecond), caughtUp.Round(time.Millisecond), time.Since(upAt).Round(time.Millisecond))
	if caughtUp > 10*time.Second {
		t.Errorf("catch-up took %s after the link came back, want a few seconds", caughtUp.Round(time.Millisecond))
	}
	if out, err := cut.cli(t, "token", "create", "--service", "bookbuyer"); err != nil {
		t.Errorf("token create after the link is back: %v\n%s", err, out)
	}
}

// cutNetwork is two network namespaces joined by a veth link: host, where
// a replica runs, and the switch, where a forwarder relays the link's
// traffic to a Consul agent in the test's own namespace. Nothing touches
// the test machine's own namespace.
type cutNetwork struct {
	host, sw string
	ip       string // a random 127.x.y.z: the replica's ports, on both sides
	consul   string // the replica's CONSUL_HTTP_ADDR, across the link
}

func newCutNetwork(t *testing.T, consulAddr string) *cutNetwork {
	t.Helper()
	id := fmt.Sprintf("%d-%d", os.Getpid()%100000, rand.IntN(1000))
	a, b := 1+rand.IntN(250), 1+rand.IntN(250)
	nw := &cutNetwork{host: "osmcut-h" + id, sw: "osmcut-s" + id,
		ip:     fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250), 1+rand.IntN(250)),
		consul: fmt.Sprintf("10.%d.%d.1:8500", a, b)}
	for _, ns := range []string{nw.host, nw.sw} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	sh(t, "ip", "-n", nw.host, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", nw.sw)
	sh(t, "ip", "-n", nw.sw, "addr", "add", fmt.Sprintf("10.%d.%d.1/30", a, b), "dev", "eth0")
	sh(t, "ip", "-n", nw.host, "addr", "add", fmt.Sprintf("10.%d.%d.2/30", a, b), "dev", "eth0")
	sh(t, "ip", "-n", nw.sw, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", nw.host, "link", "set", "eth0", "up")
	forward(t, nw.sw, nw.consul, "", consulAddr)
	return nw
}

// expose picks a free port on nw.ip and forwards it from the test's
// namespace to the same address in the host namespace, where the replica
// listens: returns the address.
func (nw *cutNetwork) expose(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", nw.ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serveForward(t, ln, nw.host, addr)
	return addr
}

// link sets the host's side of the link "up" or "down".
func (nw *cutNetwork) link(t *testing.T, state string) {
	t.Helper()
	sh(t, "ip", "-n", nw.host, "link", "set", "eth0", state)
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s (this test needs root and iproute2's ip)", strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on an OS thread moved into network namespace ns (""
// is the test's own). The thread is discarded afterwards, never reused
// in another namespace; sockets fn makes stay in ns.
func inNetns(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		f, err := os.Open(filepath.Join("/var/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// forward listens on listenAddr in namespace listenNS and relays each
// connection to dialAddr in dialNS, until the test ends.
func forward(t *testing.T, listenNS, listenAddr, dialNS, dialAddr string) {
	t.Helper()
	var ln net.Listener
	if err := inNetns(listenNS, func() (err error) {
		ln, err = net.Listen("tcp", listenAddr)
		return err
	}); err != nil {
		t.Fatalf("forwarder on %s in %s: %v", listenAddr, listenNS, err)
	}
	serveForward(t, ln, dialNS, dialAddr)
}

func serveForward(t *testing.T, ln net.Listener, dialNS, dialAddr string) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			track(in)
			wg.Go(func() {
				var out net.Conn
				err := inNetns(dialNS, func() (err error) {
					out, err = net.DialTimeout("tcp", dialAddr, 5*time.Second)
					return err
				})
				if err != nil {
					in.Close()
					return
				}
				track(out)
				done := make(chan struct{})
				go func() {
					io.Copy(out, in)
					out.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				if _, err := io.Copy(in, out); err != nil && !errors.Is(err, net.ErrClosed) {
					in.Close()
				}
				in.(*net.TCPConn).CloseWrite()
				<-done
				in.Close()
				out.Close()
			})
		}
	})
}
