// Package cache is an xDS resource cache for go-control-plane's server that
// marshals each resource version once and shares it between every proxy that
// receives it.
//
// # Model
//
// A [Resource] is an immutable xDS resource: a name, a content-hash version
// and its marshalled Any, computed once by [Cache.NewResource]. A [Set] is an
// immutable collection of resources of one type URL; it too is shared by
// pointer, and its version is derived from the names and versions it holds.
//
// A proxy's view is, per type URL, the Set the producer has published for it
// with [Cache.Publish]. Publishing the Set a node already has, or one with the
// same version, pushes nothing; publishing a changed Set evaluates only that
// node's open watches of that type. Producers keep unchanged resources (and
// unchanged Sets) by pointer, so publishing the same change to many proxies
// costs one marshal per changed resource and O(1) per proxy sharing a Set.
//
// # Serving
//
// Cache implements go-control-plane's cache.Cache (SotW and Delta, ADS or
// not). The response to a SotW request is the requested subset of the view
// (all of it for a wildcard request); a request naming resources the view
// does not hold is answered at once with those it does hold (possibly
// none), and again when the missing ones appear. For EDS and RDS, once a stream holds resources, a
// response carries only the ones whose version changed (the others are
// still counted in its version). Nothing is sent for a type until the producer has
// published a Set of that type for the node. A SotW response version is the
// digest of the names and versions sent, so an unchanged view is never resent.
//
// # NACKs
//
// A request carrying error_detail is recorded (see [Cache.NACKs] and
// [Cache.Status]); the rejected version is not sent again, only a newer one,
// and the proxy keeps its last good config. A node's records are dropped by
// [Cache.Forget]. The cache does not log NACKs, nor bound their messages:
// the xDS server does both as it receives them, knowing which proxy sent
// them.
//
// Delta responses carry only the resources whose versions differ from those
// the stream holds (including initial_resource_versions after a reconnect)
// and the names removed from the view; a name subscribed to that the view
// does not hold is answered once, at once, in removed_resources, and sent
// when it appears.
//
// Not supported: resource TTLs and heartbeats, and REST (Fetch).
//
// # Concurrency
//
// All methods are safe for concurrent use. Watches answer by a non-blocking
// send on the server's buffered channel (CreateWatch, CreateDeltaWatch) or
// by handing the response to the stream's Receiver (WatchSotw), and are
// removed when they answer or when the server cancels them (at every
// request and at the end of a stream). A Receiver is woken after the call
// that answered it returns, or when the Batch it was answered in ends.
//
// SotW answers are shared: streams that held the same and are published
// the same set are sent one answer, worked out once (WatchSotw's held),
// and its encoding is made once for all of them (sotwResponse.Wire).
// A node's entry is removed once it has no watches, no published view and no records.
//
// The package knows node IDs, type URLs and resources; it must not import
// osm-vm business packages (catalog, mesh, spec).
package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

var errNilResource = errors.New("cache: nil resource in set")

// NACK records a request that rejected a response.
type NACK struct {
	Node    string
	TypeURL string
	// Version is the version the proxy rejected.
	Version string
	Nonce   string
	Error   string
	Time    time.Time
}

// TypeStatus is what the cache knows of one type of one node's view, for the
// debug API.
type TypeStatus struct {
	TypeURL string
	// Published is the version of the set the producer published.
	Published string
	// Sent is the version of the last response sent, and ACKed the last
	// version the proxy acknowledged. For Delta streams the versions are set
	// versions, and an ACK is taken to acknowledge the last response sent.
	Sent, ACKed     string
	SentAt, ACKedAt time.Time
	// NACK is the last rejection of this type, if any.
	NACK *NACK
}

// Stats are counters for tests, metrics and the debug API.
type Stats struct {
	// Marshals counts the resources made: marshalled by NewResource, or
	// encoded by their producer (NewEncodedResource).
	Marshals uint64
	// Nodes and Watches count the entries currently held.
	Nodes, Watches int
}

// Cache holds the published views and the open watches. Create it with New.
type Cache struct {
	log      *slog.Logger
	marshals atomic.Uint64
	// typeURLs holds the type URL of each message type NewResource has
	// seen (protoreflect.FullName -> string), so that the resources of one
	// type share one string.
	typeURLs sync.Map

	mu    sync.Mutex
	nodes map[string]*node
	// metrics and the current change, when instrumented (metrics.go).
	metrics *metrics
	current *change
	// wakes are the receivers given responses and not yet woken;
	// batches counts the open Batches, which wake them when the last
	// ends.
	wakes   []Receiver
	batches int
}

// Receiver is where a SotW watch's response goes (see WatchSotw).
type Receiver interface {
	// Deliver takes the response, with the cache locked: it must not
	// block or call the Cache. It reports whether it took it (if not,
	// the watch stays open and is answered again at the next publish).
	Deliver(gcpcache.Response) bool
	// Wake has the stream send what it was delivered. It is called
	// without the cache's lock, once the call that delivered returns,
	// or when the Batch it was delivered in ends.
	Wake()
}

// Batch holds back the wake-ups of the streams that Publish answers
// until the returned end is called (which must be, once). A fan-out of
// one change to thousands of proxies publishes to them all first and
// the streams send after: woken one by one as they are answered, the
// streams ran before the publisher that woke them, which waited behind
// them for the CPU (an endpoint change to 10,000 proxies took 400-600
// ms of wall time to publish, 40-55 ms without them). Batches nest.
func (c *Cache) Batch() (end func()) {
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.batches--
			c.unlockAndWake()
		})
	}
}

// unlockAndWake unlocks c.mu and wakes the receivers delivered to, unless
// a batch is open. Caller holds c.mu.
func (c *Cache) unlockAndWake() {
	if c.batches > 0 || len(c.wakes) == 0 {
		c.mu.Unlock()
		return
	}
	wakes := c.wakes
	c.wakes = nil
	c.mu.Unlock()
	for _, r := range wakes {
		r.Wake()
	}
}

type node struct {
	id string
	// types is the node's state of each type URL osm-server serves, in
	// TypeURLs' order; other, of any other type URL (nil until one is
	// published or sent). An array, not a map keyed by type URL: an
	// endpoint change's publish to 10,000 proxies spent a quarter of its
	// CPU looking up 67-byte type URLs (docs/performance.md, the
	// twenty-seventh round).
	types [numTypes - 1]typeState
	other map[string]*typeState
	sotw  map[*sotwWatch]struct{}
	delta map[*deltaWatch]struct{}
	nacks map[string]NACK
	// awaiting is, per type (typeIndex), the changes to its view not yet
	// ACKed, oldest first, and carried how many of them the last response
	// sent carried: only an ACK of that response answers them (metrics.go).
	awaiting [numTypes][]*change
	carried  [numTypes]int
	// publishedIn is, per type, the change its view was last published
	// in (a proxy that asks later joins it).
	publishedIn [numTypes]*change
	// served and asked have bit typeIndex set for each type a response was
	// sent of, and a request arrived of.
	served, asked uint8
}

// typeState is a node's state of one type URL: the set published for it
// (nil until one is) and what was last sent and ACKed of it (sentAt is
// zero until a response is sent).
type typeState struct {
	view            *Set
	sent, acked     string
	sentAt, ackedAt time.Time
}

// wasSent reports whether a response of the type was sent.
func (st *typeState) wasSent() bool { return !st.sentAt.IsZero() }

// state returns n's state of the type URL typeURL, whose TypeIndex is i;
// for a type URL not in TypeURLs, nil when n holds none and create is
// false.
func (n *node) state(i int, typeURL string, create bool) *typeState {
	if i >= 0 {
		return &n.types[i]
	}
	st := n.other[typeURL]
	if st == nil && create {
		if n.other == nil {
			n.other = make(map[string]*typeState)
		}
		st = &typeState{}
		n.other[typeURL] = st
	}
	return st
}

// view returns the set published to n of the type URL typeURL, whose
// TypeIndex is i, or nil.
func (n *node) view(i int, typeURL string) *Set {
	if st := n.state(i, typeURL, false); st != nil {
		return st.view
	}
	return nil
}

// states calls f with each type URL n holds a state of.
func (n *node) states(f func(typeURL string, st *typeState)) {
	for i := range n.types {
		if st := &n.types[i]; st.view != nil || st.wasSent() {
			f(TypeURLs[i], st)
		}
	}
	for t, st := range n.other {
		f(t, st)
	}
}

type sotwWatch struct {
	req *gcpcache.Request
	typ int // TypeIndex(req.TypeUrl)
	sub gcpcache.Subscription
	rcv Receiver
	// held is the answer the stream holds, when it says (WatchSotw);
	// shared, that its responses' returned maps may be shared.
	held   *answer
	shared bool
}

type deltaWatch struct {
	req *gcpcache.DeltaRequest
	typ int // TypeIndex(req.TypeUrl)
	sub gcpcache.Subscription
	ch  chan gcpcache.DeltaResponse
}

var _ gcpcache.Cache = (*Cache)(nil)

// New returns an empty Cache.
func New(log *slog.Logger) *Cache {
	return &Cache{log: log, nodes: make(map[string]*node)}
}

// NewResource marshals msg once (deterministically) and returns it as an
// immutable Resource whose version is a hash of its content.
func (c *Cache) NewResource(name string, msg proto.Message) (*Resource, error) {
	if name == "" {
		return nil, errors.New("cache: resource name is empty")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("cache: marshalling resource %q: %w", name, err)
	}
	r := c.fill(&resourceBlock{}, name, c.typeURLOf(msg), b)
	r.msg = msg
	return r, nil
}

// NewEncodedResource returns, as NewResource does, the Resource of b, a
// message of typ's type already encoded as protobuf-go's deterministic
// marshal would encode it (a producer that writes a resource's bytes
// directly, such as render's load assignments). Its message is decoded
// from b at the first call of Message (for debugging), not before: it
// is never built to be sent. typ is only read for its type (a nil
// pointer of it will do); refs are the resources it references (see
// Resource.References).
func (c *Cache) NewEncodedResource(name string, typ proto.Message, b []byte, refs ...Reference) (*Resource, error) {
	if name == "" {
		return nil, errors.New("cache: resource name is empty")
	}
	blk := &encodedBlock{}
	r := c.fill(&blk.resourceBlock, name, c.typeURLOf(typ), b)
	blk.enc.typ, blk.enc.refs = typ.ProtoReflect().Type(), refs
	r.enc = &blk.enc
	return r, nil
}

// fill makes blk the Resource of b, a message's encoding, and returns it.
func (c *Cache) fill(blk *resourceBlock, name, typeURL string, b []byte) *Resource {
	c.marshals.Add(1)
	version := digestString(xxhash.Sum64(b)) // the content's hash (xxHash: fnv, byte by byte, was 3% of a full render)
	blk.any.TypeUrl, blk.any.Value = typeURL, b
	r := &blk.r
	r.name, r.version, r.typeURL, r.any = name, version, typeURL, &blk.any
	r.digest = entryDigest(name, version)
	r.key = r.digest ^ xxhash.Sum64String(typeURL)
	return r
}

// resourceBlock is a Resource with its Any: one allocation for the
// Resource and the message a SotW response hands out. The Delta
// resource is made when a Delta stream is first sent it (most
// deployments' proxies speak SotW; it is 136 bytes a Resource).
type resourceBlock struct {
	r   Resource
	any anypb.Any
}

// encodedBlock is an encoded Resource's block, with its encoding.
type encodedBlock struct {
	resourceBlock
	enc encoding
}

// typeURLOf returns msg's type URL, one string per type (see typeURLs).
func (c *Cache) typeURLOf(msg proto.Message) string {
	name := msg.ProtoReflect().Descriptor().FullName()
	if u, ok := c.typeURLs.Load(name); ok {
		return u.(string)
	}
	u, _ := c.typeURLs.LoadOrStore(name, "type.googleapis.com/"+string(name))
	return u.(string)
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Marshals: c.marshals.Load(), Nodes: len(c.nodes)}
	for _, n := range c.nodes {
		s.Watches += len(n.sotw) + len(n.delta)
	}
	return s
}

// Publish sets node's view of typeURL to set and answers that node's open
// watches of that type if the set's version changed.
func (c *Cache) Publish(nodeID, typeURL string, set *Set) error {
	if set == nil {
		return fmt.Errorf("cache: publishing a nil set of %s for node %q; publish an empty set instead", typeURL, nodeID)
	}
	if set.typeURL != "" && set.typeURL != typeURL {
		return fmt.Errorf("cache: publishing a set of %s as %s for node %q", set.typeURL, typeURL, nodeID)
	}
	c.mu.Lock()
	c.publish(nodeID, typeURL, set)
	c.unlockAndWake()
	return nil
}

// publish is Publish. Caller holds c.mu.
func (c *Cache) publish(nodeID, typeURL string, set *Set) {
	n := c.node(nodeID)
	ti := TypeIndex(typeURL)
	st := n.state(ti, typeURL, true)
	if old := st.view; old == set || (old != nil && old.digest == set.digest && len(old.sorted) == len(set.sorted)) {
		st.view = set
		return
	}
	st.view = set
	if c.current != nil {
		c.await(n, metricSlot(ti))
	}
	// watching and answered count this type's watches, and those answered.
	watching, answered := 0, 0
	if len(n.sotw) > 0 {
		for w := range n.sotw {
			if w.typ == ti && (ti >= 0 || w.req.GetTypeUrl() == typeURL) {
				watching++
				if c.answerSotw(n, w) {
					answered++
					delete(n.sotw, w)
				}
			}
		}
	}
	if len(n.delta) > 0 {
		for w := range n.delta {
			if w.typ == ti && (ti >= 0 || w.req.GetTypeUrl() == typeURL) {
				watching++
				if c.answerDelta(n, w) {
					answered++
					delete(n.delta, w)
				}
			}
		}
	}
	if watching > 0 && answered == 0 && c.metrics != nil {
		c.unaffected(n, metricSlot(ti))
	}
}

// Forget removes node's view and NACK records. Open watches stay open and
// are answered if the node is published again.
func (c *Cache) Forget(nodeID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[nodeID]
	if !ok {
		return
	}
	n.types = [numTypes - 1]typeState{}
	n.other = nil
	clear(n.nacks)
	c.forgetChanges(n)
	c.gc(n)
}

// NACKs returns the last NACK recorded per node and type, sorted by node and type.
func (c *Cache) NACKs() []NACK {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []NACK
	for _, n := range c.nodes {
		for _, k := range n.nacks {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b NACK) int {
		if r := compareStrings(a.Node, b.Node); r != 0 {
			return r
		}
		return compareStrings(a.TypeURL, b.TypeURL)
	})
	return out
}

func (c *Cache) node(id string) *node {
	n, ok := c.nodes[id]
	if !ok {
		n = &node{
			id:    id,
			sotw:  make(map[*sotwWatch]struct{}),
			delta: make(map[*deltaWatch]struct{}),
			nacks: make(map[string]NACK),
		}
		c.nodes[id] = n
	}
	return n
}

// gc drops n when nothing refers to it any more. Caller holds c.mu.
func (c *Cache) gc(n *node) {
	if len(n.sotw) == 0 && len(n.delta) == 0 && len(n.nacks) == 0 && !n.hasView() {
		delete(c.nodes, n.id)
	}
}

// hasView reports whether a set of any type was published to n.
func (n *node) hasView() bool {
	for i := range n.types {
		if n.types[i].view != nil {
			return true
		}
	}
	for _, st := range n.other {
		if st.view != nil {
			return true
		}
	}
	return false
}

// CreateWatch implements cache.ConfigWatcher for SotW streams: the
// response is sent on ch without blocking.
func (c *Cache) CreateWatch(req *gcpcache.Request, sub gcpcache.Subscription, ch chan gcpcache.Response) (func(), error) {
	// go-control-plane's server edits the returned resources it is given.
	return c.watchSotw(&sotwWatch{req: req, typ: TypeIndex(req.GetTypeUrl()), sub: sub, rcv: chanReceiver(ch)}), nil
}

// chanReceiver sends a response on a go-control-plane server's channel
// without blocking; its server is woken by the send.
type chanReceiver chan gcpcache.Response

func (ch chanReceiver) Deliver(r gcpcache.Response) bool {
	select {
	case ch <- r:
		return true
	default:
		return false
	}
}

func (chanReceiver) Wake() {}

// WatchSotw is CreateWatch for a stream handler that takes its response
// as a Receiver (see internal/xds): its Deliver is called once, and Wake
// after. The Watch's Cancel closes the watch; it may be called after the
// watch was answered. replace, if not nil, is a watch of the stream's
// that the new one replaces: it is closed in the same hold of the cache's
// lock (a proxy's ACK closes one watch and opens the next), so its
// subscription must not have been changed since it was opened.
//
// held is the response the stream last sent of the type, if the names
// it asks for are still those that response answered (nil otherwise):
// the stream then holds that response's returned resources, and the
// cache answers it from what it worked out for other streams that held
// the same. The returned-resources maps of the responses WatchSotw
// delivers are shared between streams: the caller must not modify them
// (clone one before a subscription change edits it).
func (c *Cache) WatchSotw(req *gcpcache.Request, sub gcpcache.Subscription, held gcpcache.Response, rcv Receiver, replace *Watch) *Watch {
	w := &sotwWatch{req: req, typ: TypeIndex(req.GetTypeUrl()), sub: sub, rcv: rcv, shared: true}
	if r, ok := held.(*sotwResponse); ok && r.GetRequest().GetTypeUrl() == req.GetTypeUrl() {
		w.held = r.answer
	}
	c.mu.Lock()
	defer c.unlockAndWake()
	if replace != nil {
		replace.cancelLocked()
	}
	return c.watchSotwLocked(w)
}

// Watch is a SotW watch WatchSotw opened (or answered at once).
type Watch struct {
	c *Cache
	n *node
	// w is nil when the watch was answered at once or has been
	// cancelled; a watch a publish answered is no longer in n.sotw, and
	// cancelling it only drops the node's entry if nothing else holds it.
	w *sotwWatch
}

// Cancel closes the watch.
func (w *Watch) Cancel() {
	if w == nil || w.w == nil {
		return
	}
	w.c.mu.Lock()
	w.cancelLocked()
	w.c.mu.Unlock()
}

// cancelLocked is Cancel. Caller holds the cache's lock.
func (w *Watch) cancelLocked() {
	if w.w == nil {
		return
	}
	delete(w.n.sotw, w.w)
	w.c.gc(w.n)
	w.w = nil
}

func (c *Cache) watchSotw(w *sotwWatch) (cancel func()) {
	c.mu.Lock()
	defer c.unlockAndWake()
	return c.watchSotwLocked(w).Cancel
}

// watchSotwLocked opens w, or answers it at once. Caller holds c.mu.
func (c *Cache) watchSotwLocked(w *sotwWatch) *Watch {
	req, sub := w.req, w.sub
	n := c.node(req.GetNode().GetId())
	c.asked(n, req.GetTypeUrl())
	if req.GetErrorDetail() != nil {
		version, ok := sub.ReturnedResources()[wildcardKey]
		if !ok {
			version = digestString(returnedDigest(sub.ReturnedResources()))
		}
		c.recordNACK(n, req.GetTypeUrl(), version, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	} else if req.GetResponseNonce() != "" {
		if st := n.state(w.typ, req.GetTypeUrl(), false); st != nil && st.wasSent() {
			st.acked, st.ackedAt = req.GetVersionInfo(), time.Now()
			if c.metrics != nil && st.sent == req.GetVersionInfo() {
				c.acked(n, metricSlot(w.typ))
			}
		}
	}
	if c.answerSotw(n, w) {
		c.gc(n)
		return &Watch{c: c, n: n}
	}
	if c.metrics != nil && n.view(w.typ, req.GetTypeUrl()) != nil {
		c.unaffected(n, metricSlot(w.typ))
	}
	n.sotw[w] = struct{}{}
	return &Watch{c: c, n: n, w: w}
}

// CreateDeltaWatch implements cache.ConfigWatcher for Delta streams.
func (c *Cache) CreateDeltaWatch(req *gcpcache.DeltaRequest, sub gcpcache.Subscription, ch chan gcpcache.DeltaResponse) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(req.GetNode().GetId())
	c.asked(n, req.GetTypeUrl())
	w := &deltaWatch{req: req, typ: TypeIndex(req.GetTypeUrl()), sub: sub, ch: ch}
	st := n.state(w.typ, req.GetTypeUrl(), false)
	if req.GetErrorDetail() != nil {
		var version string
		if st != nil && st.wasSent() {
			version = st.sent // Delta requests carry no version; take the last sent.
		}
		c.recordNACK(n, req.GetTypeUrl(), version, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	} else if req.GetResponseNonce() != "" && st != nil && st.wasSent() {
		st.acked, st.ackedAt = st.sent, time.Now()
		if c.metrics != nil {
			c.acked(n, metricSlot(w.typ))
		}
	}
	if c.answerDelta(n, w) {
		c.gc(n)
		return func() {}, nil
	}
	if c.metrics != nil && n.view(w.typ, req.GetTypeUrl()) != nil {
		c.unaffected(n, metricSlot(w.typ))
	}
	n.delta[w] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(n.delta, w)
		c.gc(n)
	}, nil
}

// Fetch implements cache.ConfigFetcher; REST xDS is not served.
func (c *Cache) Fetch(context.Context, *gcpcache.Request) (gcpcache.Response, error) {
	return nil, errors.New("cache: REST fetch is not supported; use ADS")
}

func (st *typeState) recordSent(version string) {
	st.sent, st.sentAt = version, time.Now()
}

// View returns the sets published for node, by type URL (nil for a node it
// does not hold). The sets are immutable and may be read freely.
func (c *Cache) View(nodeID string) map[string]*Set {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[nodeID]
	if !ok {
		return nil
	}
	out := make(map[string]*Set)
	n.states(func(t string, st *typeState) {
		if st.view != nil {
			out[t] = st.view
		}
	})
	return out
}

// Status returns what the cache knows of node's view, per type URL, sorted by
// type URL; nil for a node it does not hold.
func (c *Cache) Status(nodeID string) []TypeStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[nodeID]
	if !ok {
		return nil
	}
	types := make(map[string]*TypeStatus)
	n.states(func(t string, st *typeState) {
		ts := &TypeStatus{TypeURL: t}
		if st.view != nil {
			ts.Published = st.view.Version()
		}
		if st.wasSent() {
			ts.Sent, ts.SentAt, ts.ACKed, ts.ACKedAt = st.sent, st.sentAt, st.acked, st.ackedAt
		}
		types[t] = ts
	})
	for t, k := range n.nacks {
		if types[t] == nil {
			types[t] = &TypeStatus{TypeURL: t}
		}
		types[t].NACK = &k
	}
	out := make([]TypeStatus, 0, len(types))
	for _, ts := range types {
		out = append(out, *ts)
	}
	slices.SortFunc(out, func(a, b TypeStatus) int { return compareStrings(a.TypeURL, b.TypeURL) })
	return out
}

func (c *Cache) recordNACK(n *node, typeURL, version, nonce, msg string) {
	k := NACK{Node: n.id, TypeURL: typeURL, Version: version, Nonce: nonce, Error: msg, Time: time.Now()}
	n.nacks[typeURL] = k
	c.countNACK(typeURL)
}

// partialTypes are the type URLs whose SotW responses may carry only the
// resources that changed.
var partialTypes = map[string]bool{
	"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment": true,
	"type.googleapis.com/envoy.config.route.v3.RouteConfiguration":       true,
}

// wildcardKey is the one entry of the returned-resources map of a SotW
// wildcard response; no resource name starts with a NUL byte.
const wildcardKey = "\x00wildcard-version"

// absent is the version recorded in a stream's returned resources for a
// name it asked for and was answered without (the view does not hold it);
// no resource version is empty.
const absent = ""

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)
