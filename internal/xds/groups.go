package xds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/eds"
	"github.com/osm-vm/osm-vm/internal/xds/refusals"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

type groupKey struct {
	service mesh.MeshService
	flavor  render.Flavor
}

type group struct {
	key    groupKey
	nodes  map[string]*node
	inputs render.Inputs     // what rds, cds and shared were rendered from
	shared []*cache.Resource // listeners that do not depend on the address
	rds    *cache.Set
	cds    *cache.Set
	eds    eds.Group // the load assignments of the services whose endpoints it receives
	// held holds the resources of rds, cds and shared, each in the slice
	// the group keeps them in (not copied into one: a full generation's
	// releases and retains of every group's were 7% of what it allocated).
	held [3]cache.Hold
	err  error
}

// release lets go of what the group holds and forgets it.
func (g *group) release(slots *eds.Slots) {
	for i := range g.held {
		g.held[i].Release()
	}
	slots.Release(&g.eds)
}

type node struct {
	proxy Proxy
	group *group
	lds   *cache.Set
	// refused holds the refusal listeners in lds: the names its streams
	// ask for that it may not have (see package refusals).
	refused refusals.Held
	capped  bool // more names were asked for than refusals.MaxRefusals
}

// refusalNode is n as package refusals sees it.
func (n *node) refusalNode() refusals.Node {
	return refusals.Node{ID: n.proxy.NodeID, Flavor: n.proxy.Flavor, Capped: &n.capped}
}

// mesh is what render reads: the current View, and the Memo.
func (p *Publisher) mesh() render.Mesh {
	return render.Mesh{View: p.view, Memo: p.memo}
}

// renderAll re-renders every group and rebuilds every load assignment
// (after a change of the participant rule, and in benchmarks).
func (p *Publisher) renderAll(ctx context.Context) {
	p.newMemo()
	p.eds.DropAll()
	p.rerender(ctx, slices.Collect(maps.Values(p.groups)))
}

// newMemo starts rendering from a new specification: render shares new
// messages, so what was remembered of the old ones goes.
func (p *Publisher) newMemo() {
	p.dropIdle()
	p.memo.Forget()
	p.interned.ForgetMessages()
	for _, v := range p.validators {
		v.ForgetChains()
	}
}

// renderChanged re-renders, after a specification change, the groups
// whose render.Inputs changed (and those that failed); the others keep
// their resources, which would render to the same bytes. The groups'
// inputs are worked out in parallel (see parallel).
func (p *Publisher) renderChanged(ctx context.Context) {
	p.newMemo()
	m := p.mesh()
	groups := slices.SortedFunc(maps.Values(p.groups), compareGroups)
	isStale := make([]bool, len(groups))
	p.parallel(len(groups), func(i int) {
		g := groups[i]
		if g.err != nil || g.cds == nil {
			isStale[i] = true
			return
		}
		for _, n := range g.nodes { // any one: they differ only in address
			in, err := render.InputsOf(m, p.renderProxy(n.proxy))
			isStale[i] = err != nil || !in.Equal(g.inputs)
			break
		}
	})
	var stale []*group
	for i, g := range groups {
		if isStale[i] {
			stale = append(stale, g)
		}
	}
	p.rerender(ctx, stale)
}

// rerender renders the groups again and publishes to their proxies, then
// lets go of what the groups held before (after, so that what renders the
// same is found interned).
func (p *Publisher) rerender(ctx context.Context, groups []*group) {
	type holding struct {
		held [3]cache.Hold
		eds  eds.Group
	}
	old := make([]holding, 0, len(groups))
	for _, g := range groups {
		old = append(old, holding{g.held, g.eds})
		g.rds, g.cds, g.shared, g.eds, g.held, g.err = nil, nil, nil, eds.Group{}, [3]cache.Hold{}, nil
		p.setJoinCDS(g.key, nil)
	}
	if len(groups) > 0 {
		p.dependents = nil
	}
	slices.SortFunc(groups, compareGroups)
	p.publishGroups(ctx, groups, func(g *group) []*node {
		return slices.SortedFunc(maps.Values(g.nodes), func(a, b *node) int { return strings.Compare(a.proxy.NodeID, b.proxy.NodeID) })
	})
	// In a full generation the previous resources are every group's:
	// released on every core (Releases may run in parallel), the EDS
	// slots after.
	const chunk = 64 // groups
	p.parallel((len(old)+chunk-1)/chunk, func(i int) {
		for j := i * chunk; j < min((i+1)*chunk, len(old)); j++ {
			for k := range old[j].held {
				old[j].held[k].Release()
			}
		}
	})
	for i := range old {
		p.eds.Release(&old[i].eds)
	}
}

// publishNodes renders and publishes the nodes' configurations (see
// publishGroups).
func (p *Publisher) publishNodes(ctx context.Context, nodes []*node) {
	byGroup := map[*group][]*node{}
	var groups []*group
	for _, n := range nodes {
		if byGroup[n.group] == nil {
			groups = append(groups, n.group)
		}
		byGroup[n.group] = append(byGroup[n.group], n)
	}
	p.publishGroups(ctx, groups, func(g *group) []*node { return byGroup[g] })
}

// publishGroups renders the configuration of nodes(g) for each group in
// parallel (see parallel): a group and its nodes are rendered by one
// goroutine, in order, the first rendering the group's resources if it
// has none. What render shares between groups (the Memo, the interned
// Resources, the validators, EDS slots and secret sets) is safe for
// concurrent use and gives every caller the same message or Resource, so
// the output does not depend on the number of workers
// (TestParallelRenderingIsDeterministic). What was rendered is then
// published on the pass's goroutine, node by node in the groups' order,
// each node's clusters and endpoints before its listeners and routes.
func (p *Publisher) publishGroups(ctx context.Context, groups []*group, nodes func(*group) []*node) {
	out := make([][]nodeRender, len(groups))
	p.parallel(len(groups), func(i int) {
		for _, n := range nodes(groups[i]) {
			out[i] = append(out[i], p.prepareNode(ctx, n))
		}
	})
	for _, rs := range out {
		for _, r := range rs {
			p.commitNode(r)
		}
	}
}

// minParallel is the fewest items (groups) worked on in parallel: below
// it (a specification change touching a few groups, a join) starting
// goroutines costs more than it saves.
const minParallel = 8

// parallel calls f(i) for each i < n on up to p.workers goroutines, each
// taking the next i not yet taken, and returns when all are done; with
// fewer than minParallel items or one worker it calls them in order
// itself. f must touch only what is its own or safe for concurrent use.
func (p *Publisher) parallel(n int, f func(i int)) {
	workers := min(p.workers, n)
	if workers <= 1 || n < minParallel {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

func compareGroups(a, b *group) int { return compareGroupKeys(a.key, b.key) }

func compareGroupKeys(a, b groupKey) int {
	if c := a.service.Compare(b.service); c != 0 {
		return c
	}
	return int(a.flavor) - int(b.flavor)
}

// renderGroup renders the resources shared by the group's proxies, using
// n as the representative. It may run in parallel with other groups'
// (see publishGroups).
func (p *Publisher) renderGroup(g *group, n *node) error {
	m := p.mesh()
	px := p.renderProxy(n.proxy)
	// One buffer holds each type's encoded resources in turn, until they
	// are interned (a slice of them per type and group was 8% of what a
	// full generation allocated).
	var buf [16]render.Encoded
	routes, encoded, err := render.RouteResources(m, px, buf[:0])
	if err != nil {
		return err
	}
	rds, err := groupSet(p, routes, (*routev3.RouteConfiguration)(nil), encoded)
	if err != nil {
		return err
	}
	clusters, encoded, err := render.ClusterResources(m, px, encoded[:0])
	if err != nil {
		return err
	}
	cds, err := groupSet(p, clusters, (*clusterv3.Cluster)(nil), encoded)
	if err != nil {
		return err
	}
	listeners, encoded, err := render.SharedListenerResources(m, px, encoded[:0])
	if err != nil {
		return err
	}
	shared, err := cache.Resources(p.interned, listeners)
	if err != nil {
		return err
	}
	if shared, err = p.appendEncoded(shared, (*listenerv3.Listener)(nil), encoded); err != nil {
		return err
	}
	in, err := render.InputsOf(m, px)
	if err != nil {
		return err
	}
	g.inputs, g.rds, g.cds, g.shared, g.eds = in, rds, cds, shared, p.eds.HoldGroup(in.Dependencies())
	g.held = [3]cache.Hold{p.interned.Hold(rds.Resources()...), p.interned.Hold(cds.Resources()...), p.interned.Hold(shared...)}
	p.setJoinCDS(g.key, cds)
	return nil
}

// groupSet returns the Set of p's group's resources of one type (typ's): those
// render built as messages, and those it wrote as bytes.
func groupSet[T cache.Named](p *Publisher, msgs []T, typ proto.Message, encoded []render.Encoded) (*cache.Set, error) {
	rs, err := cache.Resources(p.interned, msgs)
	if err != nil {
		return nil, err
	}
	if rs, err = p.appendEncoded(rs, typ, encoded); err != nil {
		return nil, err
	}
	return cache.NewSet(rs...)
}

// appendEncoded appends to rs the interned Resources of resources render
// wrote as bytes, messages of typ's type.
func (p *Publisher) appendEncoded(rs []*cache.Resource, typ proto.Message, encoded []render.Encoded) ([]*cache.Resource, error) {
	for _, e := range encoded {
		r, err := p.interned.EncodedResource(e.Name, typ, e.Bytes, func() []cache.Reference { return references(e) })
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// references returns what e references, as the cache keeps it.
func references(e render.Encoded) []cache.Reference {
	refs := make([]cache.Reference, len(e.Refs))
	for i, r := range e.Refs {
		refs[i] = cache.Reference(r)
	}
	return refs
}

func (p *Publisher) renderProxy(px Proxy) render.Proxy {
	rp := render.Proxy{Service: px.Service, Flavor: px.Flavor, Address: px.Address, GatewayCertDir: px.GatewayCertDir}
	if px.Flavor == render.Gateway && p.unusable != nil {
		rp.UnusableCertificates = p.unusable.UnusableCertificates(px.CN)
	}
	return rp
}

// nodeRender is what rendering one proxy's configuration gave
// (prepareNode), to be published (commitNode).
type nodeRender struct {
	n *node
	// grouped is set when its group's resources were rendered (again).
	grouped bool
	// refused are the refusal listeners in lds, held.
	refused                 refusals.Held
	cds, eds, sds, lds, rds *cache.Set
	err                     error
}

// commitNode publishes what prepareNode rendered for a proxy, or reports
// why it could not, on the pass's goroutine.
func (p *Publisher) commitNode(r nodeRender) {
	n := r.n
	if r.grouped {
		p.dependents = nil
	}
	if r.err == nil {
		n.refused.Release()
		n.refused = r.refused
		if r.refused.Len() > 0 {
			p.refusing[n] = struct{}{}
		} else {
			delete(p.refusing, n)
		}
		n.lds = r.lds
		id := n.proxy.NodeID
		// Publish in the order xDS wants: clusters and endpoints before the
		// listeners and routes that use them.
		p.publish(id, resource.ClusterType, r.cds)
		p.publish(id, resource.EndpointType, r.eds)
		if r.sds != nil {
			p.publish(id, resource.SecretType, r.sds)
		}
		p.publish(id, resource.ListenerType, r.lds)
		p.publish(id, resource.RouteType, r.rds)
	} else {
		r.refused.Release()
	}
	p.setErr(n.proxy.NodeID, r.err)
	switch {
	case r.err == nil:
	case n.lds == nil && p.refuse != nil:
		// Nothing was ever published for this proxy: it would wait for
		// its first answer forever. End its streams naming the cause; it
		// reconnects, and is served once the cause is fixed.
		p.log.Error("proxy refused: its configuration cannot be rendered", "node", n.proxy.NodeID, "err", r.err)
		p.refuse(n.proxy.NodeID, r.err)
	default:
		p.log.Error("proxy configuration not published; the proxy keeps its last good configuration", "node", n.proxy.NodeID, "err", r.err)
	}
}

// prepareNode renders and validates everything one proxy receives (its
// group's resources too, if the group has none), without publishing: it
// may run in parallel with other groups' (see publishGroups), touching
// only n, its group and what is safe for concurrent use.
func (p *Publisher) prepareNode(ctx context.Context, n *node) nodeRender {
	r := nodeRender{n: n}
	r.err = p.renderNode(ctx, &r)
	return r
}

func (p *Publisher) renderNode(ctx context.Context, r *nodeRender) error {
	n := r.n
	g := n.group
	if g.cds == nil {
		r.grouped = true
		if err := p.renderGroup(g, n); err != nil {
			g.err = err
			return err
		}
		g.err = nil
	}
	// Only the listeners bound to this proxy's address are rendered here;
	// the group holds the others.
	var buf [4]render.Encoded // its inbound listeners: one per port, mostly
	own, encodedOwn, err := render.PerProxyListenerResources(p.mesh(), p.renderProxy(n.proxy), buf[:0])
	if err != nil {
		return err
	}
	lds := make([]*cache.Resource, 0, len(own)+len(encodedOwn)+len(g.shared))
	for _, l := range own {
		r, err := p.cache.NewResource(l.GetName(), l)
		if err != nil {
			return err
		}
		lds = append(lds, r)
	}
	for _, e := range encodedOwn {
		r, err := p.cache.NewEncodedResource(e.Name, (*listenerv3.Listener)(nil), e.Bytes, references(e)...)
		if err != nil {
			return err
		}
		lds = append(lds, r)
	}
	ownCount := len(lds)
	lds = append(lds, g.shared...)
	real := func(name string) bool {
		_, ok := slices.BinarySearchFunc(g.shared, name, func(r *cache.Resource, name string) int { return strings.Compare(r.Name(), name) })
		return ok || slices.ContainsFunc(lds[:ownCount], func(r *cache.Resource) bool { return r.Name() == name })
	}
	refused, err := p.refusals.Render(p.mesh(), n.refusalNode(), &n.refused, real)
	if err != nil {
		return err
	}
	r.refused = refused // released by commitNode if anything below fails
	lds = append(lds, refused.Resources()...)
	ldsSet, err := cache.NewSet(lds...)
	if err != nil {
		return err
	}
	cds := g.cds
	eds, err := g.eds.Set(p.eds, p.mesh())
	if err == nil && refused.Len() > 0 {
		// The refusal listeners' route needs its cluster, which is not
		// the group's: this node's CDS and EDS sets are its own.
		if cds, err = cds.With(p.refusals.Cluster()); err == nil {
			eds = p.refusals.WithEDS(eds)
		}
	}
	if err != nil {
		return err
	}
	var sds *cache.Set
	var pendingSDS []proto.Message
	if n.proxy.Flavor != render.GRPC { // Envoy and gateway proxies take SDS
		if sds, err = p.secretSet(ctx, n.proxy.Service); err != nil {
			return err
		}
		if sds == nil {
			// The certificate is being issued: the rest is published now
			// (Envoy keeps clusters and listeners that reference a secret
			// warming until SDS sends it) and validated against
			// placeholders of the secrets; the secrets follow when the
			// certificate is announced.
			pendingSDS = p.pendingSecrets
		}
	}
	if err := p.validate(n.proxy.Flavor, pendingSDS, ldsSet, g.rds, cds, eds, sds); err != nil {
		return fmt.Errorf("generated configuration failed validation (a bug: please report it with GET /debug/config/%s): %w", n.proxy.NodeID, err)
	}
	r.cds, r.eds, r.sds, r.lds, r.rds = cds, eds, sds, ldsSet, g.rds
	return nil
}

// validate validates the sets, with extra messages; encoded resources by
// type, name, bytes and references (see render.Validator.ValidateSet).
func (p *Publisher) validate(f render.Flavor, extra []proto.Message, sets ...*cache.Set) error {
	in, _ := validateInputs.Get().(*validateInput)
	if in == nil {
		in = &validateInput{}
	}
	defer validateInputs.Put(in)
	defer in.reset()
	in.msgs = append(in.msgs, extra...)
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, r := range s.Resources() {
			if !r.Encoded() {
				in.msgs = append(in.msgs, r.Message())
				continue
			}
			in.encoded = append(in.encoded, render.Encoded{TypeURL: r.TypeURL(), Name: r.Name(), Bytes: r.Bytes()})
			for _, ref := range r.References() {
				in.refs = append(in.refs, render.Ref(ref))
			}
			in.ends = append(in.ends, len(in.refs))
		}
	}
	// Every encoded resource's references, in in.refs now that it has
	// stopped growing.
	start := 0
	for i, end := range in.ends {
		in.encoded[i].Refs = in.refs[start:end:end]
		start = end
	}
	return p.validators[f].ValidateSet(p.memo, in.encoded, in.msgs...)
}

// validateInput is what validate passes the validator, kept between
// calls (validateInputs) to reuse the space.
type validateInput struct {
	msgs    []proto.Message
	encoded []render.Encoded
	refs    []render.Ref
	ends    []int // where each encoded resource's references end in refs
}

func (in *validateInput) reset() {
	clear(in.msgs)
	clear(in.encoded)
	clear(in.refs)
	in.msgs, in.encoded, in.refs, in.ends = in.msgs[:0], in.encoded[:0], in.refs[:0], in.ends[:0]
}

var validateInputs sync.Pool

func (p *Publisher) publish(nodeID, typeURL string, set *cache.Set) {
	if err := p.cache.Publish(nodeID, typeURL, set); err != nil {
		p.log.Error("publish", "node", nodeID, "type", typeURL, "err", err)
	}
}
