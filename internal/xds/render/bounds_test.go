package render

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// Numbers at the bounds of the specification's fields and of the integer
// types the xDS resources carry them in, and just past them.
type bounds struct{ at, past []int }

var (
	boundaryPorts   = bounds{[]int{1, 2, 65534, 65535}, []int{-1, 0, 65536, math.MaxInt32, 1 << 32, math.MaxInt64, math.MinInt64}}
	boundaryWeights = bounds{[]int{0, 1, 2, 1 << 31, math.MaxUint32 - 1, math.MaxUint32}, []int{-1, 1 << 32, 1<<32 + 1, 1 << 62, math.MaxInt64}}
	boundaryConfigs = [2][]string{{
		"certificate: {serviceLifetime: 1s}", "certificate: {proxyLifetime: 8760h}", "certificate: {serviceLifetime: 8760h, proxyLifetime: 1s}",
		"outbound: {vipRange: 10.0.0.0/8}", "outbound: {vipRange: 127.77.0.0/30}",
	}, {
		"certificate: {serviceLifetime: 999ms}", "certificate: {proxyLifetime: 8760h0m1s}", "certificate: {serviceLifetime: -1s}",
		"certificate: {serviceLifetime: 2562047h}", "outbound: {vipRange: 8.0.0.0/7}", "outbound: {vipRange: 127.77.0.0/31}",
		"outbound: {vipRange: 0.0.0.0/0}",
	}}
)

// pick returns a value at the bound two times in three, else one past it.
func (b bounds) pick(r *rand.Rand) int {
	if r.IntN(3) == 0 {
		return pick(r, b.past)
	}
	return pick(r, b.at)
}

// newBoundaryMesh is newRandomMesh with one or two numbers drawn from
// the boundary values: a port, target port, TrafficTarget or TCPRoute
// port, split weight, a split's total (just within or past MaxUint32) or a
// MeshConfig setting.
func newBoundaryMesh(r *rand.Rand) randomMesh {
	m := newRandomMesh(r)
	m.services = slices.Clone(m.services)
	m.targets = slices.Clone(m.targets)
	m.splits = append(slices.Clone(m.splits), newRandomSplit(r))
	for range 1 + r.IntN(2) {
		s := &m.services[r.IntN(len(m.services))]
		split := &m.splits[r.IntN(len(m.splits))]
		switch r.IntN(6) {
		case 0:
			m.config = pick(r, boundaryConfigs[min(r.IntN(3), 1)])
		case 1:
			p := boundaryPorts.pick(r)
			s.ports = append(slices.Clone(s.ports), p)
			s.protocols = map[int]string{p: pick(r, []string{"http", "grpc", "tcp"})}
			s.targetPorts = map[int]int{p: pick(r, []int{p, p - 1, 8000})}
		case 2:
			s.targetPorts = map[int]int{s.ports[0]: boundaryPorts.pick(r)}
		case 3:
			if len(m.targets) > 0 && r.IntN(2) == 0 {
				m.targets[r.IntN(len(m.targets))].port = boundaryPorts.pick(r)
			} else {
				m.tcpPorts = append(slices.Clone(m.tcpPorts), boundaryPorts.pick(r))
			}
		case 4:
			backends := maps.Clone(split.backends)
			backends[fmt.Sprintf("s%d", r.IntN(5))] = boundaryWeights.pick(r)
			split.backends = backends
		case 5: // one backend takes the total to, or just past, the bound
			backends := maps.Clone(split.backends)
			last := fmt.Sprintf("s%d", r.IntN(5))
			sum := 0
			for b, w := range backends {
				if b != last {
					sum += min(max(w, 0), math.MaxUint32)
				}
			}
			backends[last] = max(0, math.MaxUint32-sum+r.IntN(2))
			split.backends = backends
		}
	}
	return m
}

// renderChecked renders every resource of p and validates the set with vr,
// as the publisher does (sharing m.Memo between the proxies of one
// specification, so shared resources are walked once).
func renderChecked(m Mesh, p Proxy, vr *Validator) ([]proto.Message, error) {
	var all []proto.Message
	ls, err := Listeners(m, p)
	if err != nil {
		return nil, err
	}
	rs, err := Routes(m, p)
	if err != nil {
		return nil, err
	}
	cs, err := Clusters(m, p)
	if err != nil {
		return nil, err
	}
	es, err := LoadAssignments(m, p)
	if err != nil {
		return nil, err
	}
	all = slices.Concat(msgs(ls), msgs(rs), msgs(cs), msgs(es))
	if p.Flavor == Envoy {
		ss, err := Secrets(testCertPEM, testKeyPEM, testRootPEM)
		if err != nil {
			return nil, err
		}
		all = append(all, msgs(ss)...)
	}
	return all, vr.ValidateWith(m.Memo, all...)
}

// TestValidSpecificationsRender: every random specification, with numbers
// at and past every bound, that the specification accepts renders for
// every service and flavour into resources that pass Validate, and every
// split weight reaches the resources unchanged. Render must never be where
// bad input is found.
func TestValidSpecificationsRender(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	addr := netip.MustParseAddr("10.0.0.9")
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i := range 5 {
		eps[svcNamed(i)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: 8080}}
	}
	accepted, refused, extreme := 0, 0, 0
	for i := range 200 {
		rm := newBoundaryMesh(r)
		y := rm.yaml()
		snap := snapshotOf(t, y)
		if snap == nil {
			refused++
			continue
		}
		accepted++
		if strings.Contains(y, "6553") || strings.Contains(y, "429496729") || strings.Contains(y, "8760h") || strings.Contains(y, "/8}") || strings.Contains(y, "/30}") {
			extreme++
		}
		m := meshOf(snap, eps)
		m.Memo = NewMemo()
		vrs := [...]*Validator{Envoy: NewValidator(Envoy), GRPC: NewValidator(GRPC)}
		for s := range 5 {
			for _, f := range []Flavor{Envoy, GRPC} {
				p := Proxy{Service: svcNamed(s), Flavor: f, Address: addr}
				all, err := renderChecked(m, p, vrs[f])
				if err != nil {
					t.Fatalf("case %d: the specification accepted this, but the proxy of s%d (%s) does not render valid resources: %v\nspecification:\n%s", i, s, f, err, y)
				}
				checkSplitWeights(t, snap, all, f, fmt.Sprintf("case %d, proxy of s%d (%s)", i, s, f), y)
			}
		}
	}
	t.Logf("accepted %d random specifications (%d with numbers at a bound), refused %d", accepted, extreme, refused)
	if accepted < 50 || refused < 50 || extreme < 25 {
		t.Errorf("accepted %d (%d at a bound), refused %d: the generator no longer exercises both sides of the bounds", accepted, extreme, refused)
	}
}

// checkSplitWeights fails unless every weighted cluster in all carries the
// weight its TrafficSplit gives that backend.
func checkSplitWeights(t *testing.T, snap *spec.Snapshot, all []proto.Message, f Flavor, where, y string) {
	t.Helper()
	want := func(root, backend string) (int, bool) {
		sp, ok := snap.Split(svc(root))
		if !ok {
			return 0, false
		}
		for _, b := range sp.Backends {
			if b.Service.String() == backend {
				return b.Weight, true
			}
		}
		return 0, false
	}
	check := func(resource, cluster string, got uint32) {
		root := strings.Split(strings.TrimPrefix(resource, "outbound|default/"), "|")[0]
		backend := strings.TrimSuffix(cluster, "|grpc")
		w, ok := want(root, backend)
		if !ok || uint64(w) != uint64(got) {
			t.Fatalf("%s: %s sends weight %d to %s, but the TrafficSplit of %s gives it %d\nspecification:\n%s", where, resource, got, backend, root, w, y)
		}
	}
	for _, m := range all {
		if rc, ok := m.(*routev3.RouteConfiguration); ok {
			if strings.Contains(rc.GetName(), "|gw") {
				continue // Gateway API routes' weights: TestGatewayMatchAndFilterKinds and the conformance test
			}
			for _, vh := range rc.GetVirtualHosts() {
				for _, rt := range vh.GetRoutes() {
					for _, c := range rt.GetRoute().GetWeightedClusters().GetClusters() {
						check(rc.GetName(), c.GetName(), c.GetWeight().GetValue())
					}
				}
			}
		}
	}
	for _, m := range all {
		l, ok := m.(*listenerv3.Listener)
		if !ok {
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, fl := range fc.GetFilters() {
				var tp tcpproxyv3.TcpProxy
				if fl.GetName() != tcpProxyFilter || fl.GetTypedConfig().UnmarshalTo(&tp) != nil {
					continue
				}
				for _, c := range tp.GetWeightedClusters().GetClusters() {
					check(l.GetName(), c.GetName(), c.GetWeight())
				}
			}
		}
	}
}
