package localxds_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/agent/localxds"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// creds holds the proxy certificate the endpoint presents upstream; a test
// swaps it as a renewal would.
type creds struct {
	mu   sync.Mutex
	cert tls.Certificate
	pool *x509.CertPool
}

func (c *creds) set(t *testing.T, ca *agenttest.CA, cn string) {
	certPEM, keyPEM := ca.KeyPair(t, cn, time.Hour)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cert, c.pool = pair, ca.Pool()
}

func (c *creds) get() (tls.Certificate, *x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert, c.pool, nil
}

func start(t *testing.T, c *creds, upstreams ...string) *localxds.Proxy {
	t.Helper()
	return startObserved(t, c, nil, upstreams...)
}

// startObserved is start with an Observer (nil: none).
func startObserved(t *testing.T, c *creds, o localxds.Observer, upstreams ...string) *localxds.Proxy {
	t.Helper()
	return startWith(t, c, localxds.Options{Observer: o}, upstreams...)
}

// startWith is start with the Observer and MaxStreams of o.
func startWith(t *testing.T, c *creds, o localxds.Options, upstreams ...string) *localxds.Proxy {
	t.Helper()
	log, _ := agenttest.NewLogger()
	p, err := localxds.Listen(log, localxds.Options{
		TCPAddress:   "127.0.0.1:0",
		SocketPath:   filepath.Join(t.TempDir(), "xds.sock"),
		Upstreams:    upstreams,
		Credentials:  c.get,
		VerifyServer: meshclient.VerifyControlPlane,
		Metadata: func() map[string]any {
			return map[string]any{"osm.flavor": "grpc", "osm.advertiseAddress": "10.0.0.7"}
		},
		Observer:   o.Observer,
		MaxStreams: o.MaxStreams,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p
}

func dialLocal(t *testing.T, target string) discoveryv3.AggregatedDiscoveryServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
}

// appNode is what a local application's bootstrap might claim: another
// identity and flavour than the agent's.
func appNode() *corev3.Node {
	md, _ := structpb.NewStruct(map[string]any{"osm.flavor": "envoy", "app": "bookbuyer"})
	return &corev3.Node{Id: "someone-else", Locality: &corev3.Locality{Zone: "z1"}, Metadata: md}
}

// sotw opens a SotW stream, asks for listeners and ACKs the answer.
func sotw(t *testing.T, ctx context.Context, c discoveryv3.AggregatedDiscoveryServiceClient) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	s, err := c.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{Node: appNode(), TypeUrl: agenttest.ListenerType}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("SotW response through the local endpoint: %v", err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: agenttest.ListenerType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return s
}

// delta opens a Delta stream, subscribes to a listener and ACKs the answer.
func delta(t *testing.T, ctx context.Context, c discoveryv3.AggregatedDiscoveryServiceClient) discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient {
	t.Helper()
	s, err := c.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: appNode(), TypeUrl: agenttest.ListenerType, ResourceNamesSubscribe: []string{"fake"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("Delta response through the local endpoint: %v", err)
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: agenttest.ListenerType, ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	return s
}

func nextAck(t *testing.T, servers ...*agenttest.ADSServer) agenttest.Ack {
	t.Helper()
	cases := make(chan agenttest.Ack, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		go func() {
			select {
			case a := <-s.Acks:
				cases <- a
			case <-ctx.Done():
			}
		}()
	}
	select {
	case a := <-cases:
		return a
	case <-ctx.Done():
		t.Fatal("no ACK reached an upstream ADS server within 10s")
		return agenttest.Ack{}
	}
}

func checkIdentity(t *testing.T, a agenttest.Ack, cn string) {
	t.Helper()
	if a.NodeID != cn || a.PeerCN != cn {
		t.Errorf("upstream saw node.id %q over a certificate of %q, want both %q", a.NodeID, a.PeerCN, cn)
	}
	md := a.Node.GetMetadata().GetFields()
	if got := md["osm.flavor"].GetStringValue(); got != "grpc" {
		t.Errorf("osm.flavor = %q, want the agent's grpc over the application's envoy", got)
	}
	if got := md["osm.advertiseAddress"].GetStringValue(); got != "10.0.0.7" {
		t.Errorf("osm.advertiseAddress = %q, want the agent's 10.0.0.7", got)
	}
	if got := md["app"].GetStringValue(); got != "bookbuyer" {
		t.Errorf("the application's own metadata app = %q, want it passed through", got)
	}
	if got := a.Node.GetLocality().GetZone(); got != "z1" {
		t.Errorf("locality zone = %q, want the application's z1", got)
	}
}

func TestSotWAndDeltaCarryTheAgentsIdentity(t *testing.T) {
	ca := agenttest.NewCA(t)
	ads := agenttest.StartADS(t, ca)
	var c creds
	c.set(t, ca, "m1.bookbuyer.default")
	p := start(t, &c, ads.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Each local stream has its own upstream connection; every one after
	// the first resumes the TLS session of the certificate in use.
	resumed := func(t *testing.T, a agenttest.Ack, want bool) {
		t.Helper()
		if a.Resumed != want {
			t.Errorf("upstream connection resumed a TLS session: %t, want %t", a.Resumed, want)
		}
	}
	t.Run("SotW over loopback TCP", func(t *testing.T) {
		sotw(t, ctx, dialLocal(t, p.TCPAddr()))
		a := nextAck(t, ads)
		checkIdentity(t, a, "m1.bookbuyer.default")
		resumed(t, a, false)
	})
	t.Run("Delta over the Unix socket", func(t *testing.T) {
		delta(t, ctx, dialLocal(t, "unix:"+p.SocketPath()))
		a := nextAck(t, ads)
		checkIdentity(t, a, "m1.bookbuyer.default")
		resumed(t, a, true)
	})
	t.Run("a renewed certificate is used from the next stream on", func(t *testing.T) {
		c.set(t, ca, "m1.bookbuyer.default.renewed")
		sotw(t, ctx, dialLocal(t, p.TCPAddr()))
		a := nextAck(t, ads)
		if a.PeerCN != "m1.bookbuyer.default.renewed" || a.NodeID != a.PeerCN {
			t.Errorf("after renewal upstream saw node.id %q over %q, want the renewed certificate's CN for both", a.NodeID, a.PeerCN)
		}
		resumed(t, a, false) // a session of the old certificate would carry the old identity
		sotw(t, ctx, dialLocal(t, p.TCPAddr()))
		a = nextAck(t, ads)
		if a.PeerCN != "m1.bookbuyer.default.renewed" {
			t.Errorf("the renewed certificate's second stream went upstream as %q", a.PeerCN)
		}
		resumed(t, a, true)
	})
}

func TestFailsOverWhenTheUpstreamDies(t *testing.T) {
	ca := agenttest.NewCA(t)
	first, second := agenttest.StartADS(t, ca), agenttest.StartADS(t, ca)
	var c creds
	c.set(t, ca, "m1.bookbuyer.default")
	p := start(t, &c, first.Addr, second.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local := dialLocal(t, p.TCPAddr())

	s := sotw(t, ctx, local)
	if a := nextAck(t, first, second); a.Server != first.Addr {
		t.Fatalf("first stream went to %s, want the first upstream %s", a.Server, first.Addr)
	}
	first.Stop()
	// The application's stream stays up: the endpoint carries it to the
	// surviving upstream and asks it again for the listeners.
	resp, err := s.Recv()
	if err != nil {
		t.Fatalf("local SotW stream after its upstream died: %v, want it carried to the surviving upstream", err)
	}
	if err := s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: agenttest.ListenerType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	a := nextAck(t, first, second)
	if a.Server != second.Addr {
		t.Fatalf("carried stream went to %s, want the surviving upstream %s", a.Server, second.Addr)
	}
	checkIdentity(t, a, "m1.bookbuyer.default")

	t.Run("a Delta stream ends, and its reconnect reaches a survivor", func(t *testing.T) {
		third := agenttest.StartADS(t, ca)
		p.SetUpstreams([]string{second.Addr, third.Addr})
		d := delta(t, ctx, local)
		if a := nextAck(t, second, third); a.Server != second.Addr {
			t.Fatalf("Delta stream went to %s, want %s", a.Server, second.Addr)
		}
		second.Stop()
		if _, err := d.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("local Delta stream after its upstream died: %v, want Unavailable (gRPC clients reconnect on it)", err)
		}
		delta(t, ctx, local)
		if a := nextAck(t, third); a.Server != third.Addr {
			t.Fatalf("reconnected Delta stream went to %s, want %s", a.Server, third.Addr)
		}
	})

	t.Run("SetUpstreams replaces the list", func(t *testing.T) {
		fourth := agenttest.StartADS(t, ca)
		p.SetUpstreams([]string{fourth.Addr})
		sotw(t, ctx, local)
		if a := nextAck(t, fourth); a.Server != fourth.Addr {
			t.Fatalf("stream went to %s, want the new upstream %s", a.Server, fourth.Addr)
		}
	})
}

func TestListenRefusesANonLoopbackAddress(t *testing.T) {
	var c creds
	log, _ := agenttest.NewLogger()
	_, err := localxds.Listen(log, localxds.Options{TCPAddress: "0.0.0.0:0", Credentials: c.get, VerifyServer: meshclient.VerifyControlPlane})
	if err == nil {
		t.Fatal("Listen on 0.0.0.0: no error, want a refusal (it serves without credentials)")
	}
	if want := "must be a loopback address"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// TestRefusesAnImpostorUpstream: an upstream whose certificate the mesh CA
// signed for a machine (a service certificate, valid for the upstream's
// address) is not the control plane: listed first, it gets no stream, and
// the application's stream goes to the real server after it.
func TestRefusesAnImpostorUpstream(t *testing.T) {
	ca := agenttest.NewCA(t)
	impostor, real := agenttest.StartADSWith(t, ca.ImpostorTLS(t)), agenttest.StartADS(t, ca)
	var c creds
	c.set(t, ca, "m1.bookbuyer.default")
	p := start(t, &c, impostor.Addr, real.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sotw(t, ctx, dialLocal(t, p.TCPAddr()))
	if a := nextAck(t, impostor, real); a.Server != real.Addr {
		t.Fatalf("the application's stream was ACKed at %s, the impostor; want %s", a.Server, real.Addr)
	}
}

// Any local process may open streams on the endpoint, each carried
// upstream against the machine's identity: it carries at most MaxStreams
// at once, over its socket and its port together, refusing the next with
// ResourceExhausted naming the bound and its key; a stream that ends
// frees its place.
func TestLocalStreamsAreBounded(t *testing.T) {
	ca := agenttest.NewCA(t)
	ads := agenttest.StartADS(t, ca)
	var c creds
	c.set(t, ca, "m1.bookbuyer.default")
	const bound = 2
	p := startWith(t, &c, localxds.Options{MaxStreams: bound}, ads.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	defer cancelFirst()
	sotw(t, first, dialLocal(t, p.TCPAddr()))
	delta(t, ctx, dialLocal(t, "unix:"+p.SocketPath()))

	// open opens a SotW stream and returns the error of its first answer.
	open := func(target string) error {
		s, err := dialLocal(t, target).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&discoveryv3.DiscoveryRequest{Node: appNode(), TypeUrl: agenttest.ListenerType}); err != nil {
			_, err = s.Recv()
			return err
		}
		_, err = s.Recv()
		return err
	}
	for _, target := range []string{p.TCPAddr(), "unix:" + p.SocketPath()} {
		err := open(target)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at most 2 streams") || !strings.Contains(err.Error(), "localXDSMaxStreams") {
			t.Fatalf("stream %d over %s: %v; want ResourceExhausted naming the bound of %d and localXDSMaxStreams", bound+1, target, err, bound)
		}
	}

	cancelFirst()
	var err error
	testwait.For(t, "a stream to be carried once one of the two ended", func() bool {
		err = open(p.TCPAddr())
		return status.Code(err) != codes.ResourceExhausted
	})
	if err != nil {
		t.Fatalf("a stream after one of %d ended: %v", bound, err)
	}
}
