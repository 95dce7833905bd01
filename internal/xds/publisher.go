package xds

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
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

// UnusableCertificates gives the Gateway listeners whose certificate
// files the gateway machine cn reported unusable, sorted (GatewayReports).
type UnusableCertificates interface {
	UnusableCertificates(cn string) []string
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

	// refuse ends a proxy's streams, telling it why (given by NewServer,
	// whose Options.Watcher this is, before Run): for a proxy whose configuration
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

// edsWakeEvery is how many proxies an endpoint change's publishing
// answers before it wakes their streams (Publisher.edsWakeEvery).
const edsWakeEvery = 1000

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

func (p *Publisher) setRefuse(f func(nodeID string, err error)) { p.refuse = f }

// Instrument registers the publisher's metric with reg:
// osm_xds_config_generation_seconds, the time a pass takes to render,
// validate and publish a batch of changes. The pass also marks the start of
// a change for the cache's osm_xds_change_to_ack_seconds. Call it before
// Run.
func (p *Publisher) Instrument(reg prometheus.Registerer) error {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "osm_xds_config_generation_seconds",
		Help:    "Time to render, validate and publish one batch of configuration changes.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12),
	})
	if err := reg.Register(h); err != nil {
		return err
	}
	p.generation = h
	return nil
}

// observePass is deferred by pass: it times the pass when instrumented.
func (p *Publisher) observePass(start time.Time) {
	if p.generation != nil {
		p.generation.Observe(time.Since(start).Seconds())
	}
}

// mesh is what render reads: the current View, and the Memo.
func (p *Publisher) mesh() render.Mesh {
	return render.Mesh{View: p.view, Memo: p.memo}
}

// serviceAccount returns the service account of svc's proxies.
func (p *Publisher) serviceAccount(svc mesh.MeshService) mesh.ServiceAccount {
	if info, ok := p.view.Spec().Service(svc); ok {
		return info.ServiceAccount
	}
	return mesh.ServiceAccount{Namespace: svc.Namespace, Name: svc.Name}
}

func (p *Publisher) renderProxy(px Proxy) render.Proxy {
	rp := render.Proxy{Service: px.Service, Flavor: px.Flavor, Address: px.Address, GatewayCertDir: px.GatewayCertDir}
	if px.Flavor == render.Gateway && p.unusable != nil {
		rp.UnusableCertificates = p.unusable.UnusableCertificates(px.CN)
	}
	return rp
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

func (p *Publisher) publish(nodeID, typeURL string, set *cache.Set) {
	if err := p.cache.Publish(nodeID, typeURL, set); err != nil {
		p.log.Error("publish", "node", nodeID, "type", typeURL, "err", err)
	}
}
