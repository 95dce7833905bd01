package xds

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

func benchService(i int) mesh.MeshService {
	return mesh.MeshService{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)}
}

// edsVersions returns each node's published EDS set version.
func edsVersions(c *cache.Cache, p *Publisher) map[string]string {
	out := map[string]string{}
	for id := range p.nodes {
		if s := c.View(id)[resource.EndpointType]; s != nil {
			out[id] = s.Version()
		}
	}
	return out
}

// hasEndpoint reports whether node's published load assignment of svc holds ap.
func hasEndpoint(t *testing.T, c *cache.Cache, node string, svc mesh.MeshService, ap netip.AddrPort) bool {
	t.Helper()
	r := c.View(node)[resource.EndpointType].Get(svc.String())
	if r == nil {
		t.Fatalf("node %s has no load assignment of %s", node, svc)
	}
	for _, loc := range r.Message().(*endpointv3.ClusterLoadAssignment).GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() == ap.Addr().String() && sa.GetPortValue() == uint32(ap.Port()) {
				return true
			}
		}
	}
	return false
}

// TestEndpointChangeReachesDependentsOnly: in W (everyone calls service 0;
// service s also calls s+1..s+4), an endpoint change of one service is
// published to exactly the proxies that call it, before and after a full
// re-render, and a change of two services at once reaches the callers of
// either.
func TestEndpointChangeReachesDependentsOnly(t *testing.T) {
	const services = 30
	p, cat, c := benchPublisher(t, services, 3)
	ctx := context.Background()
	nodeOf := map[mesh.MeshService]string{}
	for id, n := range p.nodes {
		nodeOf[n.proxy.Service] = id
	}
	callers := func(svcs ...int) map[string]bool {
		out := map[string]bool{}
		for _, s := range svcs {
			for _, caller := range callersOf(s, services) {
				out[nodeOf[benchService(caller)]] = true
			}
		}
		return out
	}
	port := uint16(9000)
	change := func(t *testing.T, svcs ...int) {
		t.Helper()
		before := edsVersions(c, p)
		var aps []netip.AddrPort
		for _, s := range svcs {
			port++
			ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, 0, byte(s)}), port)
			aps = append(aps, ap)
			cat.SetEndpoints("bench", benchService(s), []mesh.Endpoint{{IP: ap.Addr(), Port: ap.Port()}})
		}
		p.pass(ctx, false, true, nil)
		after := edsVersions(c, p)
		want := callers(svcs...)
		for id := range p.nodes {
			if got := before[id] != after[id]; got != want[id] {
				t.Errorf("change of %v: node %s republished = %v, want %v", svcs, id, got, want[id])
			}
		}
		for i, s := range svcs {
			for id := range callers(s) {
				if !hasEndpoint(t, c, id, benchService(s), aps[i]) {
					t.Errorf("change of %v: caller %s of %s lacks the new endpoint %s", svcs, id, benchService(s), aps[i])
				}
			}
		}
	}
	t.Run("one service", func(t *testing.T) { change(t, 7) })
	t.Run("the hub", func(t *testing.T) { change(t, 0) })
	t.Run("two services", func(t *testing.T) { change(t, 0, 12) })
	p.dropAllEDS()
	p.renderAll(ctx)
	t.Run("after a full render", func(t *testing.T) { change(t, 20) })
}
