package cache

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

type deltaClient struct {
	t      testing.TB
	node   *corev3.Node
	stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	resps  chan *discovery.DeltaDiscoveryResponse
	cancel context.CancelFunc
	done   chan struct{}
}

func newDeltaClient(t testing.TB, conn *grpc.ClientConn, nodeID string) *deltaClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d := &deltaClient{t: t, node: &corev3.Node{Id: nodeID}, stream: st, resps: make(chan *discovery.DeltaDiscoveryResponse, 100), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case d.resps <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(d.close)
	return d
}

func (d *deltaClient) close() {
	d.cancel()
	<-d.done
}

func (d *deltaClient) send(typeURL string, sub, unsub []string, nonce string, nack error) {
	d.t.Helper()
	req := &discovery.DeltaDiscoveryRequest{Node: d.node, TypeUrl: typeURL, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub, ResponseNonce: nonce}
	if nack != nil {
		req.ErrorDetail = &status.Status{Code: 3, Message: nack.Error()}
	}
	if err := d.stream.Send(req); err != nil {
		d.t.Fatalf("send: %v", err)
	}
}

func (d *deltaClient) recv() *discovery.DeltaDiscoveryResponse {
	d.t.Helper()
	select {
	case r := <-d.resps:
		return r
	case <-time.After(testwait.Bound(d.t)):
		d.t.Fatal("no delta response")
		return nil
	}
}

func (d *deltaClient) expectNothing(dur time.Duration) {
	d.t.Helper()
	select {
	case r := <-d.resps:
		d.t.Fatalf("unexpected delta response: %v", deltaNames(r))
	case <-time.After(dur):
	}
}

func deltaNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, x := range r.GetResources() {
		out = append(out, x.GetName())
	}
	for _, x := range r.GetRemovedResources() {
		out = append(out, "-"+x)
	}
	sort.Strings(out)
	return out
}

func TestDeltaWildcardAndNamed(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	cds := mustSet(t, mustResource(t, c, "a", cluster("a")), mustResource(t, c, "b", cluster("b")))
	mustPublish(t, c, "n1", resource.ClusterType, cds)
	eds := mustSet(t, mustResource(t, c, "a", cla("a", 1000, 1)), mustResource(t, c, "b", cla("b", 2000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds)

	d := newDeltaClient(t, conn, "n1")
	d.send(resource.ClusterType, nil, nil, "", nil)
	r := d.recv()
	if diff := cmp.Diff([]string{"a", "b"}, deltaNames(r)); diff != "" {
		t.Errorf("wildcard CDS (-want +got):\n%s", diff)
	}
	d.send(resource.ClusterType, nil, nil, r.GetNonce(), nil)
	d.send(resource.EndpointType, []string{"a"}, nil, "", nil)
	e := d.recv()
	if diff := cmp.Diff([]string{"a"}, deltaNames(e)); diff != "" {
		t.Errorf("named EDS (-want +got):\n%s", diff)
	}
	d.send(resource.EndpointType, nil, nil, e.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)

	// Only the changed resource is sent, and a removal is named.
	eds2, _ := eds.With(mustResource(t, c, "a", cla("a", 1000, 2)))
	mustPublish(t, c, "n1", resource.EndpointType, eds2)
	e2 := d.recv()
	if diff := cmp.Diff([]string{"a"}, deltaNames(e2)); diff != "" {
		t.Errorf("EDS change (-want +got):\n%s", diff)
	}
	// NACK it: recorded, nothing resent.
	d.send(resource.EndpointType, nil, nil, e2.GetNonce(), errors.New("bad endpoints"))
	d.expectNothing(200 * time.Millisecond)
	if n := len(c.NACKs()); n != 1 {
		t.Errorf("got %d NACKs, want 1", n)
	}
	mustPublish(t, c, "n1", resource.ClusterType, cds.Without("b"))
	r2 := d.recv()
	if diff := cmp.Diff([]string{"-b"}, deltaNames(r2)); diff != "" {
		t.Errorf("CDS removal (-want +got):\n%s", diff)
	}
	// A named subscription to a resource that appears later.
	d.send(resource.ClusterType, nil, nil, r2.GetNonce(), nil)
	d.send(resource.EndpointType, []string{"c"}, nil, "", nil)
	// Answered at once: it does not exist (so far), and only once.
	r3 := d.recv()
	if diff := cmp.Diff([]string{"-c"}, deltaNames(r3)); diff != "" {
		t.Errorf("missing EDS (-want +got):\n%s", diff)
	}
	d.send(resource.EndpointType, nil, nil, r3.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)
	mustPublish(t, c, "n1", resource.EndpointType, eds2) // another publish without it: nothing again
	d.expectNothing(200 * time.Millisecond)
	eds3, _ := eds2.With(mustResource(t, c, "c", cla("c", 3000, 1)))
	mustPublish(t, c, "n1", resource.EndpointType, eds3)
	if diff := cmp.Diff([]string{"c"}, deltaNames(d.recv())); diff != "" {
		t.Errorf("late EDS (-want +got):\n%s", diff)
	}
}

// A Delta stream that reconnects declaring the versions it holds is sent only
// what changed since.
func TestDeltaReconnectWithInitialVersions(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	a := mustResource(t, c, "a", cla("a", 1000, 1))
	b := mustResource(t, c, "b", cla("b", 2000, 1))
	mustPublish(t, c, "n1", resource.EndpointType, mustSet(t, a, b))
	d := newDeltaClient(t, conn, "n1")
	req := &discovery.DeltaDiscoveryRequest{Node: d.node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"a", "b"},
		InitialResourceVersions: map[string]string{"a": a.Version(), "b": "stale"}}
	if err := d.stream.Send(req); err != nil {
		t.Fatal(err)
	}
	r := d.recv()
	if diff := cmp.Diff([]string{"b"}, deltaNames(r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	d.send(resource.EndpointType, nil, nil, r.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)
}

// TestDeltaMissingNamesAnsweredAtOnce: a Delta subscription to names the
// view does not hold is answered at once with them in removed_resources,
// alongside those it holds; a removed resource still subscribed to is not
// removed again; unsubscribing and subscribing again answers again.
func TestDeltaMissingNamesAnsweredAtOnce(t *testing.T) {
	c := New(testLogger(t))
	conn := startServer(t, c)
	lds := mustSet(t, mustResource(t, c, "a", cluster("a")), mustResource(t, c, "b", cluster("b")))
	mustPublish(t, c, "n1", resource.ClusterType, lds)
	d := newDeltaClient(t, conn, "n1")
	d.send(resource.ClusterType, []string{"a", "x", "y"}, nil, "", nil)
	r := d.recv()
	if diff := cmp.Diff([]string{"-x", "-y", "a"}, deltaNames(r)); diff != "" {
		t.Errorf("first answer (-want +got):\n%s", diff)
	}
	d.send(resource.ClusterType, nil, nil, r.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)
	mustPublish(t, c, "n1", resource.ClusterType, lds.Without("a"))
	r = d.recv()
	if diff := cmp.Diff([]string{"-a"}, deltaNames(r)); diff != "" {
		t.Errorf("removal (-want +got):\n%s", diff)
	}
	d.send(resource.ClusterType, nil, nil, r.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)
	d.send(resource.ClusterType, nil, []string{"x"}, r.GetNonce(), nil)
	d.expectNothing(200 * time.Millisecond)
	d.send(resource.ClusterType, []string{"x"}, nil, r.GetNonce(), nil)
	r = d.recv()
	if diff := cmp.Diff([]string{"-x"}, deltaNames(r)); diff != "" {
		t.Errorf("subscribed again (-want +got):\n%s", diff)
	}
	mustPublish(t, c, "n1", resource.ClusterType, lds)
	d.send(resource.ClusterType, nil, nil, r.GetNonce(), nil)
	r = d.recv()
	if diff := cmp.Diff([]string{"a"}, deltaNames(r)); diff != "" {
		t.Errorf("appeared (-want +got):\n%s", diff)
	}
}
