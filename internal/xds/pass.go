package xds

// The publisher's loop: each pass takes the changes that arrived since the
// previous one and decides what to render again.

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/eds"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Run publishes until ctx is done. Bursts of changes coalesce: each pass
// handles everything that arrived since the previous one.
func (p *Publisher) Run(ctx context.Context) error {
	viewCh, cancelViews := p.views.Subscribe()
	defer cancelViews()
	certCh, cancelCerts := p.certs.Subscribe()
	defer cancelCerts()

	viewChanged := true // since NewPublisher
	for {
		rotated := map[mesh.ServiceAccount]bool{}
		select {
		case <-ctx.Done():
			return nil
		case <-viewCh:
			viewChanged = true
		case a := <-certCh:
			noteRotation(rotated, a)
		case <-p.wake:
		}
		// Take everything else that is already waiting, so a burst is one pass.
	drain:
		for {
			select {
			case <-viewCh:
				viewChanged = true
			case a := <-certCh:
				noteRotation(rotated, a)
			default:
				break drain
			}
		}
		p.pass(ctx, viewChanged, rotated)
		viewChanged = false
	}
}

// pass applies one batch of changes: proxies joining and leaving, the
// listener names gRPC streams ask for, a new View (if viewChanged) and
// certificate rotations.
func (p *Publisher) pass(ctx context.Context, viewChanged bool, rotated map[mesh.ServiceAccount]bool) {
	if p.generation != nil {
		p.cache.BeginChange()
		defer p.observePass(time.Now())
	}
	p.mu.Lock()
	events := p.pending
	p.pending = nil
	requests := p.requests
	p.requests = nil
	refresh := p.refresh
	p.refresh = nil
	p.mu.Unlock()

	var joined []*node
	for _, e := range events {
		p.applyProxyEvent(e)
		if n := p.nodes[e.proxy.NodeID]; n != nil && e.connected {
			joined = append(joined, n)
		}
	}
	// Nodes whose refusal listeners may have to change: those whose
	// streams asked for other names, and after a specification change
	// those holding some (a name may have become a Service, or a real
	// listener; checked without rendering by refusals.Changed).
	var recheck map[string]bool
	for _, r := range requests {
		if recheck == nil {
			recheck = map[string]bool{}
		}
		recheck[r.nodeID] = true
		p.refusals.Want(r.nodeID, r.stream, r.names)
	}
	// Which services' participant endpoints changed.
	var changedEDS []mesh.MeshService
	if viewChanged {
		next := p.views.View()
		prev := p.view
		p.view = next
		changed, all := next.Changed(prev)
		specChanged := next.Spec() != prev.Spec() // snapshots are immutable: a new one is a change
		ruleChanged := specChanged && prev.Spec().RequireConnectedProxy() != next.Spec().RequireConnectedProxy()
		switch {
		case ruleChanged: // rebuilt below
		case all:
			// Every service's participants (the startup grace ended).
			for svc := range p.eds.Services() {
				changedEDS = append(changedEDS, svc)
			}
		default:
			changedEDS = changed
		}
		// Dropped before rendering, so that a group rendered again below
		// gets the new load assignments with its new routes (a split
		// backend that regains endpoints must not be routed to with its
		// old, empty assignment).
		for _, svc := range changedEDS {
			p.eds.Drop(svc)
		}
		switch {
		case ruleChanged:
			// The participant rule changed: everything is rebuilt.
			p.renderAll(ctx)
		case specChanged:
			p.renderChanged(ctx)
		case p.memo.Stale(next):
			// A TrafficSplit's root or backend gained its first
			// endpoints or lost its last: the routes of its callers
			// change (see render's Policy), so the groups whose inputs
			// changed are rendered again, as after a specification change.
			p.renderChanged(ctx)
		}
		if specChanged {
			for n := range p.refusing {
				if recheck == nil {
					recheck = map[string]bool{}
				}
				recheck[n.proxy.NodeID] = true
			}
		}
	}
	if rotated[allAccounts] {
		p.secrets.DropAll()
	}
	for sa := range rotated {
		p.secrets.Drop(sa)
	}
	if len(changedEDS) > 0 {
		p.publishEDS(changedEDS)
	}
	if len(rotated) > 0 {
		for _, g := range p.groups {
			if g.key.flavor == render.GRPC {
				continue
			}
			if rotated[allAccounts] || rotated[p.serviceAccount(g.key.service)] {
				for _, n := range g.nodes {
					p.publishSecrets(ctx, n)
				}
			}
		}
	}
	// The proxies that joined, those to render again, and those whose
	// refusals changed, each once, rendered in parallel by group (a
	// burst of joins after a restart renders many groups).
	var publish []*node
	for _, n := range joined {
		if p.nodes[n.proxy.NodeID] == n { // still connected at the end of the batch
			publish = append(publish, n)
			delete(recheck, n.proxy.NodeID)
			delete(refresh, n.proxy.NodeID)
		}
	}
	for id := range refresh {
		if n := p.nodes[id]; n != nil {
			publish = append(publish, n)
			delete(recheck, id)
		}
	}
	for id := range recheck {
		if n := p.nodes[id]; n != nil && n.lds != nil && p.refusals.Changed(p.mesh(), n.refusalNode(), n.refused, n.lds) {
			publish = append(publish, n)
		}
	}
	p.publishNodes(ctx, publish)
}

// applyProxyEvent adds a joining proxy to its group, or removes a leaving
// one.
func (p *Publisher) applyProxyEvent(e proxyEvent) {
	px := e.proxy
	if e.connected {
		if old := p.nodes[px.NodeID]; old != nil {
			p.dropNode(old)
		}
		k := groupKey{px.Service, px.Flavor}
		g := p.groups[k]
		if g == nil {
			if g = p.idle[k]; g != nil {
				delete(p.idle, k)
				p.dependents = nil
			} else {
				g = &group{key: k, nodes: map[string]*node{}}
			}
			p.groups[k] = g
		}
		n := &node{proxy: px, group: g}
		g.nodes[px.NodeID] = n
		p.nodes[px.NodeID] = n
		return
	}
	n := p.nodes[px.NodeID]
	if n == nil {
		return
	}
	p.dropNode(n)
	p.cache.Forget(px.NodeID)
	p.setErr(px.NodeID, nil)
}

func (p *Publisher) dropNode(n *node) {
	n.refused.Release()
	n.refused = nil
	delete(p.refusing, n)
	delete(p.nodes, n.proxy.NodeID)
	delete(n.group.nodes, n.proxy.NodeID)
	if g := n.group; len(g.nodes) == 0 {
		delete(p.groups, g.key)
		p.dependents = nil
		if g.err == nil && g.cds != nil {
			p.idle[g.key] = g // kept with what it holds (see idle)
			return
		}
		p.releaseGroup(g)
	}
}

// releaseGroup lets go of what a group without proxies holds.
func (p *Publisher) releaseGroup(g *group) {
	p.setJoinCDS(g.key, nil)
	g.release(p.eds)
}

// dropIdle releases the idle groups: rendered from an earlier
// specification, they would have to be compared with it to be used.
func (p *Publisher) dropIdle() {
	for k, g := range p.idle {
		delete(p.idle, k)
		p.releaseGroup(g)
	}
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
	for _, g := range groups {
		g.prev, g.prevEDS = g.held, g.eds
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
	p.parallel((len(groups)+chunk-1)/chunk, func(i int) {
		for _, g := range groups[i*chunk : min((i+1)*chunk, len(groups))] {
			for k := range g.prev {
				g.prev[k].Release()
			}
		}
	})
	for _, g := range groups {
		p.eds.Release(&g.prevEDS)
	}
}
