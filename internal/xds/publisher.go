package xds

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// ViewSource is the mesh model the publisher renders from: the catalog's
// current View, and a coalescing notification when a new one is published.
type ViewSource interface {
	View() *catalog.View
	Subscribe() (notify <-chan struct{}, cancel func())
}

// CertSource gives the service certificates proxies receive by SDS.
type CertSource interface {
	ServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error)
	RootPEM() []byte
	Subscribe() (<-chan certificate.Announcement, func())
}

// Publisher renders what each connected proxy receives and publishes it
// into the cache. It reads the mesh from the catalog's View and is
// event-driven: a specification change re-renders the groups of proxies it
// touches, a change of some services' participant endpoints rebuilds their
// ClusterLoadAssignments once and publishes them only to the proxies that
// depend on them, a certificate rotation republishes the secrets of that
// service account, and a connecting proxy gets its group's resources.
//
// Proxies of one service and flavour form a group: they share every
// resource except their inbound listeners (bound to each proxy's address),
// so each resource is rendered and marshalled once per version and shared.
type Publisher struct {
	log   *slog.Logger
	cache *cache.Cache
	views ViewSource
	certs CertSource

	mu       sync.Mutex
	pending  []proxyEvent
	requests []listenerRequest
	wake     chan struct{}

	// refuse ends a proxy's streams, telling it why (set by
	// Server.SetWatcher, before Run): for a proxy whose configuration
	// cannot be rendered and that has none, which would otherwise wait in
	// silence.
	refuse func(nodeID string, err error)

	// Owned by Run.
	view    *catalog.View
	groups  map[groupKey]*group
	nodes   map[string]*node
	eds     map[mesh.MeshService]*edsSlot // the ClusterLoadAssignment of each service a group depends on
	secrets map[mesh.ServiceAccount]*cache.Set
	// wants holds the listener names each gRPC stream of a node asks
	// for (by node ID and stream), refusing the nodes that hold refusal
	// listeners, and refusalCluster and refusalCLA the resources their
	// routes need (made once; see renderNode).
	wants          map[string]map[uint64][]string
	refusing       map[*node]struct{}
	refusalCluster *cache.Resource
	refusalCLA     *cache.Resource
	// dependents indexes the rendered groups by the services whose
	// endpoints they receive; nil when a group's dependencies changed.
	dependents map[mesh.MeshService][]dependent
	// memo shares what render builds for one upstream between the groups
	// that call it; interned holds the Resource (one marshal) of each
	// message it shares, reset with each specification, and one Resource
	// per content, so groups that render equal resources share one and
	// the validators, which remember what they found in each message, walk
	// it once. The holders of each Resource are the groups, secret sets
	// and refusals (an EDS slot is the only holder of its load assignment,
	// outside the counts); one that nothing holds is forgotten, by the
	// validators too. So what renders to the same bytes after a
	// specification change keeps its Resource and is not validated again.
	memo       *render.Memo
	interned   *cache.Interner
	validators map[render.Flavor]*render.Validator

	statusMu sync.Mutex
	errs     map[string]string // node ID -> last render error
}

type proxyEvent struct {
	proxy     Proxy
	connected bool
}

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
	slots  []*edsSlot // of the services whose endpoints it receives, sorted by EDS name
	eds    *cache.Set // the slots' resources when last built (see Publisher.edsSet)
	err    error
}

// resources returns what the group holds (see Publisher.held).
func (g *group) resources() []*cache.Resource {
	var out []*cache.Resource
	for _, s := range []*cache.Set{g.rds, g.cds} {
		if s != nil {
			out = append(out, s.Resources()...)
		}
	}
	return append(out, g.shared...)
}

type node struct {
	proxy Proxy
	group *group
	lds   *cache.Set
	// refused holds the refusal listeners in lds, by name: the names
	// its streams ask for that it may not have (see refusalNames).
	refused map[string]refusal
	capped  bool // more names were asked for than maxRefusals
}

// refusal is a refusal listener a node holds and the gRPC code it
// fails RPCs with.
type refusal struct {
	res  *cache.Resource
	code uint32
}

// listenerRequest is the listener names one gRPC stream of a node asks
// for (nil when the stream ended).
type listenerRequest struct {
	nodeID string
	stream uint64
	names  []string
}

// Refusal bounds: a node is given at most maxRefusals refusal listeners
// (the first by name), so a client asking for many names cannot make the
// server render without bound; the names beyond wait for gRPC's own
// does-not-exist timer. A name longer than maxRefusalName (no
// <svc>.<ns>.mesh:<port> is) is not answered with one either.
const (
	maxRefusals    = 256
	maxRefusalName = 300
)

// dependent is a group that receives a service's endpoints, and the index
// of that service's slot in the group's slots.
type dependent struct {
	g    *group
	slot int
}

// edsSlot holds a service's ClusterLoadAssignment; groups keep pointers to
// the slots of their dependencies, so publishing an endpoint change to many
// groups does not look each dependency up. res is nil until built, and
// again when the service's endpoints, its connected proxies or the
// participant rule change.
type edsSlot struct {
	svc  mesh.MeshService
	res  *cache.Resource
	refs int // groups whose slots include it; at 0 it is dropped
}

// NewPublisher returns a publisher of the views of the mesh model; Run
// starts it.
func NewPublisher(log *slog.Logger, c *cache.Cache, views ViewSource, certs CertSource) *Publisher {
	p := &Publisher{
		log: log, cache: c, views: views, certs: certs,
		wake:     make(chan struct{}, 1),
		view:     views.View(),
		groups:   map[groupKey]*group{},
		nodes:    map[string]*node{},
		eds:      map[mesh.MeshService]*edsSlot{},
		secrets:  map[mesh.ServiceAccount]*cache.Set{},
		wants:    map[string]map[uint64][]string{},
		refusing: map[*node]struct{}{},
		errs:     map[string]string{},
		memo:     render.NewMemo(),
		validators: map[render.Flavor]*render.Validator{
			render.Envoy: render.NewValidator(render.Envoy),
			render.GRPC:  render.NewValidator(render.GRPC),
		},
	}
	p.interned = cache.NewInterner(c, func(m proto.Message) {
		for _, v := range p.validators {
			v.ForgetMessage(m)
		}
	})
	return p
}

// ProxyConnected implements Watcher.
func (p *Publisher) ProxyConnected(px Proxy) { p.enqueue(proxyEvent{px, true}) }

// ProxyDisconnected implements Watcher.
func (p *Publisher) ProxyDisconnected(px Proxy) { p.enqueue(proxyEvent{px, false}) }

// ListenersRequested is told by the server which listener names a gRPC
// stream of a node asks for (names nil when the stream ends). A name the
// node may not have is answered with a refusal listener (see
// renderNode), in a pass of Run, coalesced like connects.
func (p *Publisher) ListenersRequested(nodeID string, stream uint64, names []string) {
	p.mu.Lock()
	p.requests = append(p.requests, listenerRequest{nodeID, stream, names})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Publisher) enqueue(e proxyEvent) {
	p.mu.Lock()
	p.pending = append(p.pending, e)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// RenderError returns the last error rendering or validating a node's
// configuration ("" when its last render was good).
func (p *Publisher) RenderError(nodeID string) string {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	return p.errs[nodeID]
}

func (p *Publisher) setErr(nodeID string, err error) {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	if err == nil {
		delete(p.errs, nodeID)
	} else {
		p.errs[nodeID] = err.Error()
	}
}

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

// allAccounts in a rotation set means "every service account" (after a
// Resync announcement some rotations may have been missed).
var allAccounts = mesh.ServiceAccount{}

func noteRotation(rotated map[mesh.ServiceAccount]bool, a certificate.Announcement) {
	switch a.Kind {
	case certificate.Rotated, certificate.Issued, certificate.Released:
		rotated[a.ServiceAccount] = true
	case certificate.Resync:
		rotated[allAccounts] = true
	}
}

// pass applies one batch of changes: proxies joining and leaving, the
// listener names gRPC streams ask for, a new View (if viewChanged) and
// certificate rotations.
func (p *Publisher) pass(ctx context.Context, viewChanged bool, rotated map[mesh.ServiceAccount]bool) {
	p.mu.Lock()
	events := p.pending
	p.pending = nil
	requests := p.requests
	p.requests = nil
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
	// listener; checked without rendering in refusalsChanged).
	var recheck map[string]bool
	for _, r := range requests {
		if recheck == nil {
			recheck = map[string]bool{}
		}
		recheck[r.nodeID] = true
		streams := p.wants[r.nodeID]
		if len(r.names) == 0 {
			delete(streams, r.stream)
			if len(streams) == 0 {
				delete(p.wants, r.nodeID)
			}
			continue
		}
		if streams == nil {
			streams = map[uint64][]string{}
			p.wants[r.nodeID] = streams
		}
		streams[r.stream] = r.names
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
		case ruleChanged:
			// The participant rule changed: everything is rebuilt.
			p.renderAll(ctx)
		case specChanged:
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
		switch {
		case ruleChanged: // rebuilt already
		case all:
			// Every service's participants (the startup grace ended).
			changedEDS = slices.Collect(maps.Keys(p.eds))
		default:
			changedEDS = changed
		}
	}
	if rotated[allAccounts] {
		for sa := range p.secrets {
			p.dropSecrets(sa)
		}
	}
	for sa := range rotated {
		p.dropSecrets(sa)
	}
	for _, svc := range changedEDS {
		p.dropEDS(svc)
	}
	if len(changedEDS) > 0 {
		p.publishEDS(changedEDS)
	}
	if len(rotated) > 0 {
		for _, g := range p.groups {
			if g.key.flavor != render.Envoy {
				continue
			}
			if info, ok := p.view.Spec().Service(g.key.service); rotated[allAccounts] || ok && rotated[info.ServiceAccount] {
				for _, n := range g.nodes {
					p.publishSecrets(ctx, n)
				}
			}
		}
	}
	for _, n := range joined {
		if p.nodes[n.proxy.NodeID] == n { // still connected at the end of the batch
			p.publishNode(ctx, n)
			delete(recheck, n.proxy.NodeID)
		}
	}
	for id := range recheck {
		if n := p.nodes[id]; n != nil && n.lds != nil && p.refusalsChanged(n) {
			p.publishNode(ctx, n)
		}
	}
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
			g = &group{key: k, nodes: map[string]*node{}}
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
	p.releaseRefusals(n.refused)
	n.refused = nil
	delete(p.refusing, n)
	delete(p.nodes, n.proxy.NodeID)
	delete(n.group.nodes, n.proxy.NodeID)
	if g := n.group; len(g.nodes) == 0 {
		delete(p.groups, g.key)
		p.interned.Release(g.resources()...)
		p.releaseSlots(g.slots)
		p.dependents = nil
	}
}

// mesh is what render reads: the current View, and the Memo.
func (p *Publisher) mesh() render.Mesh {
	return render.Mesh{View: p.view, Memo: p.memo}
}

// slot returns svc's EDS slot.
func (p *Publisher) slot(svc mesh.MeshService) *edsSlot {
	sl := p.eds[svc]
	if sl == nil {
		sl = &edsSlot{svc: svc}
		p.eds[svc] = sl
	}
	return sl
}

// edsResource returns the (shared) ClusterLoadAssignment of the slot's
// service, built once until dropEDS drops it.
func (p *Publisher) edsResource(sl *edsSlot) (*cache.Resource, error) {
	if sl.res != nil {
		return sl.res, nil
	}
	cla, err := render.ClusterLoadAssignment(p.mesh(), sl.svc)
	if err != nil {
		return nil, err
	}
	res, err := p.cache.NewResource(render.EDSName(sl.svc), cla)
	if err != nil {
		return nil, err
	}
	if res = p.interned.Intern(res); res.Message() == proto.Message(cla) {
		// New content. The validator remembers it (until dropEDS), so
		// validating the sets that hold it does not walk it again.
		if err := p.validators[render.Envoy].Validate(cla); err != nil {
			p.interned.Forget(res)
			return nil, fmt.Errorf("endpoints of %s failed validation: %w", sl.svc, err)
		}
	}
	sl.res = res
	return res, nil
}

// dropEDS forgets svc's ClusterLoadAssignment, to be rebuilt when next
// needed (its slot is the only holder of a load assignment, so it is no
// longer interned either).
func (p *Publisher) dropEDS(svc mesh.MeshService) {
	if sl := p.eds[svc]; sl != nil && sl.res != nil {
		p.interned.Forget(sl.res)
		sl.res = nil
	}
}

func (p *Publisher) dropAllEDS() {
	for svc := range p.eds {
		p.dropEDS(svc)
	}
}

// publishEDS rebuilds the changed services' endpoints and publishes them
// to the proxies that depend on them.
func (p *Publisher) publishEDS(changed []mesh.MeshService) {
	if p.dependents == nil {
		p.dependents = map[mesh.MeshService][]dependent{}
		for _, g := range p.groups {
			if g.err != nil || g.cds == nil {
				continue
			}
			for i, sl := range g.slots {
				p.dependents[sl.svc] = append(p.dependents[sl.svc], dependent{g, i})
			}
		}
	}
	var done map[*group]bool // a group that depends on several changed services is published once
	if len(changed) > 1 {
		done = map[*group]bool{}
	}
	for _, svc := range changed {
		deps := p.dependents[svc]
		if len(deps) == 0 {
			continue
		}
		r, err := p.edsResource(p.eds[svc])
		if err != nil {
			p.log.Error("render endpoints", "service", svc, "err", err)
			continue
		}
		for _, d := range deps {
			g := d.g
			var set *cache.Set
			switch {
			case done != nil:
				if done[g] {
					continue
				}
				done[g] = true
				set, err = p.edsSet(g)
			case g.eds != nil:
				// The one service changed: its slot's resource is replaced.
				rs := slices.Clone(g.eds.Resources())
				rs[d.slot] = r
				set, err = g.eds.Update(rs)
				g.eds = set
			default:
				set, err = p.edsSet(g)
			}
			if err != nil {
				p.log.Error("render endpoints", "service", g.key.service, "err", err)
				continue
			}
			for id, n := range g.nodes {
				p.publish(id, resource.EndpointType, p.withRefusalEDS(n, set))
			}
		}
	}
}

// edsSet returns the group's load assignments. The set last built is kept:
// unchanged, it is returned as is; when some slots' resources changed (an
// endpoint change), the new set is an Update of it.
func (p *Publisher) edsSet(g *group) (*cache.Set, error) {
	var held []*cache.Resource
	if g.eds != nil {
		held = g.eds.Resources() // one per slot, in slot order
	}
	var rs []*cache.Resource
	for i, sl := range g.slots {
		r, err := p.edsResource(sl)
		if err != nil {
			return nil, err
		}
		if rs == nil && held != nil && held[i] == r {
			continue
		}
		if rs == nil {
			rs = make([]*cache.Resource, len(g.slots))
			copy(rs, held[:i])
		}
		rs[i] = r
	}
	var set *cache.Set
	var err error
	switch {
	case g.eds == nil:
		set, err = cache.NewSortedSet(rs) // slots are sorted by EDS name
	case rs == nil:
		return g.eds, nil
	default:
		set, err = g.eds.Update(rs)
	}
	if err != nil {
		return nil, err
	}
	g.eds = set
	return set, nil
}

// renderAll re-renders every group and rebuilds every load assignment
// (after a change of the participant rule, and in benchmarks).
func (p *Publisher) renderAll(ctx context.Context) {
	p.newMemo()
	p.dropAllEDS()
	p.rerender(ctx, slices.Collect(maps.Values(p.groups)))
}

// newMemo starts rendering from a new specification: render shares new
// messages, so what was remembered of the old ones goes.
func (p *Publisher) newMemo() {
	p.memo = render.NewMemo()
	p.interned.ForgetMessages()
	for _, v := range p.validators {
		v.ForgetChains()
	}
}

// renderChanged re-renders, after a specification change, the groups
// whose render.Inputs changed (and those that failed); the others keep
// their resources, which would render to the same bytes.
func (p *Publisher) renderChanged(ctx context.Context) {
	p.newMemo()
	m := p.mesh()
	var stale []*group
	for _, g := range p.groups {
		if g.err != nil || g.cds == nil {
			stale = append(stale, g)
			continue
		}
		for _, n := range g.nodes { // any one: they differ only in address
			if in, err := render.InputsOf(m, renderProxy(n.proxy)); err != nil || !in.Equal(g.inputs) {
				stale = append(stale, g)
			}
			break
		}
	}
	p.rerender(ctx, stale)
}

// rerender renders the groups again and publishes to their proxies, then
// lets go of what the groups held before (after, so that what renders the
// same is found interned).
func (p *Publisher) rerender(ctx context.Context, groups []*group) {
	var old []*cache.Resource
	var oldSlots []*edsSlot
	for _, g := range groups {
		old = append(old, g.resources()...)
		oldSlots = append(oldSlots, g.slots...)
		g.rds, g.cds, g.shared, g.slots, g.eds, g.err = nil, nil, nil, nil, nil, nil
	}
	if len(groups) > 0 {
		p.dependents = nil
	}
	for _, g := range groups {
		for _, n := range g.nodes {
			p.publishNode(ctx, n)
		}
	}
	p.interned.Release(old...)
	p.releaseSlots(oldSlots)
}

// renderGroup renders the resources shared by the group's proxies, using
// n as the representative.
func (p *Publisher) renderGroup(g *group, n *node) error {
	m := p.mesh()
	px := renderProxy(n.proxy)
	routes, err := render.Routes(m, px)
	if err != nil {
		return err
	}
	clusters, err := render.Clusters(m, px)
	if err != nil {
		return err
	}
	listeners, err := render.SharedListeners(m, px)
	if err != nil {
		return err
	}
	rds, err := cache.InternedSet(p.interned, routes)
	if err != nil {
		return err
	}
	cds, err := cache.InternedSet(p.interned, clusters)
	if err != nil {
		return err
	}
	shared, err := cache.Resources(p.interned, listeners)
	if err != nil {
		return err
	}
	in, err := render.InputsOf(m, px)
	if err != nil {
		return err
	}
	deps := in.Dependencies()
	slots := make([]*edsSlot, len(deps))
	for i, d := range deps {
		slots[i] = p.slot(d)
		slots[i].refs++
	}
	slices.SortFunc(slots, func(a, b *edsSlot) int { return strings.Compare(render.EDSName(a.svc), render.EDSName(b.svc)) })
	g.inputs, g.rds, g.cds, g.slots, g.shared, g.eds = in, rds, cds, slots, shared, nil
	p.interned.Retain(g.resources()...)
	p.dependents = nil
	return nil
}

func renderProxy(px Proxy) render.Proxy {
	return render.Proxy{Service: px.Service, Flavor: px.Flavor, Address: px.Address}
}

// publishNode renders and publishes everything one proxy receives.
func (p *Publisher) publishNode(ctx context.Context, n *node) {
	err := p.renderNode(ctx, n)
	p.setErr(n.proxy.NodeID, err)
	switch {
	case err == nil:
	case n.lds == nil && p.refuse != nil:
		// Nothing was ever published for this proxy: it would wait for
		// its first answer forever. End its streams naming the cause; it
		// reconnects, and is served once the cause is fixed.
		p.log.Error("proxy refused: its configuration cannot be rendered", "node", n.proxy.NodeID, "err", err)
		p.refuse(n.proxy.NodeID, err)
	default:
		p.log.Error("proxy configuration not published; the proxy keeps its last good configuration", "node", n.proxy.NodeID, "err", err)
	}
}

func (p *Publisher) setRefuse(f func(nodeID string, err error)) { p.refuse = f }

func (p *Publisher) renderNode(ctx context.Context, n *node) error {
	g := n.group
	if g.cds == nil {
		if err := p.renderGroup(g, n); err != nil {
			g.err = err
			p.dependents = nil
			return err
		}
		g.err = nil
	}
	// Only the listeners bound to this proxy's address are rendered here;
	// the group holds the others.
	own, err := render.PerProxyListeners(p.mesh(), renderProxy(n.proxy))
	if err != nil {
		return err
	}
	lds := make([]*cache.Resource, 0, len(own)+len(g.shared))
	for _, l := range own {
		r, err := p.cache.NewResource(l.GetName(), l)
		if err != nil {
			return err
		}
		lds = append(lds, r)
	}
	lds = append(lds, g.shared...)
	real := func(name string) bool {
		_, ok := slices.BinarySearchFunc(g.shared, name, func(r *cache.Resource, name string) int { return strings.Compare(r.Name(), name) })
		return ok || slices.ContainsFunc(own, func(l *listenerv3.Listener) bool { return l.GetName() == name })
	}
	refused, err := p.refusals(n, real)
	if err != nil {
		return err
	}
	for _, r := range refused {
		lds = append(lds, r.res)
	}
	ldsSet, err := cache.NewSet(lds...)
	if err != nil {
		p.releaseRefusals(refused)
		return err
	}
	cds := g.cds
	eds, err := p.edsSet(g)
	if err == nil && len(refused) > 0 {
		// The refusal listeners' route needs its cluster, which is not
		// the group's: this node's CDS and EDS sets are its own.
		if cds, err = cds.With(p.refusalCluster); err == nil {
			eds = p.withRefusalEDSSet(eds)
		}
	}
	if err != nil {
		p.releaseRefusals(refused)
		return err
	}
	var sds *cache.Set
	if n.proxy.Flavor == render.Envoy {
		if sds, err = p.secretSet(ctx, n.proxy.Service); err != nil {
			p.releaseRefusals(refused)
			return err
		}
	}
	if err := p.validate(n.proxy.Flavor, ldsSet, g.rds, cds, eds, sds); err != nil {
		p.releaseRefusals(refused)
		return fmt.Errorf("generated configuration failed validation (a bug: please report it with GET /debug/config/%s): %w", n.proxy.NodeID, err)
	}
	p.releaseRefusals(n.refused)
	n.refused = refused
	if len(refused) > 0 {
		p.refusing[n] = struct{}{}
	} else {
		delete(p.refusing, n)
	}
	n.lds = ldsSet
	id := n.proxy.NodeID
	// Publish in the order xDS wants: clusters and endpoints before the
	// listeners and routes that use them.
	p.publish(id, resource.ClusterType, cds)
	p.publish(id, resource.EndpointType, eds)
	if sds != nil {
		p.publish(id, resource.SecretType, sds)
	}
	p.publish(id, resource.ListenerType, ldsSet)
	p.publish(id, resource.RouteType, g.rds)
	return nil
}

func (p *Publisher) validate(f render.Flavor, sets ...*cache.Set) error {
	var msgs []proto.Message
	for _, s := range sets {
		if s == nil {
			continue
		}
		for _, r := range s.Resources() {
			msgs = append(msgs, r.Message())
		}
	}
	return p.validators[f].ValidateWith(p.memo, msgs...)
}

// releaseSlots counts one group less depending on each slot, dropping
// the slots no group depends on.
func (p *Publisher) releaseSlots(slots []*edsSlot) {
	for _, sl := range slots {
		if sl.refs--; sl.refs <= 0 {
			p.dropEDS(sl.svc)
			delete(p.eds, sl.svc)
		}
	}
}

// dropSecrets forgets the secret set of sa, to be built again when next
// needed.
func (p *Publisher) dropSecrets(sa mesh.ServiceAccount) {
	if set := p.secrets[sa]; set != nil {
		delete(p.secrets, sa)
		p.interned.Release(set.Resources()...)
	}
}

// secretSet returns the SDS secrets of svc's service account.
func (p *Publisher) secretSet(ctx context.Context, svc mesh.MeshService) (*cache.Set, error) {
	info, ok := p.view.Spec().Service(svc)
	sa := mesh.ServiceAccount{Namespace: svc.Namespace, Name: svc.Name}
	if ok {
		sa = info.ServiceAccount
	}
	if s := p.secrets[sa]; s != nil {
		return s, nil
	}
	cert, err := p.certs.ServiceCertificate(ctx, sa)
	if err != nil {
		return nil, fmt.Errorf("service certificate of %s: %w", sa, err)
	}
	secrets, err := render.Secrets(cert.GetCertificateChain(), cert.GetPrivateKey(), p.certs.RootPEM())
	if err != nil {
		return nil, err
	}
	set, err := cache.InternedSet(p.interned, secrets)
	if err != nil {
		return nil, err
	}
	p.secrets[sa] = set
	p.interned.Retain(set.Resources()...)
	return set, nil
}

func (p *Publisher) publishSecrets(ctx context.Context, n *node) {
	set, err := p.secretSet(ctx, n.proxy.Service)
	if err != nil {
		p.log.Error("service certificate not published", "node", n.proxy.NodeID, "err", err)
		return
	}
	p.publish(n.proxy.NodeID, resource.SecretType, set)
}

func (p *Publisher) publish(nodeID, typeURL string, set *cache.Set) {
	if err := p.cache.Publish(nodeID, typeURL, set); err != nil {
		p.log.Error("publish", "node", nodeID, "type", typeURL, "err", err)
	}
}

// refusalNames returns the listener names n's gRPC streams ask for that
// real (the listeners it is given) does not hold, sorted, at most
// maxRefusals: a caller dialling an upstream it may not call, or a name
// that is no service, is given a refusal listener under that name, which
// fails its RPCs at once (gRPC clients otherwise wait 15 s for their
// does-not-exist timer). Server listener names (bound to an address) and
// over-long names get none.
func (p *Publisher) refusalNames(n *node, real func(string) bool) []string {
	streams := p.wants[n.proxy.NodeID]
	if len(streams) == 0 || n.proxy.Flavor != render.GRPC {
		n.capped = false
		return nil
	}
	var names []string
	for _, ns := range streams {
		for _, name := range ns {
			if len(name) <= maxRefusalName && !render.PerProxy(name) && !real(name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	if len(streams) > 1 {
		names = slices.Compact(names)
	}
	if capped := len(names) > maxRefusals; capped != n.capped {
		n.capped = capped
		if capped {
			p.log.Warn("a gRPC client asks for more listeners it may not have than are answered with refusals; the rest wait for its does-not-exist timer",
				"node", n.proxy.NodeID, "names", len(names), "answered", maxRefusals, "first_unanswered", names[maxRefusals])
		}
	}
	if len(names) > maxRefusals {
		names = names[:maxRefusals]
	}
	return names
}

// refusals returns the refusal listeners n is to hold (see refusalNames),
// interned, reusing those it holds where the code is the same.
func (p *Publisher) refusals(n *node, real func(string) bool) (map[string]refusal, error) {
	names := p.refusalNames(n, real)
	if len(names) == 0 {
		return nil, nil
	}
	if p.refusalCluster == nil {
		c, err := p.cache.NewResource(render.RefusalClusterName, render.RefusalCluster())
		if err != nil {
			return nil, err
		}
		cla := render.RefusalLoadAssignment()
		e, err := p.cache.NewResource(cla.GetClusterName(), cla)
		if err != nil {
			return nil, err
		}
		p.refusalCluster, p.refusalCLA = c, e
	}
	m := p.mesh()
	out := make(map[string]refusal, len(names))
	for _, name := range names {
		code := render.RefusalCode(m, name)
		if r, ok := n.refused[name]; ok && r.code == code {
			out[name] = r
			continue
		}
		l, err := render.RefusalListener(m, name)
		if err != nil {
			return nil, err
		}
		res, err := p.cache.NewResource(name, l)
		if err != nil {
			return nil, err
		}
		out[name] = refusal{res: p.interned.Intern(res), code: code}
	}
	p.retainRefusals(out)
	return out, nil
}

// refusalsChanged reports whether n's refusal listeners differ from those
// it would be given now (without rendering them).
func (p *Publisher) refusalsChanged(n *node) bool {
	real := func(name string) bool { _, refused := n.refused[name]; return !refused && n.lds.Get(name) != nil }
	names := p.refusalNames(n, real)
	if len(names) != len(n.refused) {
		return true
	}
	m := p.mesh()
	for _, name := range names {
		if r, ok := n.refused[name]; !ok || r.code != render.RefusalCode(m, name) {
			return true
		}
	}
	return false
}

func (p *Publisher) retainRefusals(rs map[string]refusal) {
	for _, r := range rs {
		p.interned.Retain(r.res)
	}
}

// releaseRefusals counts one holder less of each refusal listener of rs
// (refusals counted one more of each it returned).
func (p *Publisher) releaseRefusals(rs map[string]refusal) {
	if len(rs) == 0 {
		return
	}
	out := make([]*cache.Resource, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.res)
	}
	p.interned.Release(out...)
}

// withRefusalEDS returns the EDS set to publish to n from its group's
// set: with the refusal cluster's (empty) load assignment when n holds
// refusal listeners.
func (p *Publisher) withRefusalEDS(n *node, set *cache.Set) *cache.Set {
	if len(n.refused) == 0 {
		return set
	}
	return p.withRefusalEDSSet(set)
}

func (p *Publisher) withRefusalEDSSet(set *cache.Set) *cache.Set {
	out, err := set.With(p.refusalCLA)
	if err != nil { // cannot fail: the resource is not nil
		return set
	}
	return out
}
