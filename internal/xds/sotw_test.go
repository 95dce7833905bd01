package xds

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// sentStream is the server side of a SotW stream that records what is
// sent (sotwStream receives through the function serve is given).
type sentStream struct {
	discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	sent []*discovery.DiscoveryResponse
}

func (s *sentStream) Send(r *discovery.DiscoveryResponse) error {
	s.sent = append(s.sent, r)
	return nil
}

// sotwFixture drives a sotwStream by hand (no goroutines): request, then
// flush what the cache delivered.
type sotwFixture struct {
	t  *testing.T
	c  *cache.Cache
	gs *sentStream
	h  *sotwStream
}

func newSotwFixture(t *testing.T) *sotwFixture {
	c := cache.New(discard())
	gs := &sentStream{}
	return &sotwFixture{t: t, c: c, gs: gs, h: newSotwStream(gs, c)}
}

// publishEDS publishes load assignments named names, each with one
// endpoint on port, to node n1.
func (f *sotwFixture) publishEDS(port uint32, names ...string) {
	f.t.Helper()
	var rs []*cache.Resource
	for _, n := range names {
		r, err := f.c.NewResource(n, &endpointv3.ClusterLoadAssignment{ClusterName: n, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}}}}})
		if err != nil {
			f.t.Fatal(err)
		}
		rs = append(rs, r)
	}
	set, err := cache.NewSet(rs...)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.c.Publish("n1", resource.EndpointType, set); err != nil {
		f.t.Fatal(err)
	}
}

// ask sends a request and returns what the stream sends in answer (nil
// for nothing).
func (f *sotwFixture) ask(req *discovery.DiscoveryRequest) *discovery.DiscoveryResponse {
	f.t.Helper()
	if err := f.h.request(req); err != nil {
		f.t.Fatalf("request: %v", err)
	}
	return f.flush()
}

// flush sends what the cache delivered; it returns the last response sent.
func (f *sotwFixture) flush() *discovery.DiscoveryResponse {
	f.t.Helper()
	before := len(f.gs.sent)
	if err := f.h.flush(); err != nil {
		f.t.Fatalf("flush: %v", err)
	}
	if len(f.gs.sent) == before {
		return nil
	}
	return f.gs.sent[len(f.gs.sent)-1]
}

func names(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.GetResources() {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		out = append(out, cla.GetClusterName())
	}
	return out
}

func edsRequest(names []string, r *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
}

// The request flow go-control-plane's sotw server has: the node from the
// first request, a response per change, nonces that count, a stale nonce
// ignored, narrowed names answered with the subset.
func TestSotwStreamProtocol(t *testing.T) {
	f := newSotwFixture(t)
	f.publishEDS(1, "a", "b")
	first := &discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.EndpointType, ResourceNames: []string{"a", "b"}}
	r1 := f.ask(first)
	if r1 == nil || r1.GetNonce() != "1" || fmt.Sprint(names(t, r1)) != "[a b]" || r1.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("first response = %v, want a and b with nonce 1", r1)
	}
	// The ACK (no node: the stream's is used) opens a watch; nothing changed.
	if r := f.ask(edsRequest([]string{"a", "b"}, r1)); r != nil {
		t.Fatalf("ACK answered with %v, want nothing until a change", r)
	}
	f.publishEDS(2, "a", "b")
	r2 := f.flush()
	if r2 == nil || r2.GetNonce() != "2" || r2.GetVersionInfo() == r1.GetVersionInfo() {
		t.Fatalf("after a change: %v, want a new version with nonce 2", r2)
	}
	// A request answering the first response (stale nonce) is ignored: no
	// new watch, so the next change waits for the ACK of r2.
	if r := f.ask(edsRequest([]string{"a"}, r1)); r != nil {
		t.Fatalf("stale request answered with %v, want it ignored", r)
	}
	f.publishEDS(3, "a", "b")
	if r := f.flush(); r != nil {
		t.Fatalf("a change before r2's ACK sent %v, want nothing (no watch open)", r)
	}
	// Narrowing to one name sends that one.
	r3 := f.ask(edsRequest([]string{"a"}, r2))
	if r3 == nil || fmt.Sprint(names(t, r3)) != "[a]" || r3.GetNonce() != "3" {
		t.Fatalf("narrowed to a: %v, want a alone with nonce 3", r3)
	}
	if f.c.Stats().Watches != 0 {
		t.Errorf("%d watches open after the last response, want 0", f.c.Stats().Watches)
	}
	if r := f.ask(edsRequest([]string{"a"}, r3)); r != nil {
		t.Fatalf("ACK of r3 answered with %v", r)
	}
	if got := f.c.Stats().Watches; got != 1 {
		t.Errorf("%d watches open after the ACK, want 1", got)
	}
}

// A response to a watch that a later request replaced is not sent.
func TestSotwStreamDropsResponsesOfReplacedWatches(t *testing.T) {
	f := newSotwFixture(t)
	f.publishEDS(1, "a", "b")
	if err := f.h.request(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n1"}, TypeUrl: resource.EndpointType, ResourceNames: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	// Before the handler flushes, the client changes its names (no nonce
	// has been sent, so the request is not stale).
	if err := f.h.request(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.h.flush(); err != nil {
		t.Fatal(err)
	}
	if len(f.gs.sent) != 1 || fmt.Sprint(names(t, f.gs.sent[0])) != "[b]" {
		var got [][]string
		for _, r := range f.gs.sent {
			got = append(got, names(t, r))
		}
		t.Fatalf("sent %v, want only the answer to the second request: [[b]]", got)
	}
}

func TestSotwStreamRefusesBadRequests(t *testing.T) {
	f := newSotwFixture(t)
	for _, tc := range []struct {
		req  *discovery.DiscoveryRequest
		code codes.Code
	}{
		{nil, codes.Unavailable},
		{&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n1"}}, codes.InvalidArgument},
	} {
		err := f.h.request(tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("request %v: %v, want code %s", tc.req, err, tc.code)
		}
	}
}

// The stream's node stays with later requests that omit it (the cache
// keys watches by node ID).
func TestSotwStreamKeepsTheNode(t *testing.T) {
	f := newSotwFixture(t)
	f.publishEDS(1, "a")
	node := &corev3.Node{Id: "n1"}
	r := f.ask(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{"a"}})
	ack := edsRequest([]string{"a"}, r)
	f.ask(ack)
	if !proto.Equal(ack.GetNode(), node) {
		t.Errorf("a request without a node was watched as %v, want the stream's node %v", ack.GetNode(), node)
	}
}
