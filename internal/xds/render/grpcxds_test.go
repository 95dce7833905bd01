package render

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// testCA issues service certificates with SPIFFE URI SANs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "osm-vm test mesh CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns the PEM certificate and key of account's service certificate.
func (ca *testCA) issue(t *testing.T, account mesh.ServiceAccount) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := url.Parse(account.SPIFFEID(trustDomain))
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: account.Name + "." + account.Namespace},
		URIs:         []*url.URL{id},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// startTLSBackend serves the gRPC health service on 127.0.0.1 with the
// service certificate of account, requiring a client certificate from the
// mesh CA carrying wantPeer's SPIFFE ID. It returns the port.
func startTLSBackend(t *testing.T, ca *testCA, account, wantPeer mesh.ServiceAccount) uint16 {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, account)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	checkPeer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p, _ := peer.FromContext(ctx)
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(ti.State.PeerCertificates) == 0 || len(ti.State.PeerCertificates[0].URIs) == 0 ||
			ti.State.PeerCertificates[0].URIs[0].String() != wantPeer.SPIFFEID(trustDomain) {
			return nil, status.Errorf(codes.PermissionDenied, "peer is not %s", wantPeer.SPIFFEID(trustDomain))
		}
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(checkPeer))
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() {
		g.Stop()
		wg.Wait()
	})
	return uint16(lis.Addr().(*net.TCPAddr).Port)
}

// publish renders the gRPC-flavoured resources of p, validates them and
// publishes them for node.
func publish(t *testing.T, c *cache.Cache, node string, m Mesh, p Proxy) {
	t.Helper()
	r := renderAll(t, m, p)
	if err := Validate(p.Flavor, r.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for typ, ms := range map[string][]proto.Message{
		resource.ListenerType: r.Listeners, resource.RouteType: r.Routes,
		resource.ClusterType: r.Clusters, resource.EndpointType: r.Endpoints,
	} {
		var rs []*cache.Resource
		for _, msg := range ms {
			res, err := c.NewResource(resourceName(msg), msg)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, res)
		}
		set, err := cache.NewSet(rs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Publish(node, typ, set); err != nil {
			t.Fatal(err)
		}
	}
}

// resourceName is the xDS name of a rendered resource.
func resourceName(m proto.Message) string {
	if cla, ok := m.(interface{ GetClusterName() string }); ok {
		return cla.GetClusterName()
	}
	return m.(interface{ GetName() string }).GetName()
}

func routeStatus(c *cache.Cache, node string) cache.TypeStatus {
	for _, s := range c.Status(node) {
		if s.TypeURL == resource.RouteType {
			return s
		}
	}
	return cache.TypeStatus{}
}

// TestGRPCClientFollowsTrafficSplit serves the gRPC flavour of bookbuyer's
// resources through internal/xds/cache and go-control-plane's ADS server to
// gRPC-Go's own xDS resolver and xDS credentials. The client calls
// xds:///bookstore.default.mesh:14001 over mTLS (certificates from a
// file_watcher provider named "osm") to two backends standing for
// bookstore-v1 and bookstore-v2, and must follow the TrafficSplit's 80/20,
// then 20/80 after the split changes, on the same ADS stream.
func TestGRPCClientFollowsTrafficSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gRPC servers and an xDS client")
	}
	ca := newTestCA(t)
	buyer := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	store := mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}
	v1Port, v2Port := startTLSBackend(t, ca, store, buyer), startTLSBackend(t, ca, store, buyer)
	lo := netip.MustParseAddr("127.0.0.1")
	eps := map[mesh.MeshService][]mesh.Endpoint{
		svc("bookstore-v1"): {{IP: lo, Port: v1Port, Provider: "test"}},
		svc("bookstore-v2"): {{IP: lo, Port: v2Port, Provider: "test"}},
		svc("bookstore"):    {{IP: lo, Port: v1Port, Provider: "test"}, {IP: lo, Port: v2Port, Provider: "test"}},
	}
	sp := bookstoreSpec(t, false)

	// The certificate provider files the agent would write.
	dir := t.TempDir()
	certPEM, keyPEM := ca.issue(t, buyer)
	files := map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": ca.pem}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	c := cache.New(discard())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var streams atomic.Int32
	cb := server.CallbackFuncs{StreamOpenFunc: func(context.Context, int64, string) error {
		streams.Add(1)
		return nil
	}}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, c, cb))
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	defer func() {
		cancel()
		g.Stop()
		wg.Wait()
	}()

	const node = "bookbuyer"
	proxy := Proxy{Service: svc("bookbuyer"), Flavor: GRPC, Address: netip.MustParseAddr("127.0.10.1")}
	publish(t, c, node, meshOf(sp.Snapshot(), eps), proxy)

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q},
		"certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {
			"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "600s"}}},
		"server_listener_resource_name_template": %q
	}`, lis.Addr().String(), node, CertProviderInstance,
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem"), GRPCServerListenerTemplate)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
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

	// share returns the fraction of n RPCs that reached bookstore-v1.
	share := func(n int) float64 {
		t.Helper()
		v1 := 0
		for range n {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			var p peer.Peer
			_, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			rcancel()
			if err != nil {
				t.Fatalf("RPC through xds:///bookstore.default.mesh:14001: %v (NACKs: %+v)", err, c.NACKs())
			}
			if _, ok := p.AuthInfo.(credentials.TLSInfo); !ok {
				t.Fatalf("RPC used %T, want TLS from the xDS security config", p.AuthInfo)
			}
			switch port := uint16(p.Addr.(*net.TCPAddr).Port); port {
			case v1Port:
				v1++
			case v2Port:
			default:
				t.Fatalf("RPC reached port %d, want %d or %d", port, v1Port, v2Port)
			}
		}
		return float64(v1) / float64(n)
	}
	check := func(what string, got, want float64) {
		t.Helper()
		if got < want-0.05 || got > want+0.05 {
			t.Errorf("%s: bookstore-v1 got %.1f%% of 1000 RPCs, want %.0f%% ±5", what, 100*got, 100*want)
		} else {
			t.Logf("%s: bookstore-v1 got %.1f%% of 1000 RPCs", what, 100*got)
		}
	}
	check("80/20 split", share(1000), 0.8)

	before := routeStatus(c, node)
	applyYAML(t, sp, `apiVersion: split.smi-spec.io/v1alpha4
kind: TrafficSplit
metadata: {name: bookstore-split, namespace: default}
spec:
  service: bookstore
  backends: [{service: bookstore-v1, weight: 20}, {service: bookstore-v2, weight: 80}]
`)
	publish(t, c, node, meshOf(sp.Snapshot(), eps), proxy)
	// Polling the cache's status: no channel reports ACKs.
	testwait.Until(t, "the new routes ACKed", func() (bool, string) {
		s := routeStatus(c, node)
		if s.NACK != nil {
			t.Fatalf("gRPC NACKed the new routes: %+v", s.NACK)
		}
		return s.ACKed != "" && s.ACKed != before.ACKed && s.ACKed == s.Sent, fmt.Sprintf("%+v", s)
	})
	check("20/80 split", share(1000), 0.2)

	if n := streams.Load(); n != 1 {
		t.Errorf("ADS streams opened = %d, want 1 (the split changed without a reconnect)", n)
	}

	// An endpoint serving another account's certificate is refused: the
	// cluster's SAN matcher is enforced by gRPC's xDS credentials.
	impostor := startTLSBackend(t, ca, mesh.ServiceAccount{Namespace: "default", Name: "bookwarehouse"}, buyer)
	eps[svc("bookstore-v1")] = []mesh.Endpoint{{IP: lo, Port: impostor, Provider: "test"}}
	publish(t, c, node, meshOf(sp.Snapshot(), eps), proxy)
	conn2, err := grpc.NewClient("xds:///bookstore-v1.default.mesh:14001", grpc.WithTransportCredentials(creds), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_, err = healthpb.NewHealthClient(conn2).Check(rctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("RPC to a bookstore-v1 endpoint presenting bookwarehouse's certificate: %v, want Unavailable (SAN mismatch)", err)
	} else {
		t.Logf("impostor refused: %v", err)
	}

	if nacks := c.NACKs(); len(nacks) != 0 {
		t.Errorf("gRPC NACKed: %+v", nacks)
	}
}

// startADS serves c over go-control-plane's ADS server on 127.0.0.1 and
// returns its address.
func startADS(t *testing.T, c *cache.Cache) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, c, nil))
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	t.Cleanup(func() {
		cancel()
		g.Stop()
		wg.Wait()
	})
	return lis.Addr().String()
}

// writeCertFiles writes account's certificate, key and the CA into a new
// directory, as the agent does for the "osm" certificate provider.
func writeCertFiles(t *testing.T, ca *testCA, account mesh.ServiceAccount) (cert, key, caFile string) {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM := ca.issue(t, account)
	cert, key, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	for name, b := range map[string][]byte{cert: certPEM, key: keyPEM, caFile: ca.pem} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key, caFile
}

// mTLSClient dials addr presenting account's certificate and verifying
// the server's chain against the CA (service certificates carry only a
// SPIFFE URI, so there is no host name to verify). An empty account
// presents no certificate.
func mTLSClient(t *testing.T, ca *testCA, account mesh.ServiceAccount, addr string) healthpb.HealthClient {
	t.Helper()
	var certs []tls.Certificate
	if account.Name != "" {
		certPEM, keyPEM := ca.issue(t, account)
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, cert)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{
		Certificates:       certs,
		InsecureSkipVerify: true, // verified below against the mesh CA
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("no server certificate")
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		},
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestGRPCServerEnforcesRBAC serves the gRPC flavour's server listener to
// an xDS-enabled gRPC server (gRPC-Go's xds.NewGRPCServer with xDS server
// credentials): it must require client certificates from the mesh CA and
// allow exactly what the TrafficTarget allows.
func TestGRPCServerEnforcesRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an xDS-enabled gRPC server")
	}
	ca := newTestCA(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	sp, err := newSpecFromYAML(t, fmt.Sprintf(`apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore-v1}
spec: {serviceAccount: bookstore, ports: [{port: %d, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookbuyer}
spec: {ports: [{port: 14001}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookthief}
spec: {ports: [{port: 14001}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: health}
spec: {matches: [{name: check, pathRegex: "/grpc\\.health\\.v1\\.Health/Check", methods: [POST]}]}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: buyer-checks-store}
spec:
  destination: {kind: ServiceAccount, name: bookstore}
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  rules: [{kind: HTTPRouteGroup, name: health}]
`, port))
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(discard())
	ads := startADS(t, c)
	const node = "bookstore-v1"
	m := meshOf(sp.Snapshot(), nil)
	publish(t, c, node, m, Proxy{Service: svc("bookstore-v1"), Flavor: GRPC, Address: netip.MustParseAddr("127.0.0.1")})

	cert, key, caFile := writeCertFiles(t, ca, mesh.ServiceAccount{Namespace: "default", Name: "bookstore"})
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q},
		"certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {
			"certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "600s"}}},
		"server_listener_resource_name_template": %q
	}`, ads, node, CertProviderInstance, cert, key, caFile, GRPCServerListenerTemplate)
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContentsForTesting([]byte(bootstrap)))
	if err != nil {
		t.Fatal(err)
	}
	healthpb.RegisterHealthServer(gs, health.NewServer())
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	defer func() {
		gs.Stop()
		wg.Wait()
	}()

	addr := lis.Addr().String()
	call := func(account string, watch bool) error {
		hc := mTLSClient(t, ca, mesh.ServiceAccount{Namespace: "default", Name: account}, addr)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if account == "" {
			// The server is SERVING by now; without WaitForReady the
			// failed handshake ends the RPC instead of retrying.
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}
		if watch {
			st, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	for _, tc := range []struct {
		name    string
		account string
		watch   bool
		want    codes.Code
	}{
		{"allowed source and path", "bookbuyer", false, codes.OK},
		{"source without a TrafficTarget", "bookthief", false, codes.PermissionDenied},
		{"allowed source, path not in the route group", "bookbuyer", true, codes.PermissionDenied},
		{"no client certificate", "", false, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(call(tc.account, tc.watch)); got != tc.want {
				t.Errorf("RPC as %s: code %v, want %v", tc.account, got, tc.want)
			}
		})
	}
	if nacks := c.NACKs(); len(nacks) != 0 {
		t.Errorf("gRPC server NACKed: %+v", nacks)
	}
}
