package cache

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer serves c over go-control-plane's ADS server on 127.0.0.1 and
// returns a client connection to it.
func startServer(t testing.TB, c *Cache) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, c, nil))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		g.Stop()
		wg.Wait()
	})
	return conn
}

// adsClient is a raw SotW ADS client: it sends what the test tells it and
// queues every response.
type adsClient struct {
	t      testing.TB
	node   *corev3.Node
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resps  chan *discovery.DiscoveryResponse
	cancel context.CancelFunc
	done   chan struct{}
}

func newADSClient(t testing.TB, conn *grpc.ClientConn, nodeID string) *adsClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	a := &adsClient{t: t, node: &corev3.Node{Id: nodeID}, stream: st, resps: make(chan *discovery.DiscoveryResponse, 100), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case a.resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(a.close)
	return a
}

func (a *adsClient) close() {
	a.cancel()
	<-a.done
}

func (a *adsClient) send(typeURL string, names []string, version, nonce string, nack error) {
	a.t.Helper()
	req := &discovery.DiscoveryRequest{Node: a.node, TypeUrl: typeURL, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce}
	if nack != nil {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack.Error()}
	}
	if err := a.stream.Send(req); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

func (a *adsClient) recv() *discovery.DiscoveryResponse {
	a.t.Helper()
	select {
	case r := <-a.resps:
		return r
	case <-time.After(testwait.Bound(a.t)):
		a.t.Fatal("no response")
		return nil
	}
}

func (a *adsClient) expectNothing(d time.Duration) {
	a.t.Helper()
	select {
	case r := <-a.resps:
		a.t.Fatalf("unexpected response: type %s version %s names %v", r.GetTypeUrl(), r.GetVersionInfo(), respNames(a.t, r))
	case <-time.After(d):
	}
}

// ack acknowledges r, keeping the subscription names.
func (a *adsClient) ack(r *discovery.DiscoveryResponse, names []string) {
	a.send(r.GetTypeUrl(), names, r.GetVersionInfo(), r.GetNonce(), nil)
}

func respNames(t testing.TB, r *discovery.DiscoveryResponse) []string {
	var out []string
	for _, a := range r.GetResources() {
		m, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
		if err != nil {
			t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
		}
		switch m := m.(type) {
		case *clusterv3.Cluster:
			out = append(out, m.GetName())
		case *endpointv3.ClusterLoadAssignment:
			out = append(out, fmt.Sprintf("%s/%d", m.GetClusterName(), len(m.GetEndpoints()[0].GetLbEndpoints())))
		default:
			t.Fatalf("unexpected %T", m)
		}
	}
	sort.Strings(out)
	return out
}

func mustResource(t testing.TB, c *Cache, name string, m proto.Message) *Resource {
	t.Helper()
	r, err := c.NewResource(name, m)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func cluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
	}
}

// cla is a load assignment for name with n endpoints on 127.0.0.1 starting at port.
func cla(name string, port, n int) *endpointv3.ClusterLoadAssignment {
	var eps []*endpointv3.LbEndpoint
	for i := range n {
		eps = append(eps, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port + i)},
			}}},
		}}})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality: &corev3.Locality{}, LbEndpoints: eps, LoadBalancingWeight: wrapperspb.UInt32(1),
	}}}
}

func mustSet(t testing.TB, rs ...*Resource) *Set {
	t.Helper()
	s, err := NewSet(rs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPublish(t testing.TB, c *Cache, node, typeURL string, s *Set) {
	t.Helper()
	if err := c.Publish(node, typeURL, s); err != nil {
		t.Fatal(err)
	}
}

func TestSotWWildcardAndNamed(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a")), mustResource(t, c, "b", cluster("b"))))
	eds := mustSet(t, mustResource(t, c, "a", cla("a", 1000, 1)), mustResource(t, c, "b", cla("b", 2000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds)

	a := newADSClient(t, conn, "n1")
	// Envoy: wildcard CDS.
	a.send(resource.ClusterType, nil, "", "", nil)
	r := a.recv()
	if diff := cmp.Diff([]string{"a", "b"}, respNames(t, r)); diff != "" {
		t.Errorf("wildcard CDS (-want +got):\n%s", diff)
	}
	a.ack(r, nil)
	// Named EDS for a subset of the view: answered with the subset.
	a.send(resource.EndpointType, []string{"a"}, "", "", nil)
	e := a.recv()
	if diff := cmp.Diff([]string{"a/1"}, respNames(t, e)); diff != "" {
		t.Errorf("named EDS (-want +got):\n%s", diff)
	}
	a.ack(e, []string{"a"})
	a.expectNothing(200 * time.Millisecond)

	// A change to b, which this stream did not ask for, pushes nothing.
	eds2, err := eds.With(mustResource(t, c, "b", cla("b", 2000, 2)))
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, c, "n1", resource.EndpointType, eds2)
	a.expectNothing(200 * time.Millisecond)
	// A change to a does.
	eds3, _ := eds2.With(mustResource(t, c, "a", cla("a", 1000, 3)))
	mustPublish(t, c, "n1", resource.EndpointType, eds3)
	e2 := a.recv()
	if diff := cmp.Diff([]string{"a/3"}, respNames(t, e2)); diff != "" {
		t.Errorf("EDS after change (-want +got):\n%s", diff)
	}
	if e2.GetVersionInfo() == e.GetVersionInfo() {
		t.Errorf("version did not change: %s", e2.GetVersionInfo())
	}
	a.ack(e2, []string{"a"})
	// Removing a cluster pushes the wildcard CDS stream the smaller set.
	cds2 := mustSet(t, mustResource(t, c, "a", cluster("a")))
	mustPublish(t, c, "n1", resource.ClusterType, cds2)
	r2 := a.recv()
	if diff := cmp.Diff([]string{"a"}, respNames(t, r2)); diff != "" {
		t.Errorf("CDS after removal (-want +got):\n%s", diff)
	}
}

func TestSotWNamedResourceAnsweredWhenItAppears(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	eds := mustSet(t, mustResource(t, c, "a", cla("a", 1000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds)
	a := newADSClient(t, conn, "n1")
	a.send(resource.EndpointType, []string{"c"}, "", "", nil)
	empty := a.recv() // answered at once, without c (see TestSotWMissingNamesAnsweredAtOnce)
	a.ack(empty, []string{"c"})
	a.expectNothing(200 * time.Millisecond)
	eds2, _ := eds.With(mustResource(t, c, "c", cla("c", 3000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds2)
	if diff := cmp.Diff([]string{"c/1"}, respNames(t, a.recv())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSotWNothingBeforePublish(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	a := newADSClient(t, conn, "n1")
	a.send(resource.ClusterType, nil, "", "", nil)
	a.expectNothing(200 * time.Millisecond)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t)) // empty: "no clusters"
	r := a.recv()
	if len(r.GetResources()) != 0 {
		t.Errorf("got %d resources, want 0", len(r.GetResources()))
	}
}

func TestSotWNACKNotResent(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	a := newADSClient(t, conn, "n1")
	a.send(resource.ClusterType, nil, "", "", nil)
	r := a.recv()
	a.ack(r, nil)
	bad := mustSet(t, mustResource(t, c, "bad", cluster("bad")))
	mustPublish(t, c, "n1", resource.ClusterType, bad)
	r2 := a.recv()
	// NACK, keeping the last good version as version_info.
	a.send(resource.ClusterType, nil, r.GetVersionInfo(), r2.GetNonce(), fmt.Errorf("cluster bad: invalid"))
	a.expectNothing(300 * time.Millisecond)

	got := c.NACKs()
	if len(got) != 1 {
		t.Fatalf("got %d NACKs, want 1", len(got))
	}
	if got[0].Time.IsZero() {
		t.Error("NACK time not set")
	}
	got[0].Time = time.Time{}
	want := NACK{Node: "n1", TypeURL: resource.ClusterType, Version: r2.GetVersionInfo(), Nonce: r2.GetNonce(), Error: "cluster bad: invalid"}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("NACK (-want +got):\n%s", diff)
	}
	st := c.Status("n1")
	if len(st) != 1 || st[0].NACK == nil {
		t.Fatalf("Status = %+v, want one type with a NACK", st)
	}
	gotSt := TypeStatus{TypeURL: st[0].TypeURL, Published: st[0].Published, Sent: st[0].Sent, ACKed: st[0].ACKed}
	wantSt := TypeStatus{TypeURL: resource.ClusterType, Published: bad.Version(), Sent: r2.GetVersionInfo(), ACKed: r.GetVersionInfo()}
	if diff := cmp.Diff(wantSt, gotSt); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	// Only a newer version is sent.
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "good", cluster("good"))))
	if diff := cmp.Diff([]string{"good"}, respNames(t, a.recv())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	c.Forget("n1")
	if n := len(c.NACKs()); n != 0 {
		t.Errorf("after Forget: %d NACKs, want 0", n)
	}
}

func TestPushOnlyToChangedNodes(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	cds := mustSet(t, mustResource(t, c, "a", cluster("a")))
	mustPublish(t, c, "n1", resource.ClusterType, cds)
	mustPublish(t, c, "n2", resource.ClusterType, cds)
	var clients []*adsClient
	for _, id := range []string{"n1", "n2"} {
		a := newADSClient(t, conn, id)
		a.send(resource.ClusterType, nil, "", "", nil)
		a.ack(a.recv(), nil)
		clients = append(clients, a)
	}
	// Same set again, and an equal set built anew: no push.
	mustPublish(t, c, "n1", resource.ClusterType, cds)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	clients[0].expectNothing(200 * time.Millisecond)
	// A change for n2 only.
	mustPublish(t, c, "n2", resource.ClusterType, mustSet(t, mustResource(t, c, "b", cluster("b"))))
	if diff := cmp.Diff([]string{"b"}, respNames(t, clients[1].recv())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	clients[0].expectNothing(200 * time.Millisecond)
}

func TestConnectDisconnectNoLeak(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	for i := range 200 {
		id := fmt.Sprintf("n%d", i%3) // n1 has a view; n0 and n2 never get one
		a := newADSClient(t, conn, id)
		a.send(resource.ClusterType, nil, "", "", nil)
		a.send(resource.EndpointType, []string{"x"}, "", "", nil)
		if id == "n1" {
			a.ack(a.recv(), nil)
		}
		d := newDeltaClient(t, conn, id)
		d.send(resource.ClusterType, nil, nil, "", nil)
		if id == "n1" {
			d.recv()
		}
		a.close()
		d.close()
	}
	testwait.Until(t, "0 watches and only n1 after the disconnects", func() (bool, string) {
		s := c.Stats()
		c.mu.Lock()
		_, hasN1 := c.nodes["n1"]
		c.mu.Unlock()
		return s.Watches == 0 && s.Nodes == 1 && hasN1, fmt.Sprintf("%+v, n1 known: %v", s, hasN1)
	})
	c.Forget("n1")
	if s := c.Stats(); s.Nodes != 0 || s.Watches != 0 {
		t.Errorf("after Forget: %+v, want empty", s)
	}
}

func TestSetErrors(t *testing.T) {
	c := New(testLogger(t))
	a := mustResource(t, c, "a", cluster("a"))
	if _, err := NewSet(a, a); err == nil {
		t.Error("duplicate names: no error")
	}
	if _, err := NewSet(a, mustResource(t, c, "e", cla("e", 1, 1))); err == nil {
		t.Error("mixed types: no error")
	}
	if err := c.Publish("n", resource.EndpointType, mustSet(t, a)); err == nil {
		t.Error("publishing clusters as endpoints: no error")
	}
	b := mustResource(t, c, "b", cluster("b"))
	if _, err := NewSortedSet([]*Resource{b, a}); err == nil {
		t.Error("NewSortedSet out of order: no error")
	}
	if _, err := NewSortedSet([]*Resource{a, a}); err == nil {
		t.Error("NewSortedSet with a duplicate: no error")
	}
	sorted, err := NewSortedSet([]*Resource{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := mustSet(t, b, a); sorted.Version() != want.Version() || len(sorted.Resources()) != 2 {
		t.Errorf("NewSortedSet(a, b) = version %s, want NewSet's %s", sorted.Version(), want.Version())
	}
	if got, want := c.Stats().Marshals, uint64(3); got != want {
		t.Errorf("marshals = %d, want %d", got, want)
	}
}

// A set's version string is made once: every proxy of a group is answered
// the group's set and remembers the version sent, so they share it.
func TestSetVersionIsMadeOnce(t *testing.T) {
	c := New(testLogger(t))
	set := mustSet(t, mustResource(t, c, "a", cla("a", 1, 1)))
	v1, v2 := set.Version(), set.Version()
	if v1 != v2 || unsafe.StringData(v1) != unsafe.StringData(v2) {
		t.Errorf("two calls of Version made two strings (%q at %p, %q at %p)", v1, unsafe.StringData(v1), v2, unsafe.StringData(v2))
	}
	if n := testing.AllocsPerRun(10, func() { _ = set.Version() }); n != 0 {
		t.Errorf("Version allocates %v times per call once made, want 0", n)
	}
}

// Update gives the set NewSet gives for the same resources, and refuses
// anything but new versions of the same names in the same order.
func TestSetUpdate(t *testing.T) {
	c := New(testLogger(t))
	a1, b1, c1 := mustResource(t, c, "a", cla("a", 1, 1)), mustResource(t, c, "b", cla("b", 2, 1)), mustResource(t, c, "c", cla("c", 3, 1))
	b2 := mustResource(t, c, "b", cla("b", 2, 2))
	set := mustSet(t, a1, b1, c1)
	got, err := set.Update([]*Resource{a1, b2, c1})
	if err != nil {
		t.Fatal(err)
	}
	if want := mustSet(t, a1, b2, c1); got.Version() != want.Version() || got.Get("b") != b2 || got.Len() != 3 {
		t.Errorf("Update = version %s with b %v, want NewSet's %s with b2", got.Version(), got.Get("b"), want.Version())
	}
	if set.Get("b") != b1 {
		t.Error("Update changed the set it was called on")
	}
	back, err := got.Update([]*Resource{a1, b1, c1})
	if err != nil || back.Version() != set.Version() {
		t.Errorf("updating back = %v, %v; want version %s", back.Version(), err, set.Version())
	}
	for name, rs := range map[string][]*Resource{
		"fewer":          {a1, b2},
		"renamed":        {a1, mustResource(t, c, "d", cla("d", 4, 1)), c1},
		"reordered":      {b2, a1, c1},
		"nil":            {a1, nil, c1},
		"different type": {a1, mustResource(t, c, "b", cluster("b")), c1},
	} {
		if _, err := set.Update(rs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A stream that starts as a wildcard and then names resources gets the named
// subset, and is not resent what it holds.
func TestSotWWildcardThenNamed(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a")), mustResource(t, c, "b", cluster("b"))))
	a := newADSClient(t, conn, "n1")
	a.send(resource.ClusterType, nil, "", "", nil)
	r := a.recv()
	a.ack(r, nil)
	a.expectNothing(100 * time.Millisecond)
	a.send(resource.ClusterType, []string{"b"}, r.GetVersionInfo(), r.GetNonce(), nil)
	r2 := a.recv()
	if diff := cmp.Diff([]string{"b"}, respNames(t, r2)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	a.ack(r2, []string{"b"})
	a.expectNothing(200 * time.Millisecond)
}

// Many streams acknowledging while the producer publishes concurrently all
// converge on the last version.
func TestConcurrentPublishConverges(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	const clients, versions = 20, 50
	id := func(i int) string { return fmt.Sprintf("n%d", i) }
	set := mustSet(t, mustResource(t, c, "a", cla("a", 1, 1)))
	for i := range clients {
		mustPublish(t, c, id(i), resource.EndpointType, set)
	}
	last := mustSet(t, mustResource(t, c, "a", cla("a", 1, versions)))
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		a := newADSClient(t, conn, id(i))
		a.send(resource.EndpointType, []string{"a"}, "", "", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.After(testwait.Bound(t))
			for {
				select {
				case r := <-a.resps:
					if r.GetVersionInfo() == last.Version() {
						return
					}
					// Not a.ack: t.Fatal may not be called off the test goroutine.
					if err := a.stream.Send(&discovery.DiscoveryRequest{Node: a.node, TypeUrl: r.GetTypeUrl(), ResourceNames: []string{"a"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
						errs <- fmt.Errorf("%s: ack: %w", a.node.GetId(), err)
						return
					}
				case <-deadline:
					errs <- fmt.Errorf("%s never got version %s", a.node.GetId(), last.Version())
					return
				}
			}
		}()
	}
	for v := 2; v <= versions; v++ {
		s := mustSet(t, mustResource(t, c, "a", cla("a", 1, v)))
		for i := range clients {
			mustPublish(t, c, id(i), resource.EndpointType, s)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSotWEDSCarriesOnlyChangedResources: once a stream holds EDS
// resources, a change sends only the changed ClusterLoadAssignment (xDS
// allows it for EDS and RDS), while CDS always carries its whole set.
func TestSotWEDSCarriesOnlyChangedResources(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	eds := mustSet(t, mustResource(t, c, "a", cla("a", 1000, 1)), mustResource(t, c, "b", cla("b", 2000, 1)), mustResource(t, c, "c", cla("c", 3000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds)
	a := newADSClient(t, conn, "n1")
	names := []string{"a", "b", "c"}
	a.send(resource.EndpointType, names, "", "", nil)
	first := a.recv()
	if diff := cmp.Diff([]string{"a/1", "b/1", "c/1"}, respNames(t, first)); diff != "" {
		t.Fatalf("first EDS response (-want +got):\n%s", diff)
	}
	a.ack(first, names)
	eds2, _ := eds.With(mustResource(t, c, "b", cla("b", 2000, 2)))
	mustPublish(t, c, "n1", resource.EndpointType, eds2)
	second := a.recv()
	if diff := cmp.Diff([]string{"b/2"}, respNames(t, second)); diff != "" {
		t.Errorf("EDS after one change (-want +got):\n%s", diff)
	}
	if second.GetVersionInfo() == first.GetVersionInfo() {
		t.Error("version unchanged")
	}
	a.ack(second, names)
	a.expectNothing(200 * time.Millisecond)
}

// TestSotWMissingNamesAnsweredAtOnce: a named subscription is answered at
// once with the named resources the view holds, none if it holds none, so
// a client learns at once that the others do not exist (for LDS and CDS,
// where a SotW response carries every resource the client asked for) and
// never waits in silence; an ACK or a NACK of that answer is not answered
// again.
func TestSotWMissingNamesAnsweredAtOnce(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "x", cluster("x"))))
	a := newADSClient(t, conn, "n1")

	a.send(resource.ClusterType, []string{"nope"}, "", "", nil)
	r := a.recv()
	if got := respNames(t, r); len(got) != 0 {
		t.Errorf("answer to a subscription to a missing name: got %v, want no resources", got)
	}
	a.ack(r, []string{"nope"})
	a.expectNothing(200 * time.Millisecond)

	// Adding an existing name and another missing one: answered with what exists.
	names := []string{"nope", "x", "gone"}
	a.send(resource.ClusterType, names, r.GetVersionInfo(), r.GetNonce(), nil)
	r2 := a.recv()
	if diff := cmp.Diff([]string{"x"}, respNames(t, r2)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A NACK is not answered with the same version again (no NACK loop).
	a.send(resource.ClusterType, names, r.GetVersionInfo(), r2.GetNonce(), fmt.Errorf("cluster x: invalid"))
	a.expectNothing(200 * time.Millisecond)
	a.ack(r2, names)
	a.expectNothing(200 * time.Millisecond)
	// A missing name that appears is sent.
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "x", cluster("x")), mustResource(t, c, "gone", cluster("gone"))))
	if diff := cmp.Diff([]string{"gone", "x"}, respNames(t, a.recv())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// recordingReceiver counts what a watch delivered and the wake-ups.
type recordingReceiver struct {
	delivered []gcpcache.Response
	wakes     int
}

func (r *recordingReceiver) Deliver(resp gcpcache.Response) bool {
	r.delivered = append(r.delivered, resp)
	return true
}
func (r *recordingReceiver) Wake() { r.wakes++ }

// A Batch holds back the wake-ups of the streams Publish answers until it
// ends (nested, until the last ends); without one, a stream is woken as
// soon as Publish, or the request answered at once, returns.
func TestBatchWakesStreamsAtItsEnd(t *testing.T) {
	c := New(testLogger(t))
	watch := func(node string, rcv *recordingReceiver) {
		req := &gcpcache.Request{Node: &corev3.Node{Id: node}, TypeUrl: resource.EndpointType, ResourceNames: []string{"a"}}
		c.WatchSotw(req, &fakeSub{names: map[string]struct{}{"a": {}}, returned: map[string]string{}}, nil, rcv, nil)
	}
	n1, n2 := &recordingReceiver{}, &recordingReceiver{}
	watch("n1", n1)
	watch("n2", n2)
	end := c.Batch()
	inner := c.Batch()
	set := mustSet(t, mustResource(t, c, "a", cla("a", 1, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, set)
	mustPublish(t, c, "n2", resource.EndpointType, set)
	if len(n1.delivered) != 1 || len(n2.delivered) != 1 {
		t.Fatalf("delivered %d and %d responses in the batch, want 1 each", len(n1.delivered), len(n2.delivered))
	}
	inner()
	if n1.wakes != 0 || n2.wakes != 0 {
		t.Fatalf("woken %d and %d times before the outer batch ended, want 0", n1.wakes, n2.wakes)
	}
	end()
	end() // a second call does nothing
	if n1.wakes != 1 || n2.wakes != 1 {
		t.Fatalf("woken %d and %d times when the batch ended, want once each", n1.wakes, n2.wakes)
	}
	// Without a batch: woken when the call that answered returns.
	n3 := &recordingReceiver{}
	watch("n3", n3) // nothing published for n3: the watch waits
	if n3.wakes != 0 {
		t.Fatalf("n3 woken %d times with nothing to send", n3.wakes)
	}
	mustPublish(t, c, "n3", resource.EndpointType, set)
	if len(n3.delivered) != 1 || n3.wakes != 1 {
		t.Fatalf("n3: %d responses, %d wake-ups after Publish, want 1 and 1", len(n3.delivered), n3.wakes)
	}
	n4 := &recordingReceiver{}
	mustPublish(t, c, "n4", resource.EndpointType, set)
	watch("n4", n4) // answered at once
	if len(n4.delivered) != 1 || n4.wakes != 1 {
		t.Fatalf("n4: %d responses, %d wake-ups after its request, want 1 and 1", len(n4.delivered), n4.wakes)
	}
}

// A type URL osm-server does not serve is kept, sent and reported as the
// ones it does (the cache holds those in an array, others in a map).
func TestOtherTypeURL(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	rt := mustSet(t, mustResource(t, c, "layer", &runtimev3.Runtime{Name: "layer"}))
	mustPublish(t, c, "n1", resource.RuntimeType, rt)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	a := newADSClient(t, conn, "n1")
	a.send(resource.RuntimeType, []string{"layer"}, "", "", nil)
	r := a.recv()
	if r.GetTypeUrl() != resource.RuntimeType || len(r.GetResources()) != 1 {
		t.Fatalf("got %d resources of %s, want the runtime layer", len(r.GetResources()), r.GetTypeUrl())
	}
	a.ack(r, []string{"layer"})
	testwait.For(t, "the runtime layer's ACK recorded", func() bool {
		st := c.Status("n1")
		return len(st) == 2 && st[1].ACKed == r.GetVersionInfo()
	})
	st := c.Status("n1")
	got := []TypeStatus{{TypeURL: st[0].TypeURL, Published: st[0].Published, Sent: st[0].Sent}, {TypeURL: st[1].TypeURL, Published: st[1].Published, Sent: st[1].Sent, ACKed: st[1].ACKed}}
	want := []TypeStatus{
		{TypeURL: resource.ClusterType, Published: c.View("n1")[resource.ClusterType].Version()},
		{TypeURL: resource.RuntimeType, Published: rt.Version(), Sent: r.GetVersionInfo(), ACKed: r.GetVersionInfo()},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if v := c.View("n1"); len(v) != 2 || v[resource.RuntimeType] != rt {
		t.Errorf("View holds %d types, want the clusters and the runtime layer", len(v))
	}
	// A new layer is sent to the open watch.
	rt2 := mustSet(t, mustResource(t, c, "layer", &runtimev3.Runtime{Name: "layer", Layer: &structpb.Struct{}}))
	mustPublish(t, c, "n1", resource.RuntimeType, rt2)
	if r2 := a.recv(); r2.GetTypeUrl() != resource.RuntimeType || r2.GetVersionInfo() == r.GetVersionInfo() {
		t.Errorf("got %s version %q after a new layer, want a new runtime version", r2.GetTypeUrl(), r2.GetVersionInfo())
	}
	c.Forget("n1")
	if v := c.View("n1"); len(v) != 0 {
		t.Errorf("after Forget, View holds %d types, want none", len(v))
	}
}
