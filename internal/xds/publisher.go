package xds

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/eds"
	"github.com/osm-vm/osm-vm/internal/xds/refusals"
	"github.com/osm-vm/osm-vm/internal/xds/render"
	"github.com/osm-vm/osm-vm/internal/xds/secrets"
)

// ViewSource is the mesh model the publisher renders from: the catalog's
// current View, and a coalescing notification when a new one is published.
type ViewSource interface {
	View() *catalog.View
	Subscribe() (notify <-chan struct{}, cancel func())
}

// Publisher renders what each connected proxy receives and publishes it
// into the cache. It reads the mesh from the catalog's View and is
// event-driven: a specification change re-renders the groups of proxies it
// touches, a change of some services' participant endpoints rebuilds their
// ClusterLoadAssignments once and publishes them only to the proxies that
// depend on them, a certificate announced (issued or rotated) publishes
// the secrets of that service account, and a connecting proxy gets its
// group's resources (its secrets too, or later, when its certificate is
// still being issued: a pass never waits for an issue).
//
// Proxies of one service and flavour form a group: they share every
// resource except their inbound listeners (bound to each proxy's address),
// so each resource is rendered and marshalled once per version and shared.
type Publisher struct {
	log   *slog.Logger
	cache *cache.Cache
	views ViewSource
	certs CertSource

	// unusable gives the Gateway listeners whose certificate files a
	// gateway machine (by CN) reported unusable (nil: none).
	unusable UnusableCertificates

	mu       sync.Mutex
	pending  []proxyEvent
	requests []listenerRequest
	refresh  map[string]bool // nodes to render again (Refresh)
	wake     chan struct{}
	// joinCDS holds the CDS set of each rendered Envoy group, live or
	// idle: ProxyConnected publishes it to a joining Envoy at once, so
	// that the proxy has its clusters, and asks for their endpoints,
	// while a pass renders its own listeners. The pass that takes the
	// join publishes everything, CDS again (the same set, which costs a
	// comparison, or one rendered since). Set by renderGroup, cleared by
	// rerender and releaseGroup.
	joinCDS map[groupKey]*cache.Set

	// refuse ends a proxy's streams, telling it why (set by
	// Server.SetWatcher, before Run): for a proxy whose configuration
	// cannot be rendered and that has none, which would otherwise wait in
	// silence.
	refuse func(nodeID string, err error)

	// Owned by Run.
	view   *catalog.View
	groups map[groupKey]*group
	// idle holds the groups whose last proxy left, with what they hold,
	// until the next specification change (newMemo): a group whose
	// proxies reconnect (a storm after a restart, a failover) is not
	// rendered again. At most one per service and flavour.
	idle  map[groupKey]*group
	nodes map[string]*node
	// workers is how many goroutines render groups in parallel
	// (publishGroups): GOMAXPROCS.
	workers int
	// edsWakeEvery is how many proxies publishEDS answers before waking
	// their streams (edsWakeEvery; tests set fewer).
	edsWakeEvery int
	// eds holds the ClusterLoadAssignment of each service a group depends
	// on.
	eds *eds.Slots
	// secrets holds the secret set of each service account.
	secrets *secrets.Sets
	// refusals renders the refusal listeners of gRPC nodes (see
	// renderNode); refusing holds the nodes that hold some.
	refusals *refusals.Refusals
	refusing map[*node]struct{}
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
	// pendingSecrets stand in for the secrets of a node whose service
	// certificate is being issued, when its configuration is validated.
	pendingSecrets []proto.Message

	statusMu sync.Mutex
	errs     map[string]string // node ID -> last render error

	generation prometheus.Observer // nil unless Instrument was called
}

type proxyEvent struct {
	proxy     Proxy
	connected bool
}

// listenerRequest is the listener names one gRPC stream of a node asks
// for (nil when the stream ended).
type listenerRequest struct {
	nodeID string
	stream uint64
	names  []string
}

// UnusableCertificates gives the Gateway listeners whose certificate
// files the gateway machine cn reported unusable, sorted (GatewayReports).
type UnusableCertificates interface {
	UnusableCertificates(cn string) []string
}

// PublisherOptions is what a Publisher publishes from and into.
type PublisherOptions struct {
	Log   *slog.Logger
	Cache *cache.Cache
	Views ViewSource
	Certs CertSource
	// UnusableCertificates (may be nil) makes gateway proxies' listeners
	// leave out the Gateway listeners it names for their CN; call Refresh
	// for a CN whose answer changed.
	UnusableCertificates UnusableCertificates
}

// NewPublisher returns a publisher of the views of the mesh model; Run
// starts it.
func NewPublisher(o PublisherOptions) *Publisher {
	log, c, views := o.Log, o.Cache, o.Views
	p := &Publisher{
		log: log, cache: c, views: views, certs: o.Certs, unusable: o.UnusableCertificates,
		wake:         make(chan struct{}, 1),
		view:         views.View(),
		workers:      runtime.GOMAXPROCS(0),
		edsWakeEvery: edsWakeEvery,
		groups:       map[groupKey]*group{},
		idle:         map[groupKey]*group{},
		nodes:        map[string]*node{},
		joinCDS:      map[groupKey]*cache.Set{},
		refusing:     map[*node]struct{}{},
		errs:         map[string]string{},
		memo:         render.NewMemo(),
		validators: map[render.Flavor]*render.Validator{
			render.Envoy: render.NewValidator(render.Envoy),
			render.GRPC:  render.NewValidator(render.GRPC),
			// A gateway proxy is an Envoy (gateway_proxy.go in render).
			render.Gateway: render.NewValidator(render.Gateway),
		},
	}
	placeholders, err := render.Secrets([]byte("pending"), []byte("pending"), []byte("pending"))
	if err != nil {
		panic(err) // three non-empty PEMs always render
	}
	for _, s := range placeholders {
		p.pendingSecrets = append(p.pendingSecrets, s)
	}
	p.interned = cache.NewInterner(c, func(ms ...proto.Message) {
		for _, v := range p.validators {
			v.ForgetMessages(ms...)
		}
	})
	p.refusals = refusals.New(refusals.Options{Log: log, Cache: c, Interner: p.interned})
	p.eds = eds.New(eds.Options{Cache: c, Interner: p.interned})
	p.secrets = secrets.New(secrets.Options{Cache: c, Interner: p.interned, Certs: o.Certs})
	return p
}

// ProxyConnected implements Watcher. A proxy joining a rendered Envoy
// group gets the group's clusters at once (see joinCDS), before its join
// is queued, so that the pass taking the join publishes after them.
func (p *Publisher) ProxyConnected(px Proxy) {
	p.mu.Lock()
	if cds := p.joinCDS[groupKey{px.Service, px.Flavor}]; cds != nil {
		p.publish(px.NodeID, resource.ClusterType, cds)
	}
	p.pending = append(p.pending, proxyEvent{px, true})
	p.mu.Unlock()
	p.signal()
}

// setJoinCDS makes cds (nil: none) what an Envoy joining group k gets at
// once (see joinCDS); other flavours get nothing before their pass.
func (p *Publisher) setJoinCDS(k groupKey, cds *cache.Set) {
	if k.flavor != render.Envoy {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cds == nil {
		delete(p.joinCDS, k)
	} else {
		p.joinCDS[k] = cds
	}
}

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
	p.signal()
}

// Refresh renders a connected node's configuration again in the next pass
// (nothing for a node that is not connected).
func (p *Publisher) Refresh(nodeID string) {
	p.mu.Lock()
	if p.refresh == nil {
		p.refresh = map[string]bool{}
	}
	p.refresh[nodeID] = true
	p.mu.Unlock()
	p.signal()
}

func (p *Publisher) enqueue(e proxyEvent) {
	p.mu.Lock()
	p.pending = append(p.pending, e)
	p.mu.Unlock()
	p.signal()
}

// signal wakes Run for a pass.
func (p *Publisher) signal() {
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
		if n := p.nodes[id]; n != nil && n.lds != nil && p.refusals.Changed(p.mesh(), n.refusalNode(), &n.refused, n.lds) {
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

func (p *Publisher) setRefuse(f func(nodeID string, err error)) { p.refuse = f }
