package catalog

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// SpecSource is the mesh specification the model reads (the participant
// rule, and what it passes on in each View).
type SpecSource interface {
	Snapshot() *spec.Snapshot
	Subscribe() (notify <-chan struct{}, cancel func())
}

// Model is the mesh model: it joins the specification, the discovered
// endpoints (the Catalog), the connected proxies (told by the xDS server)
// and the startup grace into one immutable View, and publishes a new one
// when any of them changes what a proxy receives.
//
// The participant rule lives here. A service's participant endpoints, the
// ones sent to other proxies, are its discovered endpoints; with the
// specification's endpoints.requireConnectedProxy, only those with a proxy
// of the service connected from that address (participants = issued proxy
// certificates ∩ connected proxies ∩ discovered endpoints: a connected
// proxy holds a certificate). For the startup grace after Run starts an
// address with no proxy connected from it counts as connected for every
// service discovered on it, because after a server restart the proxies
// reconnect one by one and a caller that reconnects first must not be told
// that its upstreams are gone. Once a proxy connects from an address, the
// machine there has said which service it is (a machine has one identity),
// so the address participates only for that service, grace or not: a
// TrafficSplit's root whose machines enrolled as its backends is empty as
// soon as they are connected, not only when the grace ends.
//
// Proxy connects arrive in bursts (a reconnect storm after a restart): they
// are queued and applied together, so a burst makes one View, which lists
// only the services whose participants changed.
//
// With several replicas sharing a store a proxy is connected to one of
// them: the others learn of it through SetRemotePresence (each replica's
// connected set, shared through the store by internal/presence), and the
// rule counts a (service, address) as connected when any replica has it.
type Model struct {
	cat         *Catalog
	spec        SpecSource
	trustDomain string
	grace       time.Duration

	mu      sync.Mutex
	pending []presence
	remote  map[string]map[presence]struct{} // each other replica's connected set
	current *View
	subs    map[chan struct{}]struct{}
	wake    chan struct{}

	// Owned by Update (under updateMu).
	updateMu   sync.Mutex
	catSnap    *Snapshot
	connected  map[mesh.MeshService]map[netip.Addr]int // proxies connected from each address (another replica's count as one)
	machines   map[netip.Addr]int                      // the same, of any service
	egressGWs  map[mesh.MeshService][]mesh.Endpoint    // what publishEgressGateways last put in the catalog
	egressSpec *spec.Snapshot                          // the snapshot egressList is of
	egressList []spec.EgressGatewayInfo
	inGrace    bool
}

type presence struct {
	svc       mesh.MeshService
	addr      netip.Addr
	connected bool
}

// NewModel returns a model over the catalog and the specification whose
// views carry trustDomain; for grace (0 for none) after Run starts every
// discovered endpoint on an address no proxy is connected from
// participates (see [Model]). Its first View is ready at once.
func NewModel(cat *Catalog, sp SpecSource, trustDomain string, grace time.Duration) *Model {
	m := &Model{
		cat: cat, spec: sp, trustDomain: trustDomain, grace: grace,
		subs:      map[chan struct{}]struct{}{},
		remote:    map[string]map[presence]struct{}{},
		wake:      make(chan struct{}, 1),
		connected: map[mesh.MeshService]map[netip.Addr]int{},
		machines:  map[netip.Addr]int{},
		inGrace:   grace > 0,
		current:   &View{historyFrom: 1},
	}
	m.Update()
	return m
}

// View returns the current view.
func (m *Model) View() *View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

// Subscribe returns a channel that receives a value whenever a new View is
// published. Notifications coalesce: a slow reader sees one signal for many
// views, reads the latest View and asks it what Changed since the one it
// used. Call cancel when done.
func (m *Model) Subscribe() (notify <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	return ch, func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}
}

// ProxyConnected records that a proxy of svc connected from addr (the xDS
// server calls it once per connected proxy, and ProxyDisconnected once
// when it leaves).
func (m *Model) ProxyConnected(svc mesh.MeshService, addr netip.Addr) {
	m.enqueue(presence{svc, addr, true})
}

// ProxyDisconnected records that a proxy of svc connected from addr left.
func (m *Model) ProxyDisconnected(svc mesh.MeshService, addr netip.Addr) {
	m.enqueue(presence{svc, addr, false})
}

// SetRemotePresence replaces what another replica sharing the store has
// connected: for each service, the addresses a proxy of it is connected
// from there (nil: nothing, as when the replica's record is gone). The
// participant rule counts an address as connected for a service when this
// replica or any other has it; only the services whose participants change
// are recomputed, as for a local connect.
func (m *Model) SetRemotePresence(replica string, set map[mesh.MeshService][]netip.Addr) {
	next := map[presence]struct{}{}
	for svc, addrs := range set {
		for _, a := range addrs {
			next[presence{svc, a, true}] = struct{}{}
		}
	}
	m.mu.Lock()
	prev := m.remote[replica]
	for p := range prev {
		if _, ok := next[p]; !ok {
			m.pending = append(m.pending, presence{p.svc, p.addr, false})
		}
	}
	for p := range next {
		if _, ok := prev[p]; !ok {
			m.pending = append(m.pending, p)
		}
	}
	if len(next) == 0 {
		delete(m.remote, replica)
	} else {
		m.remote[replica] = next
	}
	m.mu.Unlock()
	m.signal()
}

func (m *Model) enqueue(p presence) {
	m.mu.Lock()
	m.pending = append(m.pending, p)
	m.mu.Unlock()
	m.signal()
}

func (m *Model) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run publishes views until ctx is done. Bursts coalesce: each pass applies
// everything that changed since the previous one.
func (m *Model) Run(ctx context.Context) error {
	specCh, cancelSpec := m.spec.Subscribe()
	defer cancelSpec()
	catCh, cancelCat := m.cat.Subscribe()
	defer cancelCat()
	var graceOver <-chan time.Time
	if m.inGrace {
		t := time.NewTimer(m.grace)
		defer t.Stop()
		graceOver = t.C
	}
	m.Update() // what changed before the subscriptions
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-graceOver:
			// From now on only connected proxies' endpoints participate,
			// also on addresses no proxy has connected from.
			m.updateMu.Lock()
			m.inGrace = false
			m.updateMu.Unlock()
		case <-specCh:
		case <-catCh:
		case <-m.wake:
		}
		m.Update()
	}
}

// Update publishes the next view now if anything a proxy receives changed
// (Run calls it on every change; tests and benchmarks may call it to
// publish without waiting for Run).
func (m *Model) Update() {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	m.mu.Lock()
	events := m.pending
	m.pending = nil
	cur := m.current
	m.mu.Unlock()

	sp := m.spec.Snapshot()
	all := !sp.RequireConnectedProxy()
	grace := !all && m.inGrace
	var touched []mesh.MeshService
	var machines map[netip.Addr]bool // addresses whose first proxy came or last left
	for _, e := range events {
		svcChanged, machineChanged := m.apply(e)
		if svcChanged && !all {
			touched = append(touched, e.svc)
		}
		if machineChanged && grace {
			if machines == nil {
				machines = map[netip.Addr]bool{}
			}
			machines[e.addr] = true
		}
	}
	m.publishEgressGateways(sp)
	if cat := m.cat.Snapshot(); cat != m.catSnap {
		touched = append(touched, cat.Changed(m.catSnap)...)
		m.catSnap = cat
	}
	if len(machines) > 0 && !(grace != cur.grace || all != cur.all || cur.cat == nil) {
		// In the grace such an address stops (or starts again) standing
		// in for every service discovered on it.
		for svc, se := range m.catSnap.services {
			for _, e := range se.Endpoints {
				if machines[e.IP] {
					touched = append(touched, svc)
					break
				}
			}
		}
	}

	version := cur.version + 1
	next := &View{
		version: version, spec: sp, trustDomain: m.trustDomain, all: all, grace: grace, allSince: cur.allSince,
		cat: m.catSnap, services: cur.services, history: cur.history, historyFrom: cur.historyFrom,
	}
	switch {
	case all != cur.all || grace != cur.grace || cur.cat == nil:
		// The rule (or the grace) changed: every service is recomputed.
		next.services = nil
		if !all {
			next.services = make(map[mesh.MeshService]*participants, m.catSnap.Len())
			for svc, se := range m.catSnap.services {
				next.services[svc] = &participants{version: version, endpoints: m.participants(se, all, grace)}
			}
		}
		next.allSince, next.history, next.historyFrom = version, nil, version+1
	case all:
		// Every discovered endpoint participates: the catalog's snapshot
		// is shared as it is, and its changes are the view's.
		if len(touched) == 0 && sp == cur.spec {
			return
		}
		if len(touched) > 0 {
			slices.SortFunc(touched, mesh.MeshService.Compare)
			next.history, next.historyFrom = appendHistory(cur.history, cur.historyFrom, delta{version, slices.Compact(touched)})
		}
	default:
		var changed []mesh.MeshService
		var services map[mesh.MeshService]*participants
		for _, svc := range touched {
			prev := cur.services[svc]
			se, known := m.catSnap.Endpoints(svc)
			var eps []mesh.Endpoint
			if known {
				eps = m.participants(se, all, grace)
				if prev != nil && slices.EqualFunc(prev.endpoints, eps, endpointEqual) {
					continue
				}
			} else if prev == nil {
				continue
			}
			if services == nil {
				services = maps.Clone(cur.services)
			}
			if known {
				services[svc] = &participants{version: version, endpoints: eps}
			} else {
				delete(services, svc)
			}
			changed = append(changed, svc)
		}
		if len(changed) == 0 && sp == cur.spec {
			return
		}
		if len(changed) > 0 {
			next.services = services
			slices.SortFunc(changed, mesh.MeshService.Compare)
			next.history, next.historyFrom = appendHistory(cur.history, cur.historyFrom, delta{version, slices.Compact(changed)})
		}
	}
	m.mu.Lock()
	m.current = next
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
}

// appendHistory returns the history with d added, the oldest dropped
// beyond maxHistory, and the first version it then covers.
func appendHistory(h []delta, from uint64, d delta) ([]delta, uint64) {
	if len(h) < maxHistory {
		return append(slices.Clip(h), d), from
	}
	out := make([]delta, 0, maxHistory)
	out = append(out, h[len(h)-maxHistory+1:]...)
	return append(out, d), h[len(h)-maxHistory].version + 1
}

// apply records a connect or disconnect; it reports whether svc now has a
// proxy connected from the address where it had none, or the reverse, and
// whether the address now has a proxy of any service where it had none, or
// the reverse.
func (m *Model) apply(e presence) (svcChanged, machineChanged bool) {
	n := m.machines[e.addr]
	if e.connected {
		m.machines[e.addr] = n + 1
	} else if n <= 1 {
		delete(m.machines, e.addr)
	} else {
		m.machines[e.addr] = n - 1
	}
	machineChanged = (n > 0) != (m.machines[e.addr] > 0)
	addrs := m.connected[e.svc]
	if addrs == nil {
		addrs = map[netip.Addr]int{}
		m.connected[e.svc] = addrs
	}
	before := addrs[e.addr] > 0
	if e.connected {
		addrs[e.addr]++
	} else {
		addrs[e.addr]--
	}
	after := addrs[e.addr] > 0
	if addrs[e.addr] == 0 {
		delete(addrs, e.addr)
		if len(addrs) == 0 {
			delete(m.connected, e.svc)
		}
	}
	return before != after, machineChanged
}

// participants applies the participant rule to a service's discovered
// endpoints: all of them, or only those a proxy of the service is
// connected from, and in the grace also those no proxy is connected from.
func (m *Model) participants(se *ServiceEndpoints, all, grace bool) []mesh.Endpoint {
	if all {
		return se.Endpoints
	}
	addrs := m.connected[se.Service]
	var out []mesh.Endpoint
	for _, e := range se.Endpoints {
		if addrs[e.IP] > 0 || grace && m.machines[e.IP] == 0 {
			out = append(out, e)
		}
	}
	return out
}
