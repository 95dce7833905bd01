package xds

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
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a running xDS server over a real certificate manager, the
// bookstore specification and a catalog.
type env struct {
	addr  string
	certs *certificate.Manager
	cat   *catalog.Catalog
	spec  *spec.Spec
	srv   *Server
	cache *cache.Cache
}

func startEnv(t *testing.T) *env { t.Helper(); return startEnvGrace(t, 0) }

func startEnvGrace(t *testing.T, grace time.Duration) *env {
	t.Helper()
	return startEnvMetrics(t, grace, nil)
}

// startEnvMetrics is startEnvGrace with the server, the publisher and the
// cache instrumented into reg (when not nil).
func startEnvMetrics(t *testing.T, grace time.Duration, reg prometheus.Registerer) *env {
	t.Helper()
	return startEnvWith(t, envOptions{grace: grace, reg: reg})
}

// envOptions are startEnvWith's: grace and reg as startEnvMetrics's; log,
// when not nil, is the server's and the cache's logger; server is the
// server's options (its Watcher and Presence are the env's publisher and
// model).
type envOptions struct {
	grace  time.Duration
	reg    prometheus.Registerer
	log    *slog.Logger
	server Options
}

func startEnvWith(t testing.TB, o envOptions) *env {
	t.Helper()
	grace, reg := o.grace, o.reg
	log := o.log
	if log == nil {
		log = discard()
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := store.NewMemory()
	certs, err := certificate.New(ctx, discard(), st, certificate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spec.New(ctx, discard(), st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "bookstore", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := spec.Parse(b, "mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(ctx, docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	cat := catalog.New()
	for i, name := range []string{"bookbuyer", "bookthief", "bookstore-v1", "bookstore-v2", "bookwarehouse"} {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)})
		cat.SetEndpoints("test", mesh.MeshService{Namespace: "default", Name: name}, []mesh.Endpoint{{IP: ip, Port: 14001}})
	}
	c := cache.New(log)
	model := catalog.NewModel(cat, sp, certs.TrustDomain(), grace)
	pub := NewPublisher(PublisherOptions{Log: discard(), Cache: c, Views: model, Certs: certs})
	opts := o.server
	opts.Watcher, opts.Presence = pub, model
	srv := NewServer(log, c, certs, opts)
	if reg != nil {
		for _, err := range []error{c.Instrument(reg), pub.Instrument(reg), srv.Instrument(reg)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	tlsCfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: certs.ServingCertificate([]string{"localhost", "127.0.0.1"}),
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      certs.CertPool(),
	}
	ready := make(chan net.Addr, 1)
	done := make(chan struct{}, 5)
	go func() { model.Run(ctx); done <- struct{}{} }()
	go func() { certs.Run(ctx); done <- struct{}{} }()
	go func() { pub.Run(ctx); done <- struct{}{} }()
	go func() { srv.WatchRevocations(ctx, certs.Subscribe); done <- struct{}{} }()
	go func() {
		if err := srv.Serve(ctx, "127.0.0.1:0", tlsCfg, ready); err != nil {
			t.Error(err)
		}
		done <- struct{}{}
	}()
	addr := <-ready
	t.Cleanup(func() {
		cancel()
		for range 5 {
			<-done
		}
	})
	return &env{addr: addr.String(), certs: certs, cat: cat, spec: sp, srv: srv, cache: c}
}

// enroll issues a proxy certificate for svc from a locally generated key.
func (e *env) enroll(t testing.TB, svc string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "ignored"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	ms := mesh.MeshService{Namespace: "default", Name: svc}
	sa := mesh.ServiceAccount{Namespace: "default", Name: svc}
	if strings.HasPrefix(svc, "bookstore") {
		sa.Name = "bookstore"
	}
	certPEM, _, err := e.certs.IssueProxy(context.Background(), csr, ms, sa)
	if err != nil {
		t.Fatal(err)
	}
	return tlsPair(t, certPEM, key)
}

func tlsPair(t testing.TB, certPEM []byte, key *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	der, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func cnOf(t testing.TB, c tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// dial opens an ADS stream with client certificate cert.
func (e *env) dial(t *testing.T, cert tls.Certificate, roots *x509.CertPool) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	if roots == nil {
		roots = e.certs.CertPool()
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// tryStream opens an ADS stream with client certificate cert, asks for
// clusters as node cn and returns the error of the first answer (nil if
// one came).
func (e *env) tryStream(t *testing.T, cert tls.Certificate, cn string) error {
	t.Helper()
	_, err := e.tryStreamResuming(t, cert, cn, nil)
	return err
}

// tryStreamResuming is tryStream with the client's TLS sessions kept in
// sessions (nil: none); it also reports whether the handshake resumed one.
func (e *env) tryStreamResuming(t *testing.T, cert tls.Certificate, cn string, sessions tls.ClientSessionCache) (resumed bool, err error) {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13, ClientSessionCache: sessions})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if p, ok := peer.FromContext(s.Context()); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				resumed = ti.State.DidResume
			}
		}
	}()
	if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType}); err != nil {
		_, err = s.Recv() // the stream's status
		return false, err
	}
	_, err = s.Recv()
	return false, err
}

func envoyNode(id, addr string) *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{MetadataFlavor: "envoy", MetadataAddress: addr})
	return &corev3.Node{Id: id, Cluster: "test", Metadata: md}
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), text) {
		t.Fatalf("got %v; want %s containing %q", err, code, text)
	}
}

func TestProxyReceivesItsListenersAndClusters(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	s := e.dial(t, cert, nil)
	got := map[string][]string{}
	for _, typ := range []string{resource.ClusterType, resource.ListenerType} {
		if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	for len(got) < 2 {
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetResources() {
			if resp.GetTypeUrl() == resource.ListenerType {
				var l listenerv3.Listener
				if err := r.UnmarshalTo(&l); err != nil {
					t.Fatal(err)
				}
				got[resp.GetTypeUrl()] = append(got[resp.GetTypeUrl()], l.GetName())
				continue
			}
			got[resp.GetTypeUrl()] = append(got[resp.GetTypeUrl()], "x")
		}
		// ACK
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.ContainsFunc(got[resource.ListenerType], func(n string) bool { return strings.Contains(n, "default/bookstore|14001") }) {
		t.Errorf("bookbuyer listeners %v: want an outbound listener to bookstore", got[resource.ListenerType])
	}
	rec, err := e.certs.Proxy(context.Background(), cn)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != certificate.StateClaimed {
		t.Errorf("proxy state after connecting = %s, want claimed", rec.State)
	}
	proxies := e.srv.Proxies()
	if len(proxies) != 1 || proxies[0].CN != cn || proxies[0].Address != netip.MustParseAddr("10.0.0.10") {
		t.Errorf("connected proxies = %+v, want %s at 10.0.0.10", proxies, cn)
	}
	// Once claimed, the stream lets go of the record it was verified
	// with: 10,000 streams held 8% of the heap's objects in them.
	for _, st := range e.srv.table.live() {
		if st.rec.CN != "" {
			t.Errorf("stream of %s still holds its proxy record after the claim", st.cn)
		}
	}
}

func TestNodeIDMustMatchCertificate(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	other := e.enroll(t, "bookthief")
	t.Run("first request", func(t *testing.T) {
		s := e.dial(t, cert, nil)
		s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, other), "10.0.0.10"), TypeUrl: resource.ClusterType})
		_, err := s.Recv()
		wantCode(t, err, codes.PermissionDenied, "does not match the client certificate")
	})
	t.Run("a later request", func(t *testing.T) {
		s := e.dial(t, cert, nil)
		s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType})
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, other), "10.0.0.10"), TypeUrl: resource.ListenerType})
		for {
			_, err := s.Recv()
			if err != nil {
				wantCode(t, err, codes.PermissionDenied, "does not match")
				return
			}
		}
	})
}

func TestCertificateFromAnotherCAIsRefused(t *testing.T) {
	e := startEnv(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "11111111-2222-3333-4444-555555555555.bookbuyer.default"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	forged := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	e.wantHandshakeRefused(t, forged, tmpl.Subject.CommonName, "a self-signed client certificate")
}

// The server verifies client certificates itself (Identities.VerifyClient)
// and remembers those it issued: one that has expired since is still
// refused at the handshake.
func TestExpiredCertificateIsRefusedAtTheHandshake(t *testing.T) {
	e := startEnv(t)
	svc, _ := e.certs.Lifetimes()
	if err := e.certs.SetLifetimes(svc, time.Second); err != nil {
		t.Fatal(err)
	}
	cert := e.enroll(t, "bookbuyer")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the certificate to expire", func() bool { return time.Now().After(leaf.NotAfter) })
	e.wantHandshakeRefused(t, cert, leaf.Subject.CommonName, "an expired client certificate")
}

// wantHandshakeRefused checks that a stream with cert is refused at the
// TLS handshake: Unavailable (the client may see the server's alert or
// only the closed connection; a stream refused by the record check would
// end PermissionDenied), and no proxy registered.
func (e *env) wantHandshakeRefused(t *testing.T, cert tls.Certificate, cn, what string) {
	t.Helper()
	if err := e.tryStream(t, cert, cn); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream with %s: %v; want the TLS handshake refused (Unavailable)", what, err)
	}
	if len(e.srv.Proxies()) != 0 {
		t.Errorf("a proxy with %s was registered: %+v", what, e.srv.Proxies())
	}
}

func TestRevokedProxyIsDisconnectedAndRefused(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	s := e.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.certs.RevokeProxy(context.Background(), cn); err != nil {
		t.Fatal(err)
	}
	_, err := s.Recv()
	wantCode(t, err, codes.PermissionDenied, "revoked")
	if d := time.Since(start); d > time.Second {
		t.Errorf("revoked stream closed after %v, want within a second", d)
	}
	again := e.dial(t, cert, nil)
	again.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType})
	_, err = again.Recv()
	wantCode(t, err, codes.PermissionDenied, "revoked")
}

// A proxy that reconnects resumes its TLS session (the handshake sends
// and verifies no certificate), and is still the proxy of its certificate:
// the session carries it, the server checks it again (VerifyConnection
// runs for a resumed handshake too) and the stream's record check refuses
// a proxy revoked since.
func TestResumedSessionIsCheckedAsAFullOne(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := startEnvMetrics(t, 0, reg)
	handshakes := func(full, resumed int) {
		t.Helper()
		want := fmt.Sprintf(`# HELP osm_xds_tls_handshakes_total TLS handshakes on the xDS port whose client certificate was accepted, by whether they resumed a session.
# TYPE osm_xds_tls_handshakes_total counter
osm_xds_tls_handshakes_total{resumed="false"} %d
osm_xds_tls_handshakes_total{resumed="true"} %d
`, full, resumed)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "osm_xds_tls_handshakes_total"); err != nil {
			t.Error(err)
		}
	}
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	sessions := tls.NewLRUClientSessionCache(1)
	open := func() (bool, error) { return e.tryStreamResuming(t, cert, cn, sessions) }
	if resumed, err := open(); err != nil || resumed {
		t.Fatalf("first connection: resumed %t, %v; want a full handshake and an answer", resumed, err)
	}
	handshakes(1, 0)
	testwait.For(t, "the first stream to end", func() bool { return len(e.srv.Proxies()) == 0 })
	if resumed, err := open(); err != nil || !resumed {
		t.Fatalf("second connection: resumed %t, %v; want the session resumed and an answer", resumed, err)
	}
	handshakes(1, 1)
	testwait.For(t, "the second stream to end", func() bool { return len(e.srv.Proxies()) == 0 })
	if err := e.certs.RevokeProxy(context.Background(), cn); err != nil {
		t.Fatal(err)
	}
	resumed, err := open()
	if !resumed {
		t.Fatal("the connection after the revocation did not resume: the test checks nothing")
	}
	wantCode(t, err, codes.PermissionDenied, "revoked")
	handshakes(1, 2) // the handshake resumed; the stream refused the proxy
}

// TLS checks a client certificate's expiry only at the handshake: the
// server ends a stream when its certificate expires, naming the cause.
func TestStreamEndsWhenItsCertificateExpires(t *testing.T) {
	e := startEnv(t)
	svc, _ := e.certs.Lifetimes()
	if err := e.certs.SetLifetimes(svc, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	cert := e.enroll(t, "bookbuyer")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	s := e.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(leaf.Subject.CommonName, "10.0.0.10"), TypeUrl: resource.ClusterType})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err = s.Recv()
		if err != nil {
			break
		}
	}
	// The code and message name the expiry as the cause; how soon after it
	// the stream ended is not checked, as a loaded machine may be late.
	wantCode(t, err, codes.PermissionDenied, "proxy certificate expired")
	if late := time.Since(leaf.NotAfter); late < 0 {
		t.Errorf("stream ended %v before the certificate's expiry", -late)
	}
	testwait.For(t, "no proxy connected after the stream ended", func() bool { return len(e.srv.Proxies()) == 0 })
}

func TestBookthiefGetsNoRouteToBookstore(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookthief")
	cn := cnOf(t, cert)
	s := e.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.11"), TypeUrl: resource.ClusterType})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cfg, err := Debug{Server: e.srv, Cache: e.cache}.Config(cn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), "default/bookstore") {
		t.Errorf("bookthief's configuration mentions default/bookstore:\n%s", cfg)
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
func pemKey(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func newRequest(n *corev3.Node) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{Node: n, TypeUrl: resource.ClusterType}
}

// edsAddresses returns the addresses in the EDS resource name published for node.
func (e *env) edsAddresses(t *testing.T, nodeID, name string) []string {
	t.Helper()
	set := e.cache.View(nodeID)[resource.EndpointType]
	if set == nil || set.Get(name) == nil {
		return nil
	}
	cla := set.Get(name).Message().(*endpointv3.ClusterLoadAssignment)
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, ep := range l.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	return out
}

// dialCtx is dial with a caller-controlled stream context.
func (e *env) dialCtx(t *testing.T, ctx context.Context, cert tls.Certificate) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func TestDeltaStreamIsAuthenticatedToo(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	other := e.enroll(t, "bookthief")
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)

	ok, err := client.DeltaAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ok.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType})
	resp, err := ok.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) == 0 {
		t.Error("delta CDS response for bookbuyer has no clusters")
	}

	bad, err := client.DeltaAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	bad.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode(cnOf(t, other), "10.0.0.10"), TypeUrl: resource.ClusterType})
	_, err = bad.Recv()
	wantCode(t, err, codes.PermissionDenied, "does not match")
}

func TestServiceCertificateRotationReachesProxiesBySDS(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	s := e.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.SecretType})
	first, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// The publisher publishes secrets before listeners: wait for those.
	var listeners *cache.Set
	testwait.For(t, "listeners published for the proxy", func() bool {
		listeners = e.cache.View(cn)[resource.ListenerType]
		return listeners != nil
	})
	listenersBefore := listeners.Version()
	sa := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	if _, err := e.certs.RotateCertificate(t.Context(), sa); err != nil {
		t.Fatal(err)
	}
	s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()})
	second, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if second.GetVersionInfo() == first.GetVersionInfo() {
		t.Fatal("SDS version unchanged after the service certificate rotated")
	}
	if got := e.cache.View(cn)[resource.ListenerType].Version(); got != listenersBefore {
		t.Errorf("listeners changed on a certificate rotation (%s -> %s): rotation must not drain listeners", listenersBefore, got)
	}
}

func TestDebugProxies(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	s := e.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType})
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// NACK it: the debug view shows the error, and it is not resent.
	s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "", ResponseNonce: resp.GetNonce(), ErrorDetail: &rpcstatus.Status{Message: "bad cluster"}})
	testwait.For(t, "NACK recorded", func() bool {
		for _, p := range (Debug{Server: e.srv, Cache: e.cache}).Proxies() {
			for _, ts := range p.Types {
				if ts.NACK != nil && ts.NACK.Error == "bad cluster" {
					return true
				}
			}
		}
		return false
	})
	ps := Debug{Server: e.srv, Cache: e.cache}.Proxies()
	if len(ps) != 1 || ps[0].CN != cn || len(ps[0].Types) == 0 {
		t.Errorf("debug proxies = %+v", ps)
	}
}

func TestRevokedProxyDeltaStreamIsDisconnected(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&discovery.DeltaDiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.certs.RevokeProxy(context.Background(), cn); err != nil {
		t.Fatal(err)
	}
	_, err = s.Recv()
	wantCode(t, err, codes.PermissionDenied, "revoked")
	if d := time.Since(start); d > time.Second {
		t.Errorf("revoked delta stream closed after %v, want within a second", d)
	}
}

// TestStreamsEndWithRegisterContext: the ctx given to Register bounds every
// stream, even while the gRPC server keeps serving: live streams end and
// new ones are refused.
func TestStreamsEndWithRegisterContext(t *testing.T) {
	e := startEnv(t)
	srv := NewServer(discard(), cache.New(discard()), e.certs, Options{})
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: e.certs.ServingCertificate([]string{"localhost", "127.0.0.1"}),
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      e.certs.CertPool(),
	})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.Register(ctx, g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	other := &env{addr: ln.Addr().String(), certs: e.certs}

	cert := e.enroll(t, "bookbuyer")
	s := other.dial(t, cert, nil)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType})
	testwait.For(t, "the stream's proxy registered", func() bool { return len(srv.Proxies()) != 0 })
	cancel()
	// io.EOF is the server ending the stream; the client's own deadline
	// (dial's) would end it with DeadlineExceeded.
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("Recv after Register's ctx ended = %v; want io.EOF, the stream ended by the server", err)
	}
	again := other.dial(t, cert, nil)
	again.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType})
	_, err = again.Recv()
	wantCode(t, err, codes.Unavailable, "stopping")
}

// TestBadRequestsEndTheStream: a request the server cannot serve ends the
// stream at once with InvalidArgument naming what is wrong and the fix; a
// client never waits in silence.
func TestBadRequestsEndTheStream(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	meta := func(fields map[string]any) *corev3.Node {
		md, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return &corev3.Node{Id: cn, Metadata: md}
	}
	for _, tc := range []struct {
		name    string
		node    *corev3.Node
		typeURL string
		want    string
	}{
		{"no metadata", &corev3.Node{Id: cn}, resource.ClusterType, "osm.advertiseAddress is missing: set advertiseAddress in the osm-agent config"},
		{"gRPC without an address", meta(map[string]any{MetadataFlavor: "grpc"}), resource.ListenerType, "osm.advertiseAddress is missing"},
		{"empty address", meta(map[string]any{MetadataAddress: ""}), resource.ClusterType, "osm.advertiseAddress is missing"},
		{"address a number", meta(map[string]any{MetadataAddress: 10.5}), resource.ClusterType, "osm.advertiseAddress is a number, want an IP address as a string"},
		{"address a list", meta(map[string]any{MetadataAddress: []any{"10.0.0.10"}}), resource.ClusterType, "osm.advertiseAddress is a list"},
		{"address unspecified", meta(map[string]any{MetadataAddress: "0.0.0.0"}), resource.ClusterType, "not an address other machines can reach"},
		{"address with a zone", meta(map[string]any{MetadataAddress: "fe80::1%eth0"}), resource.ClusterType, "not an address other machines can reach"},
		{"flavor a bool", meta(map[string]any{MetadataFlavor: true, MetadataAddress: "10.0.0.10"}), resource.ClusterType, "osm.flavor is a bool, want the string envoy, grpc or gateway"},
		{"flavor unknown", meta(map[string]any{MetadataFlavor: "istio", MetadataAddress: "10.0.0.10"}), resource.ClusterType, `osm.flavor "istio": want envoy, grpc or gateway`},
		{"unknown type", envoyNode(cn, "10.0.0.10"), "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", "is not served"},
		{"no type", envoyNode(cn, "10.0.0.10"), "", "type_url is required"},
		{"SDS for gRPC", meta(map[string]any{MetadataFlavor: "grpc", MetadataAddress: "10.0.0.10"}), resource.SecretType, "served to Envoy proxies only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			s := e.dialCtx(t, ctx, cert)
			if err := s.Send(&discovery.DiscoveryRequest{Node: tc.node, TypeUrl: tc.typeURL}); err != nil {
				t.Fatal(err)
			}
			resp, err := s.Recv()
			if err == nil {
				t.Fatalf("got a %s response; want the stream ended with InvalidArgument containing %q", resp.GetTypeUrl(), tc.want)
			}
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	t.Run("a later request of an unknown type", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s := e.dialCtx(t, ctx, cert)
		s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType})
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		s.Send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/nonsense"})
		for {
			if _, err := s.Recv(); err != nil {
				wantCode(t, err, codes.InvalidArgument, "is not served")
				return
			}
		}
	})
	t.Run("delta", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
		conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: cn}, TypeUrl: resource.ClusterType})
		_, err = s.Recv()
		wantCode(t, err, codes.InvalidArgument, "osm.advertiseAddress is missing")
	})
}

// TestUnrenderableProxyIsTold: a proxy whose configuration cannot be
// rendered, and which has none yet, is told why at once (its stream ends
// with FailedPrecondition naming the cause) rather than left waiting.
func TestUnrenderableProxyIsTold(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "ghost") // no Service ghost in the specification
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	s := e.dialCtx(t, ctx, cert)
	s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.30"), TypeUrl: resource.ClusterType})
	_, err := s.Recv()
	wantCode(t, err, codes.FailedPrecondition, `no Service "ghost" in namespace "default"`)
}

// Load counts the connections accepted, those in their handshake (until it
// ends, or the connection closes in it) and the streams opened: what
// osm-server's collector follows in a reconnect storm.
func TestLoadCountsConnectionsAndHandshakes(t *testing.T) {
	e := startEnv(t)
	if got := e.srv.Load(); got != (Load{}) {
		t.Fatalf("Load before any connection = %+v, want zeros", got)
	}
	// A peer that connects and sends nothing is in its handshake...
	raw, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a silent connection counted as accepted and handshaking", func() bool {
		return e.srv.Load() == Load{Accepted: 1, Handshaking: 1}
	})
	// ...until it goes away.
	raw.Close()
	testwait.For(t, "the closed connection no longer handshaking", func() bool {
		return e.srv.Load() == Load{Accepted: 1}
	})
	// A proxy's connection handshakes, and its stream opens.
	cert := e.enroll(t, "bookbuyer")
	s := e.dial(t, cert, nil)
	if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if got, want := e.srv.Load(), (Load{Accepted: 2, Opened: 1}); got != want {
		t.Errorf("Load with one proxy connected = %+v, want %+v", got, want)
	}
}
