package xds

import (
	"context"
	"slices"

	"crypto/tls"
	"crypto/x509"
	"fmt"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/refusals"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

func applyYAML(t *testing.T, sp *spec.Spec, y string) {
	t.Helper()
	docs, err := spec.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(t.Context(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startBackend serves gRPC health over TLS with sa's service certificate
// from the mesh CA, requiring a mesh client certificate; it returns the port.
func (e *env) startBackend(t *testing.T, sa mesh.ServiceAccount) uint16 {
	t.Helper()
	c, err := e.certs.ServiceCertificate(t.Context(), sa)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := c.TLS()
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: e.certs.CertPool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() {
		g.Stop()
		wg.Wait()
	})
	return uint16(lis.Addr().(*net.TCPAddr).Port)
}

// setLoopbackEndpoints makes the catalog's endpoints of default/name the
// given ports on 127.0.0.1 (none: no endpoints).
func (e *env) setLoopbackEndpoints(name string, ports ...uint16) {
	var eps []mesh.Endpoint
	for _, p := range ports {
		eps = append(eps, mesh.Endpoint{IP: netip.MustParseAddr("127.0.0.1"), Port: p})
	}
	e.cat.SetEndpoints("test", mesh.MeshService{Namespace: "default", Name: name}, eps)
}

// checkPeer makes one health call (waiting for the channel to be ready,
// at most 10s) and returns the port of the backend that answered and its
// peer.
func checkPeer(t *testing.T, hc healthpb.HealthClient) (uint16, peer.Peer, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
		return 0, p, err
	}
	return uint16(p.Addr.(*net.TCPAddr).Port), p, nil
}

// grpcBootstrap writes what the agent writes for a proxyless gRPC app of
// svc: the proxy certificate for the xDS channel and the service
// certificate for the file_watcher provider. It returns the bootstrap.
func (e *env) grpcBootstrap(t *testing.T, svc string, address string) []byte {
	t.Helper()
	dir := t.TempDir()
	proxy := e.enroll(t, svc)
	cn := cnOf(t, proxy)
	sa := mesh.ServiceAccount{Namespace: "default", Name: svc}
	sc, err := e.certs.ServiceCertificate(t.Context(), sa)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(proxy.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"proxy.crt": pemCert(proxy.Certificate[0]), "proxy.key": pemKey(keyDER), "ca.crt": e.certs.RootPEM(),
		"service.crt": sc.GetCertificateChain(), "service.key": sc.GetPrivateKey(), "service-ca.crt": sc.GetIssuingCA(),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	return fmt.Appendf(nil, `{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q}}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "cluster": %q, "metadata": {%q: "grpc", %q: %q}},
		"certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {
			"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "600s"}}},
		"server_listener_resource_name_template": %q
	}`, e.addr, p("ca.crt"), p("proxy.crt"), p("proxy.key"), cn, svc, MetadataFlavor, MetadataAddress, address,
		render.CertProviderInstance, p("service.crt"), p("service.key"), p("service-ca.crt"), render.GRPCServerListenerTemplate)
}

// TestGRPCClientThroughServer: gRPC-Go's xDS resolver, as a bookbuyer app
// with the agent's files, calls bookstore through our mTLS xDS server; the
// 80/20 split holds, and a split change and an endpoint removal take effect
// within a second on the same stream.
func TestGRPCClientThroughServer(t *testing.T) {
	e := startEnv(t)
	applyYAML(t, e.spec, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n")
	storeSA := mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}
	v1, v2, v2b := e.startBackend(t, storeSA), e.startBackend(t, storeSA), e.startBackend(t, storeSA)
	setEndpoints := e.setLoopbackEndpoints
	setEndpoints("bookstore-v1", v1)
	setEndpoints("bookstore-v2", v2, v2b)
	setEndpoints("bookstore", v1, v2, v2b)

	rb, err := xds.NewXDSResolverWithConfigForTesting(e.grpcBootstrap(t, "bookbuyer", "127.0.0.1"))
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
	hc := healthpb.NewHealthClient(conn)
	// share returns the fraction of n RPCs that reached v1, and whether v2b was reached.
	share := func(n int) (float64, bool) {
		t.Helper()
		got := map[uint16]int{}
		for range n {
			port, p, err := checkPeer(t, hc)
			if err != nil {
				var cfg []byte
				if ps := e.srv.Proxies(); len(ps) > 0 {
					cfg, _ = Debug{Server: e.srv, Cache: e.cache}.Config(ps[0].NodeID)
				}
				t.Fatalf("RPC via xds:///bookstore.default.mesh:14001: %v (NACKs %+v)\nconfig: %s", err, e.cache.NACKs(), cfg)
			}
			if _, ok := p.AuthInfo.(credentials.TLSInfo); !ok {
				t.Fatalf("RPC used %T, want mTLS from the xDS security config", p.AuthInfo)
			}
			got[port]++
		}
		return float64(got[v1]) / float64(n), got[v2b] > 0
	}
	within := func(what string, got, want float64) {
		t.Helper()
		if got < want-0.05 || got > want+0.05 {
			t.Errorf("%s: bookstore-v1 got %.1f%%, want %.0f%% ±5", what, 100*got, 100*want)
		}
	}
	f, _ := share(1000)
	within("80/20", f, 0.8)

	applyYAML(t, e.spec, "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  backends: [{service: bookstore-v1, weight: 20}, {service: bookstore-v2, weight: 80}]\n")
	testwait.For(t, "the 20/80 split taking effect", func() bool { f, _ := share(100); return f < 0.5 })
	f, _ = share(1000)
	within("20/80", f, 0.2)

	setEndpoints("bookstore-v2", v2)
	testwait.For(t, "removing one of bookstore-v2's endpoints taking effect", func() bool { _, hitV2b := share(50); return !hitV2b })
	if _, hitV2b := share(200); hitV2b {
		t.Error("the removed bookstore-v2 endpoint still gets RPCs")
	}

	ps := e.srv.Proxies()
	if len(ps) != 1 || ps[0].Flavor != render.GRPC || ps[0].Streams != 1 {
		t.Errorf("connected proxies %+v: want one gRPC proxy on one stream (no reconnect)", ps)
	}
	if n := e.cache.NACKs(); len(n) != 0 {
		t.Errorf("gRPC NACKed: %+v", n)
	}
}

// TestParticipantsNeedAConnectedProxy: by default an endpoint is sent to
// others only while a proxy of its service is connected from its address.
func TestParticipantsNeedAConnectedProxy(t *testing.T) {
	e := startEnv(t)
	buyer := e.enroll(t, "bookbuyer")
	s := e.dial(t, buyer, nil)
	eds := func() []string { return e.edsAddresses(t, cnOf(t, buyer), "default/bookstore-v1") }
	s.Send(newRequest(envoyNode(cnOf(t, buyer), "10.0.0.10")))
	testwait.For(t, "bookbuyer configured", func() bool { return e.cache.View(cnOf(t, buyer)) != nil })
	if got := eds(); len(got) != 0 {
		t.Fatalf("bookstore-v1 endpoints sent before its proxy connected: %v", got)
	}
	v1 := e.enroll(t, "bookstore-v1")
	ctx, cancel := context.WithCancel(t.Context())
	vs := e.dialCtx(t, ctx, v1)
	vs.Send(newRequest(envoyNode(cnOf(t, v1), "10.0.0.12")))
	testwait.For(t, "bookstore-v1's endpoint sent once its proxy connected", func() bool { got := eds(); return len(got) == 1 && got[0] == "10.0.0.12:14001" })
	cancel()
	testwait.For(t, "bookstore-v1's endpoint withdrawn when its proxy left", func() bool { return len(eds()) == 0 })
}

// TestStartupGrace: right after a server (re)start, endpoints are sent
// before their proxies reconnect, so a caller that reconnects first keeps
// its upstreams; when the grace period ends the rule applies again.
func TestStartupGrace(t *testing.T) {
	e := startEnvGrace(t, 2*time.Second)
	buyer := e.enroll(t, "bookbuyer")
	s := e.dial(t, buyer, nil)
	eds := func() []string { return e.edsAddresses(t, cnOf(t, buyer), "default/bookstore-v1") }
	s.Send(newRequest(envoyNode(cnOf(t, buyer), "10.0.0.10")))
	testwait.For(t, "bookstore-v1's endpoint sent during the grace period", func() bool { got := eds(); return len(got) == 1 && got[0] == "10.0.0.12:14001" })
	testwait.For(t, "bookstore-v1's endpoint withdrawn after the grace period (its proxy never connected)", func() bool { return len(eds()) == 0 })
}

// dialXDS dials target through gRPC-Go's xDS resolver with rb and the
// xDS client credentials, as a proxyless app does.
func dialXDS(t *testing.T, rb resolver.Builder, target string) *grpc.ClientConn {
	t.Helper()
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// timedCheck runs one health RPC on conn, bounded by timeout, and returns
// its error and how long it took. Not WaitForReady: an RPC that meets a
// cluster just removed (the publisher sends clusters before listeners)
// would wait for it for ever.
func timedCheck(t *testing.T, conn *grpc.ClientConn, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err, time.Since(start)
}

// refusedWithin is the bound a refused first RPC must fail within: far
// from gRPC's 15 s does-not-exist timer (it takes tens of milliseconds).
const refusedWithin = 5 * time.Second

// maxRefusals is how many refusal listeners a node is given at most.
const maxRefusals = refusals.MaxRefusals

// TestDeniedGRPCCallerIsRefusedAtOnce: bookthief, a proxyless gRPC app
// with the agent's files, dials bookstore, which no TrafficTarget lets it
// call. Its first RPC fails at once with PermissionDenied (before, it
// failed with Unavailable at gRPC-Go's 15 s does-not-exist timer: gRPC-Go
// takes a never-received listener missing from an answer as "not yet
// known"). When a TrafficTarget allows the call the same channel's RPCs
// reach bookstore, and when it is deleted they are refused again. A name
// that is no service fails at once with NotFound.
func TestDeniedGRPCCallerIsRefusedAtOnce(t *testing.T) {
	e := startEnv(t)
	applyYAML(t, e.spec, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n")
	port := e.startBackend(t, mesh.ServiceAccount{Namespace: "default", Name: "bookstore"})
	for _, name := range []string{"bookstore", "bookstore-v1", "bookstore-v2"} {
		e.cat.SetEndpoints("test", mesh.MeshService{Namespace: "default", Name: name}, []mesh.Endpoint{{IP: netip.MustParseAddr("127.0.0.1"), Port: port}})
	}
	rb, err := xds.NewXDSResolverWithConfigForTesting(e.grpcBootstrap(t, "bookthief", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	conn := dialXDS(t, rb, "xds:///bookstore.default.mesh:14001")
	err, took := timedCheck(t, conn, 20*time.Second)
	t.Logf("bookthief -> bookstore, first RPC: %v after %v", err, took)
	if status.Code(err) != codes.PermissionDenied || took > refusedWithin {
		t.Fatalf("bookthief -> bookstore: %v after %v; want PermissionDenied within %v", err, took, refusedWithin)
	}
	err, took = timedCheck(t, conn, 20*time.Second)
	if status.Code(err) != codes.PermissionDenied || took > refusedWithin {
		t.Errorf("bookthief -> bookstore, second RPC: %v after %v; want PermissionDenied within %v, as the first", err, took, refusedWithin)
	}

	typo := dialXDS(t, rb, "xds:///bookstor.default.mesh:14001")
	err, took = timedCheck(t, typo, 20*time.Second)
	t.Logf("bookthief -> bookstor (no such service), first RPC: %v after %v", err, took)
	if status.Code(err) != codes.NotFound || took > refusedWithin {
		t.Errorf("bookthief -> bookstor: %v after %v; want NotFound within %v", err, took, refusedWithin)
	}

	allow := "apiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: bookthief-allowed, namespace: default}\n" +
		"spec:\n  destination: {kind: ServiceAccount, name: bookstore, namespace: default}\n" +
		"  rules: [{kind: HTTPRouteGroup, name: bookstore-service-routes, matches: [books]}]\n" +
		"  sources: [{kind: ServiceAccount, name: bookthief, namespace: default}]\n"
	applyYAML(t, e.spec, allow)
	testwait.For(t, "bookthief's RPCs to reach bookstore once a TrafficTarget allows them", func() bool {
		err, _ := timedCheck(t, conn, time.Second)
		return err == nil
	})
	if _, err := e.spec.Delete(t.Context(), []spec.Key{{Kind: "TrafficTarget", Namespace: "default", Name: "bookthief-allowed"}}, false); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "bookthief's RPCs to be refused again once the TrafficTarget is deleted", func() bool {
		err, _ := timedCheck(t, conn, time.Second)
		return status.Code(err) == codes.PermissionDenied
	})
	if n := e.cache.NACKs(); len(n) != 0 {
		t.Errorf("gRPC NACKed: %+v", n)
	}
}

func grpcNode(id, addr string) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{MetadataFlavor: "grpc", MetadataAddress: addr})
	return &corev3.Node{Id: id, Cluster: "test", Metadata: md}
}

// TestDeltaGRPCSubscriberIsAnswered: a Delta subscriber (gRPC flavour) to
// a listener it may not have is given the refusal listener, and to a name
// the server has no listener for (a server listener on an address the
// service does not run on) is told at once, in removed_resources.
func TestDeltaGRPCSubscriberIsAnswered(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookthief")
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ds, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const denied = "bookstore.default.mesh:14001"
	server := render.GRPCServerListenerName(netip.MustParseAddrPort("10.0.0.99:1"))
	if err := ds.Send(&discovery.DeltaDiscoveryRequest{Node: grpcNode(cnOf(t, cert), "10.0.0.11"), TypeUrl: resource.ListenerType, ResourceNamesSubscribe: []string{denied, server}}); err != nil {
		t.Fatal(err)
	}
	var refusal *listenerv3.Listener
	removed := false
	for refusal == nil || !removed {
		r, err := ds.Recv()
		if err != nil {
			t.Fatalf("waiting for the refusal of %s (got %v) and the removal of %s (got %v): %v", denied, refusal != nil, server, removed, err)
		}
		for _, res := range r.GetResources() {
			if res.GetName() == denied {
				refusal = &listenerv3.Listener{}
				if err := res.GetResource().UnmarshalTo(refusal); err != nil {
					t.Fatal(err)
				}
			}
		}
		removed = removed || slices.Contains(r.GetRemovedResources(), server)
		if err := ds.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := refusal.GetApiListener().GetApiListener().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	if got := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != render.RefusalClusterName {
		t.Errorf("%s routes to %q, want the refusal cluster %q", denied, got, render.RefusalClusterName)
	}
}

// TestRefusalsAreBounded: a gRPC client asking for 10,000 names that are
// no service is given refusal listeners for the first maxRefusals only,
// and the server marshals about that many resources, not 10,000; when the
// stream ends they go.
func TestRefusalsAreBounded(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookthief")
	ctx, cancel := context.WithCancel(t.Context())
	s := e.dialCtx(t, ctx, cert)
	nodeID := cnOf(t, cert) + "~grpc"
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("bogus-%05d.default.mesh:14001", i)
	}
	before := e.cache.Stats().Marshals
	if err := s.Send(&discovery.DiscoveryRequest{Node: grpcNode(cnOf(t, cert), "10.0.0.11"), TypeUrl: resource.ListenerType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	refusals := func() int {
		set := e.cache.View(nodeID)[resource.ListenerType]
		n := 0
		for _, name := range names {
			if set != nil && set.Get(name) != nil {
				n++
			}
		}
		return n
	}
	testwait.For(t, "refusal listeners published", func() bool { return refusals() == maxRefusals })
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType, ResourceNames: names, ResponseNonce: r.GetNonce(), VersionInfo: r.GetVersionInfo()}); err != nil {
		t.Fatal(err)
	}
	marshals := e.cache.Stats().Marshals - before
	t.Logf("10,000 bogus names: %d refusal listeners, %d resources marshalled", refusals(), marshals)
	if marshals > maxRefusals+50 {
		t.Errorf("%d resources marshalled for a client asking for 10,000 bogus names; want at most about %d", marshals, maxRefusals)
	}
	if got := set(names[maxRefusals-1:maxRefusals+1], e.cache.View(nodeID)[resource.ListenerType]); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("refused %v of %v; want the first %d names by order", got, names[maxRefusals-1:maxRefusals+1], maxRefusals)
	}
	cancel()
	testwait.For(t, "the node forgotten when its stream ended", func() bool { return e.cache.View(nodeID) == nil })
}

func set(names []string, s interface{ Get(string) *cache.Resource }) []bool {
	out := make([]bool, len(names))
	for i, n := range names {
		out[i] = s.Get(n) != nil
	}
	return out
}

// TestGRPCClientReachesTheBackendsOfAnEmptySplitRoot: the case. The
// machines enrolled as bookstore-v1 and bookstore-v2, so the root bookstore
// has no endpoints, and the TrafficSplit is limited to GET paths, which no
// gRPC call matches. gRPC-Go's xDS client, calling the root, reaches the
// backends 80/20 with no failed call; when bookstore-v2 loses its last
// endpoint every call goes to bookstore-v1; when the root gets an endpoint
// of its own, the calls the split does not match go to it. No NACK, one
// stream.
func TestGRPCClientReachesTheBackendsOfAnEmptySplitRoot(t *testing.T) {
	e := startEnv(t)
	applyYAML(t, e.spec, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n")
	applyYAML(t, e.spec, "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  matches: [{kind: HTTPRouteGroup, name: bookstore-service-routes}]\n  backends: [{service: bookstore-v1, weight: 80}, {service: bookstore-v2, weight: 20}]\n")
	storeSA := mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}
	v1, v2, root := e.startBackend(t, storeSA), e.startBackend(t, storeSA), e.startBackend(t, storeSA)
	setEndpoints := e.setLoopbackEndpoints
	setEndpoints("bookstore-v1", v1)
	setEndpoints("bookstore-v2", v2)

	rb, err := xds.NewXDSResolverWithConfigForTesting(e.grpcBootstrap(t, "bookbuyer", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	conn := dialXDS(t, rb, "xds:///bookstore.default.mesh:14001")
	hc := healthpb.NewHealthClient(conn)
	// tryCalls makes n calls and counts them by the backend that answered
	// (port 0: the call failed). A call fails at once rather than wait
	// for a ready backend: one that picked a cluster the switch just
	// emptied would otherwise wait out checkPeer's 10 s for nothing.
	tryCalls := func(n int) map[uint16]int {
		t.Helper()
		got := map[uint16]int{}
		for range n {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			var p peer.Peer
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
			cancel()
			var port uint16
			if err == nil {
				port = uint16(p.Addr.(*net.TCPAddr).Port)
			}
			got[port]++
		}
		return got
	}
	// calls makes n calls (each waiting for a ready backend) and counts
	// them by the backend that answered; every call must succeed.
	calls := func(n int) map[uint16]int {
		t.Helper()
		got := map[uint16]int{}
		for range n {
			port, _, err := checkPeer(t, hc)
			if err != nil {
				t.Fatalf("an RPC via xds:///bookstore.default.mesh:14001 failed: %v (NACKs %+v)", err, e.cache.NACKs())
			}
			got[port]++
		}
		return got
	}
	got := calls(1000)
	if f := float64(got[v1]) / 1000; f < 0.75 || f > 0.85 || got[v1]+got[v2] != 1000 {
		t.Errorf("1,000 calls to the empty root: %d on bookstore-v1, %d on bookstore-v2, %d elsewhere; want 80%% ±5 on v1, the rest on v2", got[v1], got[v2], 1000-got[v1]-got[v2])
	}

	// While the route changes, a call may meet a cluster the route still
	// names but CDS no longer has (clusters are sent first), or, in
	// gRPC-Go, a cluster the route names before its balancer knows it
	// ("unknown cluster selected for RPC"): tolerated during the switch,
	// not after.
	setEndpoints("bookstore-v2")
	testwait.For(t, "bookstore-v2 losing its last endpoint taking effect", func() bool { return tryCalls(20)[v1] == 20 })
	if got := calls(200); got[v1] != 200 {
		t.Errorf("after bookstore-v2 lost its last endpoint: %v, want every call on bookstore-v1 (port %d)", got, v1)
	}

	setEndpoints("bookstore", root)
	testwait.For(t, "the root getting an endpoint of its own taking effect", func() bool { return tryCalls(20)[root] == 20 })
	if got := calls(200); got[root] != 200 {
		t.Errorf("after the root got an endpoint: %v, want every call (none matches the split) on it (port %d)", got, root)
	}

	ps := e.srv.Proxies()
	if len(ps) != 1 || ps[0].Streams != 1 {
		t.Errorf("connected proxies %+v: want one gRPC proxy on one stream (no reconnect)", ps)
	}
	if n := e.cache.NACKs(); len(n) != 0 {
		t.Errorf("gRPC NACKed: %+v", n)
	}
}
