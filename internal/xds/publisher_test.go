package xds

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
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
		p.step(ctx)
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
	p.eds.DropAll()
	p.renderAll(ctx)
	t.Run("after a full render", func(t *testing.T) { change(t, 20) })
}

// specWith returns the snapshot of W with extra documents added.
func specWith(t *testing.T, services int, extra string) *spec.Snapshot {
	t.Helper()
	return snapshotOf(t, workloadYAML(services)+extra)
}

// extraTarget lets svc-<src> call svc-<dst> besides W's policy.
func extraTarget(src, dst int) string {
	return fmt.Sprintf("---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: extra, namespace: bench}\nspec:\n  destination: {kind: ServiceAccount, name: svc-%05d, namespace: bench}\n  rules: [{kind: HTTPRouteGroup, name: all}]\n  sources: [{kind: ServiceAccount, name: svc-%05d, namespace: bench}]\n", dst, src)
}

// TestSpecificationChangeKeepsUnchangedResources: after a specification
// change, every resource that renders to the same bytes keeps its
// Resource (nothing new to validate or send), changed ones are new, and
// what is no longer rendered is forgotten by the publisher and the
// validators.
func TestSpecificationChangeKeepsUnchangedResources(t *testing.T) {
	const services = 30
	p, _, c := benchPublisher(t, services, 3)
	ctx := context.Background()
	type key struct{ node, typeURL, name string }
	published := func() map[key]*cache.Resource {
		out := map[key]*cache.Resource{}
		for id := range p.nodes {
			for typeURL, set := range c.View(id) {
				for _, r := range set.Resources() {
					out[key{id, typeURL, r.Name()}] = r
				}
			}
		}
		return out
	}
	nodeOf := map[int]string{}
	for id, n := range p.nodes {
		var i int
		fmt.Sscanf(n.proxy.Service.Name, "svc-%05d", &i)
		nodeOf[i] = id
	}
	sizes := func() [3]int {
		return [3]int{p.interned.Len(), p.validators[render.Envoy].Len(), p.validators[render.GRPC].Len()}
	}
	first, firstSizes := published(), sizes()

	// svc-00020 may now call svc-00010 (called by 6..9 already) and
	// svc-00001 (called by nobody).
	p.setSpec(ctx, specWith(t, services, extraTarget(20, 10)+strings.Replace(extraTarget(20, 1), "name: extra,", "name: extra-1,", 1)))
	second := published()
	kept, changed := 0, 0
	for k, r := range second {
		old, ok := first[k]
		switch {
		case !ok:
		case old.Version() != r.Version():
			changed++
		case render.PerProxy(r.Name()):
			// Rendered per proxy, not interned (the cache still sends
			// nothing for an unchanged version).
		case old != r:
			t.Errorf("%v: same content %s, but a new Resource", k, r.Version())
		default:
			kept++
		}
	}
	if kept < len(first)/2 {
		t.Errorf("%d of %d resources kept their Resource, want most", kept, len(first))
	}
	// The new caller receives the cluster other callers of svc-00010 have:
	// one Resource.
	cluster := "bench/svc-00010"
	got, want := second[key{nodeOf[20], resource.ClusterType, cluster}], second[key{nodeOf[9], resource.ClusterType, cluster}]
	if got == nil || got != want {
		t.Errorf("cluster %s of svc-00020's proxy = %p, want svc-00009's %p", cluster, got, want)
	}
	if changed == 0 {
		t.Error("no resource changed: svc-00010's inbound policy should have")
	}
	if second[key{nodeOf[20], resource.ClusterType, "bench/svc-00001"}] == nil {
		t.Error("svc-00020's proxy has no cluster bench/svc-00001")
	}

	// And back: the extra upstream is forgotten, nothing piles up.
	p.setSpec(ctx, specWith(t, services, ""))
	for _, cl := range []string{cluster, "bench/svc-00001"} {
		if _, ok := published()[key{nodeOf[20], resource.ClusterType, cl}]; ok {
			t.Errorf("svc-00020's proxy still has cluster %s", cl)
		}
	}
	if got := sizes(); got != firstSizes {
		t.Errorf("interned, Envoy and gRPC validator memo sizes = %v after a change and back, want %v as before", got, firstSizes)
	}
}

// TestIncrementalSpecificationChangesMatchAFreshPublisher applies a series
// of specification changes to one publisher, which re-renders only the
// groups whose inputs changed, and after each compares what every proxy
// was sent with what a fresh publisher sends for the same specification.
func TestIncrementalSpecificationChangesMatchAFreshPublisher(t *testing.T) {
	const services = 30
	w := workloadYAML(services)
	svc3 := "metadata: {name: svc-00003, namespace: bench}\nspec: {ports: [{port: 8080, appProtocol: http}]}"
	if !strings.Contains(w, svc3) || !strings.Contains(w, "requireConnectedProxy: false") {
		t.Fatal("workloadYAML changed: update the edits below")
	}
	split := "---\napiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split, namespace: bench}\nspec: {service: svc-00002, backends: [{service: svc-00003, weight: 50}, {service: svc-00004, weight: 50}]}\n"
	steps := []struct{ name, yaml string }{
		{"a new caller", w + extraTarget(20, 10)},
		{"a caller of an uncalled service", w + extraTarget(20, 1)},
		{"a port added", strings.Replace(w, svc3, "metadata: {name: svc-00003, namespace: bench}\nspec: {ports: [{port: 8080, appProtocol: http}, {port: 9090, appProtocol: tcp}]}", 1)},
		{"a traffic split", w + split},
		{"permissive", strings.Replace(w, "spec: {endpoints:", "spec: {traffic: {permissive: true}, endpoints:", 1)},
		{"the participant rule", strings.Replace(w, "requireConnectedProxy: false", "requireConnectedProxy: true", 1)},
		{"back to W", w},
	}
	p, _, c := benchPublisher(t, services, 3)
	ctx := context.Background()
	sizes := func() [5]int {
		return [5]int{p.interned.Len(), p.interned.Held(), p.eds.Len(), p.validators[render.Envoy].Len(), p.validators[render.GRPC].Len()}
	}
	before := sizes()
	for _, step := range steps {
		p.setSpec(ctx, snapshotOf(t, step.yaml))
		fresh, _, fc := publisherOver(t, services, 3, step.yaml)
		if len(fresh.nodes) != len(p.nodes) {
			t.Fatalf("%s: %d nodes, fresh publisher %d", step.name, len(p.nodes), len(fresh.nodes))
		}
		for id := range fresh.nodes {
			got, want := c.View(id), fc.View(id)
			for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
				if got[typeURL].Version() != want[typeURL].Version() {
					t.Errorf("%s: node %s type %s: version %s, a fresh publisher's %s", step.name, id, typeURL, got[typeURL].Version(), want[typeURL].Version())
				}
			}
			if p.RenderError(id) != fresh.RenderError(id) {
				t.Errorf("%s: node %s: render error %q, a fresh publisher's %q", step.name, id, p.RenderError(id), fresh.RenderError(id))
			}
		}
	}
	if got := sizes(); got != before {
		t.Errorf("interned, held, EDS slots, validator memos = %v after the changes and back, want %v as before", got, before)
	}
}

// Endpoint changes, one service or several at a time, leave every proxy
// with the load assignments a publisher rendering everything afresh gives
// (groups' EDS sets are updated in place, not rebuilt).
func TestEndpointChangesMatchAFreshPublisher(t *testing.T) {
	const services = 30
	p, cat, c := benchPublisher(t, services, 3)
	fresh, freshCat, fc := benchPublisher(t, services, 3)
	ctx := context.Background()
	endpoints := map[mesh.MeshService][]mesh.Endpoint{}
	for i := range services {
		for e := range 3 {
			endpoints[benchService(i)] = append(endpoints[benchService(i)], mesh.Endpoint{IP: netip.AddrFrom4([4]byte{10, 0, byte(i), byte(e + 1)}), Port: 8080})
		}
	}
	move := func(i, port int) {
		eps := slices.Clone(endpoints[benchService(i)])
		eps[0].Port = uint16(port)
		endpoints[benchService(i)] = eps
		cat.SetEndpoints("bench", benchService(i), eps)
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"the hub", func() { move(0, 9001) }},
		{"the hub again", func() { move(0, 9002) }},
		{"a neighbour", func() { move(7, 9003) }},
		{"two services at once", func() { move(0, 9004); move(8, 9005) }},
		{"a service emptied", func() { endpoints[benchService(9)] = nil; cat.SetEndpoints("bench", benchService(9), nil) }},
		{"the hub back", func() { move(0, 8080) }},
	}
	for _, step := range steps {
		step.do()
		p.step(ctx)
		freshCat.ReplaceProvider("bench", endpoints)
		fresh.testViews().Update()
		fresh.view = fresh.views.View()
		fresh.renderAll(ctx)
		for id := range fresh.nodes {
			got, want := c.View(id)[resource.EndpointType], fc.View(id)[resource.EndpointType]
			if got.Version() != want.Version() || got.Len() != want.Len() {
				t.Errorf("%s: node %s: EDS version %s (%d), a fresh publisher's %s (%d)", step.name, id, got.Version(), got.Len(), want.Version(), want.Len())
			}
		}
	}
}

// snapshotOf applies y to a fresh specification.
func snapshotOf(t *testing.T, y string) *spec.Snapshot {
	t.Helper()
	return specOver(t, store.NewMemory(), y).Snapshot()
}

// TestJoinRebuildsEndpointsOnlyWhenTheyCanChange: a proxy joining changes
// its service's load assignment only under the participant rule and at an
// address the service has an endpoint on; otherwise the join renders its
// own listener and nothing else.
func TestJoinRebuildsEndpointsOnlyWhenTheyCanChange(t *testing.T) {
	const services = 30
	ctx := context.Background()
	join := func(p *Publisher, i int, addr netip.Addr) {
		svc := benchService(i)
		p.connect(Proxy{NodeID: fmt.Sprintf("%08x-0000-4000-8000-0000000000ff.%s.bench", i, svc.Name), Service: svc, Flavor: render.Envoy, Address: addr})
		p.step(ctx)
	}
	endpointOf7 := netip.AddrFrom4([4]byte{10, 0, 7, 1}) // W's first endpoint of svc-00007
	caller := func(p *Publisher) string {                // svc-00006 calls svc-00007
		for id, n := range p.nodes {
			if n.proxy.Service == benchService(6) {
				return id
			}
		}
		t.Fatal("no proxy of svc-00006")
		return ""
	}

	p, _, c := benchPublisher(t, services, 3) // requireConnectedProxy: false
	before := c.Stats().Marshals
	join(p, 7, endpointOf7)
	if got := c.Stats().Marshals - before; got != 1 {
		t.Errorf("without the participant rule a join made %d marshals, want 1 (its inbound listener)", got)
	}

	w := strings.Replace(workloadYAML(services), "requireConnectedProxy: false", "requireConnectedProxy: true", 1)
	p, _, c = publisherOver(t, services, 3, w)
	ap := netip.AddrPortFrom(endpointOf7, 8080)
	if hasEndpoint(t, c, caller(p), benchService(7), ap) {
		t.Fatalf("%s is sent before a proxy of svc-00007 connected from it", ap)
	}
	before = c.Stats().Marshals
	join(p, 7, netip.AddrFrom4([4]byte{10, 253, 0, 7}))
	if got := c.Stats().Marshals - before; got != 1 {
		t.Errorf("a join from an address without an endpoint made %d marshals, want 1", got)
	}
	join(p, 7, endpointOf7)
	if !hasEndpoint(t, c, caller(p), benchService(7), ap) {
		t.Errorf("%s is not sent to svc-00006 after a proxy of svc-00007 connected from it", ap)
	}
}

// TestSplitRootEmptinessReRendersCallers: when a TrafficSplit's root loses
// its last endpoint (or a backend does), its callers' routes change
// without a specification change (see render's Policy): the publisher
// renders them again, and every proxy ends with what a publisher rendering
// everything afresh gives, in every resource type; and back again.
func TestSplitRootEmptinessReRendersCallers(t *testing.T) {
	const services = 6
	split := "---\napiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split, namespace: bench}\nspec:\n  service: svc-00005\n  matches: [{kind: HTTPRouteGroup, name: all}]\n  backends: [{service: svc-00003, weight: 50}, {service: svc-00004, weight: 50}]\n"
	y := workloadYAML(services) + split
	p, cat, c := publisherOver(t, services, 2, y)
	fresh, freshCat, fc := publisherOver(t, services, 2, y)
	ctx := context.Background()
	root, backend := benchService(5), benchService(4)
	endpoints := map[mesh.MeshService][]mesh.Endpoint{}
	for _, s := range []mesh.MeshService{root, backend} {
		se, _ := cat.Snapshot().Endpoints(s)
		endpoints[s] = se.Endpoints
	}
	caller := ""
	for id, n := range p.nodes {
		if n.proxy.Service == benchService(1) {
			caller = id
		}
	}
	rootRoute := "outbound|bench/svc-00005|8080"
	routesToRoot := func() string {
		r := c.View(caller)[resource.RouteType].Get(rootRoute)
		if r == nil {
			t.Fatalf("node %s has no route configuration %s", caller, rootRoute)
		}
		var out []string
		for _, rt := range r.Message().(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes() {
			if cl := rt.GetRoute().GetCluster(); cl != "" {
				out = append(out, cl)
			}
			for _, w := range rt.GetRoute().GetWeightedClusters().GetClusters() {
				out = append(out, fmt.Sprintf("%s:%d", w.GetName(), w.GetWeight().GetValue()))
			}
		}
		return strings.Join(out, " ")
	}
	steps := []struct {
		name, want string
		set        map[mesh.MeshService][]mesh.Endpoint
	}{
		{"the root loses its endpoints", "bench/svc-00003:50 bench/svc-00004:50", map[mesh.MeshService][]mesh.Endpoint{root: nil}},
		{"a backend loses its endpoints too", "bench/svc-00003:50", map[mesh.MeshService][]mesh.Endpoint{backend: nil}},
		{"both come back", "bench/svc-00003:50 bench/svc-00004:50 bench/svc-00005", map[mesh.MeshService][]mesh.Endpoint{root: endpoints[root], backend: endpoints[backend]}},
	}
	if got, want := routesToRoot(), steps[2].want; got != want {
		t.Fatalf("before: svc-00001's routes to the root: %s, want %s", got, want)
	}
	current := map[mesh.MeshService][]mesh.Endpoint{}
	for _, s := range cat.Snapshot().Services() {
		se, _ := cat.Snapshot().Endpoints(s)
		current[s] = se.Endpoints
	}
	for _, step := range steps {
		for s, eps := range step.set {
			cat.SetEndpoints("bench", s, eps)
			current[s] = eps
		}
		p.step(ctx)
		if got := routesToRoot(); got != step.want {
			t.Errorf("%s: svc-00001's routes to the root: %s, want %s", step.name, got, step.want)
		}
		freshCat.ReplaceProvider("bench", current)
		fresh.testViews().Update()
		fresh.view = fresh.views.View()
		fresh.renderAll(ctx)
		for id := range fresh.nodes {
			for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
				got, want := c.View(id)[typ], fc.View(id)[typ]
				if got.Version() != want.Version() || got.Len() != want.Len() {
					t.Errorf("%s: node %s: %s version %s (%d), a fresh publisher's %s (%d)", step.name, id, typ, got.Version(), got.Len(), want.Version(), want.Len())
				}
			}
		}
	}
}

// TestRejoinReusesItsGroupUntilTheSpecificationChanges: the only proxy of
// a service leaves and comes back (a reconnect storm): it is given its
// group's resources as they were, without rendering them again, with the
// endpoints that changed meanwhile; after a specification change the
// group is rendered afresh.
func TestRejoinReusesItsGroupUntilTheSpecificationChanges(t *testing.T) {
	const services = 30
	p, cat, c := benchPublisher(t, services, 3)
	ctx := context.Background()
	svc := benchService(20)
	px := Proxy{NodeID: fmt.Sprintf("%08x-0000-4000-8000-000000000000.%s.bench", 20, svc.Name), Service: svc, Flavor: render.Envoy, Address: netip.AddrFrom4([4]byte{10, 254, 0, 20})}
	if p.nodes[px.NodeID] == nil {
		t.Fatalf("no node %s in the bench publisher", px.NodeID)
	}
	cds := c.View(px.NodeID)[resource.ClusterType]
	k := groupKey{svc, render.Envoy}

	// Leave and come back: the same CDS set, and the group kept meanwhile.
	p.disconnect(px)
	p.step(ctx)
	if p.idle[k] == nil || p.groups[k] != nil {
		t.Fatalf("after the last proxy left: idle group %v, live group %v; want it idle", p.idle[k] != nil, p.groups[k] != nil)
	}
	p.connect(px)
	p.step(ctx)
	if got := c.View(px.NodeID)[resource.ClusterType]; got != cds {
		t.Errorf("CDS after a rejoin = %p (%s), want the group's set kept %p (%s)", got, got.Version(), cds, cds.Version())
	}
	if p.idle[k] != nil {
		t.Error("the group is still idle after its proxy rejoined")
	}

	// An upstream's endpoints change while the group is idle: the rejoined
	// proxy has the new ones.
	p.disconnect(px)
	p.step(ctx)
	moved := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 252, 0, 21}), 8080)
	cat.SetEndpoints("bench", benchService(21), []mesh.Endpoint{{IP: moved.Addr(), Port: moved.Port()}})
	p.step(ctx)
	p.connect(px)
	p.step(ctx)
	if !hasEndpoint(t, c, px.NodeID, benchService(21), moved) {
		t.Errorf("after a rejoin, svc-00021's load assignment lacks %s, set while the group was idle", moved)
	}

	// A specification change while idle: the group is rendered afresh.
	p.disconnect(px)
	p.step(ctx)
	p.setSpec(ctx, specWith(t, services, extraTarget(20, 10)))
	if len(p.idle) != 0 {
		t.Errorf("%d idle groups after a specification change, want none", len(p.idle))
	}
	p.connect(px)
	p.step(ctx)
	if c.View(px.NodeID)[resource.ClusterType].Get("bench/svc-00010") == nil {
		t.Error("after a specification change while idle, the rejoined proxy lacks cluster bench/svc-00010")
	}
	if err := p.RenderError(px.NodeID); err != "" {
		t.Errorf("render error: %s", err)
	}
}

// TestJoiningEnvoyGetsItsGroupsClustersAtOnce: an Envoy joining a rendered
// group has the group's CDS set in the cache when ProxyConnected returns,
// before any pass (its listeners and the rest follow in the pass that
// takes the join); after a specification change it is the new set; a
// group with no rendered resources, and a gRPC proxy, get nothing before
// their pass.
func TestJoiningEnvoyGetsItsGroupsClustersAtOnce(t *testing.T) {
	const services = 30
	p, _, c := benchPublisher(t, services, 3)
	ctx := context.Background()
	svc := benchService(20)
	member := fmt.Sprintf("%08x-0000-4000-8000-000000000000.%s.bench", 20, svc.Name)
	joiner := func(i int, f render.Flavor) Proxy {
		id := fmt.Sprintf("%08x-0000-4000-8000-00000000000%d.%s.bench", 20, i, svc.Name)
		if f == render.GRPC {
			id += "~grpc"
		}
		return Proxy{NodeID: id, Service: svc, Flavor: f, Address: netip.AddrFrom4([4]byte{10, 254, 1, byte(i)})}
	}
	groupCDS := c.View(member)[resource.ClusterType]
	if groupCDS == nil {
		t.Fatalf("the group's member %s has no CDS", member)
	}

	px := joiner(1, render.Envoy)
	p.connect(px)
	view := c.View(px.NodeID)
	if view[resource.ClusterType] != groupCDS {
		t.Fatalf("CDS when ProxyConnected returned = %v, want the group's set %s", view[resource.ClusterType], groupCDS.Version())
	}
	if view[resource.ListenerType] != nil {
		t.Fatal("listeners published before the pass that takes the join")
	}
	p.step(ctx)
	view = c.View(px.NodeID)
	if view[resource.ClusterType] != groupCDS || view[resource.ListenerType] == nil || view[resource.EndpointType] == nil {
		t.Fatalf("after the pass: CDS %v (want the group's), LDS %v, EDS %v", view[resource.ClusterType], view[resource.ListenerType], view[resource.EndpointType])
	}

	// gRPC proxies take listeners first, and may be refused names their
	// clusters depend on: nothing before their pass.
	g := joiner(2, render.GRPC)
	p.connect(g)
	if got := c.View(g.NodeID); len(got) != 0 {
		t.Errorf("gRPC proxy: %d types published before its pass, want none", len(got))
	}
	p.step(ctx)

	// A specification change re-renders the group: the next joiner gets
	// the new clusters at once.
	p.setSpec(ctx, specWith(t, services, extraTarget(20, 10)))
	newCDS := c.View(member)[resource.ClusterType]
	if newCDS == groupCDS || newCDS.Get("bench/svc-00010") == nil {
		t.Fatalf("after the change the member's CDS %s lacks bench/svc-00010", newCDS.Version())
	}
	px3 := joiner(3, render.Envoy)
	p.connect(px3)
	if got := c.View(px3.NodeID)[resource.ClusterType]; got != newCDS {
		t.Errorf("CDS at once after the change = %v, want the group's new set %s", got, newCDS.Version())
	}
	p.step(ctx)

	// Every proxy of the group leaves and the specification changes: the
	// idle group is dropped, and a joiner waits for its pass.
	for _, x := range []Proxy{px, px3, {NodeID: member, Service: svc, Flavor: render.Envoy, Address: netip.AddrFrom4([4]byte{10, 254, 0, 20})}} {
		p.disconnect(x)
	}
	p.disconnect(g)
	p.step(ctx)
	p.setSpec(ctx, specWith(t, services, ""))
	px4 := joiner(4, render.Envoy)
	p.connect(px4)
	if got := c.View(px4.NodeID)[resource.ClusterType]; got != nil {
		t.Errorf("CDS %s published at once for a group with nothing rendered", got.Version())
	}
	p.step(ctx)
	if got := c.View(px4.NodeID)[resource.ClusterType]; got == nil || got.Get("bench/svc-00010") != nil {
		t.Errorf("after its pass the joiner's CDS = %v, want the group's, without bench/svc-00010", got)
	}
	if err := p.RenderError(px4.NodeID); err != "" {
		t.Errorf("render error: %s", err)
	}
}
