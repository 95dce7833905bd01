package xds

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
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
	// wires are the encodings sent through SendMsg (a wire stream's),
	// by response.
	wires map[*discovery.DiscoveryResponse]*cache.Wire
}

func (s *sentStream) Send(r *discovery.DiscoveryResponse) error {
	s.sent = append(s.sent, r)
	return nil
}

// SendMsg takes what a wire stream sends, and reads it as a client would:
// wireCodec's bytes.
func (s *sentStream) SendMsg(m any) error {
	w, ok := m.(*wireResponse)
	if !ok {
		return fmt.Errorf("SendMsg of %T, want a *wireResponse", m)
	}
	data, err := newWireCodec().Marshal(w)
	if err != nil {
		return err
	}
	var r discovery.DiscoveryResponse
	if err := proto.Unmarshal(data.Materialize(), &r); err != nil {
		return err
	}
	if s.wires == nil {
		s.wires = map[*discovery.DiscoveryResponse]*cache.Wire{}
	}
	s.wires[&r] = w.body
	return s.Send(&r)
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

// A group's proxies are published the same sets and share their
// answers (the cache works each out once): each stream is still sent
// exactly what it lacks, a subscription change on one stream leaves what
// the others hold alone, an ACK of the view held sends nothing, and a
// NACKed version is not sent again.
func TestSotwStreamsOfAGroupShareAnswers(t *testing.T) {
	t.Run("typed", func(t *testing.T) { testGroupShareAnswers(t, false) })
	t.Run("wire", func(t *testing.T) { testGroupShareAnswers(t, true) })
}

func testGroupShareAnswers(t *testing.T, wire bool) {
	c := cache.New(discard())
	cla := func(name string, port uint32) *cache.Resource {
		r, err := c.NewResource(name, &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}}}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	nodes := []string{"n1", "n2", "n3"}
	streams := map[string]*sotwFixture{}
	for _, id := range nodes {
		gs := &sentStream{}
		streams[id] = &sotwFixture{t: t, c: c, gs: gs, h: newSotwStream(gs, c)}
		streams[id].h.wire = wire
	}
	publish := func(set *cache.Set) {
		t.Helper()
		for _, id := range nodes {
			if err := c.Publish(id, resource.EndpointType, set); err != nil {
				t.Fatal(err)
			}
		}
	}
	s1, err := cache.NewSet(cla("a", 1), cla("b", 1), cla("c", 1))
	if err != nil {
		t.Fatal(err)
	}
	publish(s1)
	abc := []string{"a", "b", "c"}
	last := map[string]*discovery.DiscoveryResponse{}
	for _, id := range nodes {
		r := streams[id].ask(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: id}, TypeUrl: resource.EndpointType, ResourceNames: abc})
		if fmt.Sprint(names(t, r)) != "[a b c]" || r.GetVersionInfo() != last["n1"].GetVersionInfo() && id != "n1" {
			t.Fatalf("%s's first response: %v, want a, b and c at n1's version", id, r)
		}
		last[id] = r
		if r := streams[id].ask(edsRequest(abc, r)); r != nil {
			t.Fatalf("%s's ACK answered with %v, want nothing until a change", id, r)
		}
	}
	// n1 narrows to a and b: the others still hold c.
	r := streams["n1"].ask(edsRequest([]string{"a", "b"}, last["n1"]))
	if r != nil {
		last["n1"] = r
	}
	if r := streams["n1"].ask(edsRequest([]string{"a", "b"}, last["n1"])); r != nil {
		t.Fatalf("n1's ACK of its narrowed view answered with %v", r)
	}
	// b changes: n2 and n3 are sent b alone, n1 too.
	s2, err := s1.Update([]*cache.Resource{s1.Resources()[0], cla("b", 2), s1.Resources()[2]})
	if err != nil {
		t.Fatal(err)
	}
	publish(s2)
	for _, id := range nodes {
		r := streams[id].flush()
		if fmt.Sprint(names(t, r)) != "[b]" {
			t.Fatalf("%s after b changed: sent %v, want b alone", id, names(t, r))
		}
		last[id] = r
	}
	if last["n2"].GetVersionInfo() != last["n3"].GetVersionInfo() || last["n1"].GetVersionInfo() == last["n2"].GetVersionInfo() {
		t.Errorf("versions n1 %q, n2 %q, n3 %q: want n2's and n3's the same, n1's (without c) another", last["n1"].GetVersionInfo(), last["n2"].GetVersionInfo(), last["n3"].GetVersionInfo())
	}
	if wire {
		// n2 and n3 were sent one encoding (the nonces differ).
		w2, w3 := streams["n2"].gs.wires[last["n2"]], streams["n3"].gs.wires[last["n3"]]
		if w2 == nil || w2 != w3 || last["n2"].GetNonce() == "" {
			t.Errorf("n2 was sent encoding %p, n3 %p: want one, shared, with each stream's nonce after it (n2's %q)", w2, w3, last["n2"].GetNonce())
		}
	}
	// n2 ACKs; n3 NACKs: neither is sent b again, even when the view is
	// republished as a new set of the same content.
	if r := streams["n2"].ask(edsRequest(abc, last["n2"])); r != nil {
		t.Fatalf("n2's ACK answered with %v", r)
	}
	nack := edsRequest(abc, last["n3"])
	nack.VersionInfo = last["n1"].GetVersionInfo() // what n3 held before
	nack.ErrorDetail = &rpcstatus.Status{Message: "rejected"}
	if r := streams["n3"].ask(nack); r != nil {
		t.Fatalf("n3's NACK answered with %v, want the rejected version not sent again", r)
	}
	again, err := cache.NewSet(cla("a", 1), cla("b", 2), cla("c", 1))
	if err != nil {
		t.Fatal(err)
	}
	publish(again)
	for _, id := range []string{"n2", "n3"} {
		if r := streams[id].flush(); r != nil {
			t.Fatalf("%s sent %v after the same view was republished", id, names(t, r))
		}
		if r := streams[id].ask(edsRequest(abc, last[id])); r != nil {
			t.Fatalf("%s's repeated request answered with %v", id, names(t, r))
		}
	}
	// c changes: each is sent c (n1, which no longer asks for it, nothing).
	s3, err := again.Update([]*cache.Resource{again.Resources()[0], again.Resources()[1], cla("c", 3)})
	if err != nil {
		t.Fatal(err)
	}
	publish(s3)
	for _, id := range []string{"n2", "n3"} {
		if r := streams[id].flush(); fmt.Sprint(names(t, r)) != "[c]" {
			t.Fatalf("%s after c changed: sent %v, want c alone", id, names(t, r))
		}
	}
	if r := streams["n1"].flush(); r != nil {
		t.Fatalf("n1 sent %v after c changed, which it does not ask for", names(t, r))
	}
}
