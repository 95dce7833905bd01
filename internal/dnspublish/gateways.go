package dnspublish

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// GatewaySource publishes ingress gateways: each precise host name a
// Gateway serves (its listeners' and its attached routes' host names,
// gateway.Info.HostNames) gets the addresses of the gateway machines
// connected as that Gateway (their advertise addresses, on which their
// Envoys listen). So records follow the gateways: a machine that connects
// adds its address, one that leaves takes it away, and a name no Gateway
// serves any more is removed.
//
// It learns the gateway machines as the xDS server's Presence (a proxy of
// service ns/name connected from an address; the names of Gateways are
// the services of their machines) and the Gateways from the model's views.
type GatewaySource struct {
	views Views

	mu        sync.Mutex
	connected map[mesh.MeshService]map[netip.Addr]int
	subs      map[chan struct{}]struct{}
}

// NewGatewaySource returns a source reading Gateways from views.
func NewGatewaySource(views Views) *GatewaySource {
	return &GatewaySource{views: views, connected: map[mesh.MeshService]map[netip.Addr]int{}, subs: map[chan struct{}]struct{}{}}
}

// ProxyConnected records a proxy of svc connected from addr.
func (g *GatewaySource) ProxyConnected(svc mesh.MeshService, addr netip.Addr) {
	g.presence(svc, addr, 1)
}

// ProxyDisconnected records that a proxy of svc connected from addr left.
func (g *GatewaySource) ProxyDisconnected(svc mesh.MeshService, addr netip.Addr) {
	g.presence(svc, addr, -1)
}

// presence counts a proxy of svc at addr coming (delta 1) or going (-1).
// Every service's machines are counted, since a Gateway may be added for
// one already connected; the publisher is signalled only when a Gateway's
// machine comes or goes, not at each proxy's connection (a Gateway added
// later is signalled by its view).
func (g *GatewaySource) presence(svc mesh.MeshService, addr netip.Addr, delta int) {
	g.mu.Lock()
	addrs := g.connected[svc]
	if addrs == nil {
		addrs = map[netip.Addr]int{}
		g.connected[svc] = addrs
	}
	before := addrs[addr] > 0
	addrs[addr] += delta
	after := addrs[addr] > 0
	if addrs[addr] <= 0 {
		delete(addrs, addr)
		if len(addrs) == 0 {
			delete(g.connected, svc)
		}
	}
	// Without a subscriber (no DNS publishing) the view is not read: a
	// Gateway lookup builds the snapshot's Gateways on a proxy's join.
	listened := len(g.subs) > 0
	g.mu.Unlock()
	// Read after the count: a view that makes svc a Gateway and comes
	// meanwhile is signalled by the view, and its Names see this machine.
	if before == after || !listened || !g.isGateway(svc) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for ch := range g.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// isGateway says whether svc is a Gateway in the current view.
func (g *GatewaySource) isGateway(svc mesh.MeshService) bool {
	v := g.views.View()
	if v == nil || v.Spec() == nil {
		return false
	}
	_, ok := v.Spec().Gateway(svc)
	return ok
}

// Names returns each Gateway's host names with its connected machines'
// addresses (sorted).
func (g *GatewaySource) Names() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	v := g.views.View()
	if v == nil || v.Spec() == nil {
		return out
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gw := range v.Spec().Gateways() {
		var addrs []netip.Addr
		for a := range g.connected[gw.Gateway] {
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			continue
		}
		slices.SortFunc(addrs, netip.Addr.Compare)
		for _, n := range gw.HostNames() {
			out[n] = append(out[n], addrs...)
		}
	}
	return out
}

// Subscribe signals, coalescing, when a gateway machine comes or goes or
// the model publishes a view (a Gateway or route may have changed).
func (g *GatewaySource) Subscribe() (<-chan struct{}, func()) {
	return merged{presenceSignal{g}, ViewSource{Views: g.views}}.Subscribe()
}

// presenceSignal is the Source whose signal is a gateway machine's coming
// or going (its names are GatewaySource's).
type presenceSignal struct{ g *GatewaySource }

func (p presenceSignal) Names() map[string][]netip.Addr { return nil }

func (p presenceSignal) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.g.mu.Lock()
	p.g.subs[ch] = struct{}{}
	p.g.mu.Unlock()
	return ch, func() {
		p.g.mu.Lock()
		delete(p.g.subs, ch)
		p.g.mu.Unlock()
	}
}
