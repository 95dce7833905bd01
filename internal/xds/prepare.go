package xds

// What a pass renders and publishes for groups of proxies: their shared
// resources, rendered once per group, and each proxy's own, validated
// before they are published.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

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
	refused, err := p.refusals.Render(p.mesh(), n.refusalNode(), n.refused, real)
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

// secretSet returns the SDS secrets of svc's service account, or nil (and
// no error) while its certificate is being issued: the announcement of the
// certificate brings them (see pass). Safe in parallel renders (see
// publishGroups).
func (p *Publisher) secretSet(ctx context.Context, svc mesh.MeshService) (*cache.Set, error) {
	return p.secrets.Get(ctx, p.serviceAccount(svc))
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

func (p *Publisher) publishSecrets(ctx context.Context, n *node) {
	set, err := p.secretSet(ctx, n.proxy.Service)
	if err != nil {
		p.log.Error("service certificate not published", "node", n.proxy.NodeID, "err", err)
		return
	}
	if set == nil {
		return // pending: published when it is announced
	}
	p.publish(n.proxy.NodeID, resource.SecretType, set)
}
