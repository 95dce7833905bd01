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
// [Cache.Forget].
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
// send on the server's buffered channel and are removed when they answer or
// when the server cancels them (at every request and at the end of a stream).
// A node's entry is removed once it has no watches, no published view and no records.
//
// The package knows node IDs, type URLs and resources; it must not import
// osm-vm business packages (catalog, mesh, spec).
package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is an immutable, marshalled xDS resource. Create it with
// [Cache.NewResource]; share it by pointer. Its Any is shared by every
// response that carries it and must never be modified.
type Resource struct {
	name    string
	version string
	typeURL string
	msg     proto.Message
	any     *anypb.Any
	delta   *discovery.Resource
	digest  uint64
}

// Name returns the resource name.
func (r *Resource) Name() string { return r.name }

// Version returns the resource's content-hash version.
func (r *Resource) Version() string { return r.version }

// TypeURL returns the resource's type URL.
func (r *Resource) TypeURL() string { return r.typeURL }

// Message returns the resource message. It must not be modified.
func (r *Resource) Message() proto.Message { return r.msg }

// Set is an immutable set of resources of one type URL, keyed by name.
// It holds its resources sorted by name (no map: sets are many and small,
// one per group of proxies and type, and rebuilt at every change).
type Set struct {
	typeURL string
	sorted  []*Resource
	digest  uint64
	// anys are the resources' Anys for a wildcard response, made at the
	// first one (most sets, such as EDS's, are never sent whole); guarded
	// by the Cache's mutex.
	anys []*anypb.Any
}

// NewSet returns a Set of resources, which must share one type URL and have
// distinct names.
func NewSet(resources ...*Resource) (*Set, error) {
	if slices.Contains(resources, nil) {
		return nil, errNilResource
	}
	rs := slices.Clone(resources)
	if !slices.IsSortedFunc(rs, compareNames) { // callers mostly keep name order
		slices.SortFunc(rs, compareNames)
	}
	return NewSortedSet(rs)
}

// NewSortedSet is NewSet for resources already sorted by name (it checks),
// without copying: the Set keeps rs, which the caller must not modify
// afterwards.
func NewSortedSet(rs []*Resource) (*Set, error) {
	for i, r := range rs {
		if r == nil {
			return nil, errNilResource
		}
		if i == 0 {
			continue
		}
		switch c := compareNames(rs[i-1], r); {
		case c == 0:
			return nil, fmt.Errorf("cache: resource %q appears twice in a set; give each resource a distinct name", r.name)
		case c > 0:
			return nil, fmt.Errorf("cache: resources %q and %q are not in name order", rs[i-1].name, r.name)
		}
	}
	return newSet(rs)
}

var errNilResource = errors.New("cache: nil resource in set")

func compareNames(a, b *Resource) int { return compareStrings(a.name, b.name) }

// newSet returns a Set of sorted, distinct resources (which it keeps).
func newSet(sorted []*Resource) (*Set, error) {
	s := &Set{sorted: sorted}
	for _, r := range sorted {
		if s.typeURL == "" {
			s.typeURL = r.typeURL
		} else if r.typeURL != s.typeURL {
			return nil, fmt.Errorf("cache: resource %q is a %s but the set holds %s", r.name, r.typeURL, s.typeURL)
		}
		s.digest += r.digest
	}
	return s, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// With returns a copy of s in which resources replace those of the same name
// and are added otherwise. s is unchanged.
func (s *Set) With(resources ...*Resource) (*Set, error) {
	byName := make(map[string]*Resource, len(resources))
	for _, r := range resources {
		if r == nil {
			return nil, errNilResource
		}
		byName[r.name] = r
	}
	rs := make([]*Resource, 0, len(s.sorted)+len(byName))
	for _, r := range s.sorted {
		if n := byName[r.name]; n != nil {
			r = n
			delete(byName, r.name)
		}
		rs = append(rs, r)
	}
	if len(byName) > 0 {
		for _, r := range byName {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, compareNames)
	}
	return newSet(rs)
}

// Update returns the Set of rs, which must name the resources of s in
// s's order: new versions of some of them, as when endpoints change. It
// keeps rs, which the caller must not modify afterwards. Cheaper than
// NewSortedSet: names are compared for equality, not order, and only the
// resources that changed are added into the digest again.
func (s *Set) Update(rs []*Resource) (*Set, error) {
	if len(rs) != len(s.sorted) {
		return nil, fmt.Errorf("cache: updating a set of %d resources with %d; build a new set with NewSet", len(s.sorted), len(rs))
	}
	out := &Set{typeURL: s.typeURL, sorted: rs, digest: s.digest}
	for i, r := range rs {
		have := s.sorted[i]
		switch {
		case r == have:
			continue
		case r == nil:
			return nil, errNilResource
		case r.name != have.name:
			return nil, fmt.Errorf("cache: updating resource %q with %q: an update keeps the names; build a new set with NewSet", have.name, r.name)
		case r.typeURL != s.typeURL:
			return nil, fmt.Errorf("cache: resource %q is a %s but the set holds %s", r.name, r.typeURL, s.typeURL)
		}
		out.digest += r.digest - have.digest
	}
	return out, nil
}

// Without returns a copy of s without the named resources.
func (s *Set) Without(names ...string) *Set {
	rs := make([]*Resource, 0, len(s.sorted))
	for _, r := range s.sorted {
		if !slices.Contains(names, r.name) {
			rs = append(rs, r)
		}
	}
	out, _ := newSet(rs) // cannot fail: a subset of a valid set
	return out
}

// Version returns the set's version, a digest of its names and versions.
func (s *Set) Version() string { return digestString(s.digest) }

// TypeURL returns the type URL of the set's resources ("" when empty).
func (s *Set) TypeURL() string { return s.typeURL }

// Len returns the number of resources.
func (s *Set) Len() int { return len(s.sorted) }

// Get returns the named resource, or nil.
func (s *Set) Get(name string) *Resource {
	i, ok := slices.BinarySearchFunc(s.sorted, name, func(r *Resource, name string) int { return compareStrings(r.name, name) })
	if !ok {
		return nil
	}
	return s.sorted[i]
}

// Resources returns the resources sorted by name. The slice must not be modified.
func (s *Set) Resources() []*Resource { return s.sorted }

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
	// Marshals counts resources marshalled by NewResource.
	Marshals uint64
	// Nodes and Watches count the entries currently held.
	Nodes, Watches int
}

// Cache holds the published views and the open watches. Create it with New.
type Cache struct {
	log      *slog.Logger
	marshals atomic.Uint64

	mu    sync.Mutex
	nodes map[string]*node
}

type node struct {
	id    string
	view  map[string]*Set
	sotw  map[*sotwWatch]struct{}
	delta map[*deltaWatch]struct{}
	nacks map[string]NACK
	sent  map[string]*sentState
}

type sentState struct {
	sent, acked     string
	sentAt, ackedAt time.Time
}

type sotwWatch struct {
	req     *gcpcache.Request
	sub     gcpcache.Subscription
	deliver func(gcpcache.Response) bool
}

type deltaWatch struct {
	req *gcpcache.DeltaRequest
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
	c.marshals.Add(1)
	typeURL := "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName())
	version := digestString(fnv(fnvOffset, b))
	a := &anypb.Any{TypeUrl: typeURL, Value: b}
	return &Resource{
		name:    name,
		version: version,
		typeURL: typeURL,
		msg:     msg,
		any:     a,
		delta:   &discovery.Resource{Name: name, Version: version, Resource: a},
		digest:  entryDigest(name, version),
	}, nil
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
	defer c.mu.Unlock()
	n := c.node(nodeID)
	if old := n.view[typeURL]; old == set || (old != nil && old.digest == set.digest && len(old.sorted) == len(set.sorted)) {
		n.view[typeURL] = set
		return nil
	}
	n.view[typeURL] = set
	if len(n.sotw) > 0 {
		for w := range n.sotw {
			if w.req.GetTypeUrl() == typeURL && c.answerSotw(n, w) {
				delete(n.sotw, w)
			}
		}
	}
	if len(n.delta) > 0 {
		for w := range n.delta {
			if w.req.GetTypeUrl() == typeURL && c.answerDelta(n, w) {
				delete(n.delta, w)
			}
		}
	}
	return nil
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
	clear(n.view)
	clear(n.nacks)
	clear(n.sent)
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
			view:  make(map[string]*Set),
			sotw:  make(map[*sotwWatch]struct{}),
			delta: make(map[*deltaWatch]struct{}),
			nacks: make(map[string]NACK),
			sent:  make(map[string]*sentState),
		}
		c.nodes[id] = n
	}
	return n
}

// gc drops n when nothing refers to it any more. Caller holds c.mu.
func (c *Cache) gc(n *node) {
	if len(n.view) == 0 && len(n.sotw) == 0 && len(n.delta) == 0 && len(n.nacks) == 0 {
		delete(c.nodes, n.id)
	}
}

// CreateWatch implements cache.ConfigWatcher for SotW streams: the
// response is sent on ch without blocking.
func (c *Cache) CreateWatch(req *gcpcache.Request, sub gcpcache.Subscription, ch chan gcpcache.Response) (func(), error) {
	return c.WatchSotw(req, sub, func(r gcpcache.Response) bool {
		select {
		case ch <- r:
			return true
		default:
			return false
		}
	}), nil
}

// WatchSotw is CreateWatch for a stream handler that takes its response
// by function (see internal/xds): deliver is called once, with the cache
// locked, and must not block or call the Cache; it reports whether it
// took the response (if not, the watch stays open and is answered again
// at the next publish). cancel closes the watch; it may be called after
// the watch was answered.
func (c *Cache) WatchSotw(req *gcpcache.Request, sub gcpcache.Subscription, deliver func(gcpcache.Response) bool) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(req.GetNode().GetId())
	if req.GetErrorDetail() != nil {
		version, ok := sub.ReturnedResources()[wildcardKey]
		if !ok {
			version = digestString(returnedDigest(sub.ReturnedResources()))
		}
		c.recordNACK(n, req.GetTypeUrl(), version, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	} else if req.GetResponseNonce() != "" {
		n.recordACK(req.GetTypeUrl(), req.GetVersionInfo())
	}
	w := &sotwWatch{req: req, sub: sub, deliver: deliver}
	if c.answerSotw(n, w) {
		c.gc(n)
		return func() {}
	}
	n.sotw[w] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(n.sotw, w)
		c.gc(n)
	}
}

// CreateDeltaWatch implements cache.ConfigWatcher for Delta streams.
func (c *Cache) CreateDeltaWatch(req *gcpcache.DeltaRequest, sub gcpcache.Subscription, ch chan gcpcache.DeltaResponse) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(req.GetNode().GetId())
	if req.GetErrorDetail() != nil {
		var version string
		if st := n.sent[req.GetTypeUrl()]; st != nil {
			version = st.sent // Delta requests carry no version; take the last sent.
		}
		c.recordNACK(n, req.GetTypeUrl(), version, req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	} else if req.GetResponseNonce() != "" {
		if st := n.sent[req.GetTypeUrl()]; st != nil {
			n.recordACK(req.GetTypeUrl(), st.sent)
		}
	}
	w := &deltaWatch{req: req, sub: sub, ch: ch}
	if c.answerDelta(n, w) {
		c.gc(n)
		return func() {}, nil
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

func (n *node) recordSent(typeURL, version string) {
	st := n.sent[typeURL]
	if st == nil {
		st = &sentState{}
		n.sent[typeURL] = st
	}
	st.sent, st.sentAt = version, time.Now()
}

func (n *node) recordACK(typeURL, version string) {
	if st := n.sent[typeURL]; st != nil {
		st.acked, st.ackedAt = version, time.Now()
	}
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
	out := make(map[string]*Set, len(n.view))
	for t, s := range n.view {
		out[t] = s
	}
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
	types := make(map[string]bool)
	for t := range n.view {
		types[t] = true
	}
	for t := range n.sent {
		types[t] = true
	}
	for t := range n.nacks {
		types[t] = true
	}
	out := make([]TypeStatus, 0, len(types))
	for t := range types {
		ts := TypeStatus{TypeURL: t}
		if s := n.view[t]; s != nil {
			ts.Published = s.Version()
		}
		if st := n.sent[t]; st != nil {
			ts.Sent, ts.SentAt, ts.ACKed, ts.ACKedAt = st.sent, st.sentAt, st.acked, st.ackedAt
		}
		if k, ok := n.nacks[t]; ok {
			ts.NACK = &k
		}
		out = append(out, ts)
	}
	slices.SortFunc(out, func(a, b TypeStatus) int { return compareStrings(a.TypeURL, b.TypeURL) })
	return out
}

func (c *Cache) recordNACK(n *node, typeURL, version, nonce, msg string) {
	k := NACK{Node: n.id, TypeURL: typeURL, Version: version, Nonce: nonce, Error: msg, Time: time.Now()}
	n.nacks[typeURL] = k
	c.log.Warn("proxy rejected xDS response", "node", n.id, "type", typeURL, "version", version, "nonce", nonce, "error", msg)
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

// answerSotw sends w its response if the view differs from what the stream
// holds. It reports whether w has been answered. Caller holds c.mu.
func (c *Cache) answerSotw(n *node, w *sotwWatch) bool {
	set := n.view[w.req.GetTypeUrl()]
	if set == nil {
		return false
	}
	returned := w.sub.ReturnedResources()
	var resp *sotwResponse
	if w.sub.IsWildcard() {
		v, ok := returned[wildcardKey]
		if ok && v == set.Version() && len(returned) == 1 {
			return false
		}
		// The stream's record of what it holds is one entry naming the set's
		// version rather than a map of every resource: a wildcard response
		// then costs O(1) per proxy. If the stream later narrows to names,
		// the server drops the entry and the named subset is sent afresh.
		if set.anys == nil && len(set.sorted) > 0 {
			set.anys = make([]*anypb.Any, len(set.sorted))
			for i, r := range set.sorted {
				set.anys[i] = r.any
			}
		}
		resp = &sotwResponse{req: w.req, version: set.Version(), anys: set.anys, returned: map[string]string{wildcardKey: set.Version()}}
	} else {
		subscribed := w.sub.SubscribedResources()
		var sel []*Resource
		for name := range subscribed {
			if r := set.Get(name); r != nil {
				sel = append(sel, r)
			}
		}
		if answered(subscribed, sel, returned) {
			return false
		}
		slices.SortFunc(sel, compareNames)
		// EDS and RDS are not "all resources required" types: once a
		// stream holds them, a response need carry only those that changed
		// (the xDS protocol allows it and Envoy and gRPC rely on it), so a
		// one-endpoint change costs one ClusterLoadAssignment per proxy.
		// Not when a resource the stream holds went away: then the full
		// subset shows the change.
		partial := partialTypes[w.req.GetTypeUrl()] && holds(returned) > 0
		for name, v := range returned {
			if v != absent && set.Get(name) == nil {
				partial = false
			}
		}
		var d uint64
		anys := make([]*anypb.Any, 0, len(sel))
		for _, r := range sel {
			d += r.digest
			if v, ok := returned[r.name]; partial && ok && v == r.version {
				continue
			}
			anys = append(anys, r.any)
		}
		if partial && len(anys) == 0 {
			// Only names the view does not hold were added: send the subset.
			for _, r := range sel {
				anys = append(anys, r.any)
			}
		}
		// Names asked for that the view does not hold are recorded as
		// answered (absent), so the answer is sent once, at once, and
		// again only when they appear: a SotW response that omits an LDS
		// or CDS name tells the client it does not exist, and no client
		// waits in silence for a name the server does not have.
		ret := versionMap(sel)
		for name := range subscribed {
			if _, ok := ret[name]; !ok {
				ret[name] = absent
			}
		}
		resp = &sotwResponse{req: w.req, version: digestString(d), anys: anys, returned: ret}
	}
	if !w.deliver(resp) {
		c.log.Error("xDS stream did not take a response; will retry at the next publish", "node", n.id, "type", w.req.GetTypeUrl())
		return false
	}
	n.recordSent(w.req.GetTypeUrl(), resp.version)
	return true
}

// answerDelta sends w the resources whose versions differ from what the
// stream holds, and the names removed. Caller holds c.mu.
func (c *Cache) answerDelta(n *node, w *deltaWatch) bool {
	set := n.view[w.req.GetTypeUrl()]
	if set == nil {
		return false
	}
	returned := w.sub.ReturnedResources()
	wildcard := w.sub.IsWildcard()
	subscribed := w.sub.SubscribedResources()
	var changed []*discovery.Resource
	var removed []string
	if wildcard {
		for _, r := range set.sorted {
			if v, ok := returned[r.name]; !ok || v != r.version {
				changed = append(changed, r.delta)
			}
		}
	} else {
		for name := range subscribed {
			if r := set.Get(name); r != nil {
				if v, ok := returned[name]; !ok || v != r.version {
					changed = append(changed, r.delta)
				}
			}
		}
		slices.SortFunc(changed, func(a, b *discovery.Resource) int { return compareStrings(a.Name, b.Name) })
	}
	// A name the stream holds that the view no longer does is removed.
	// So is, once, a name it asked for by name that the view does not
	// hold (recorded as answered absent, sent when it appears): Delta
	// clients learn "does not exist" from removed_resources rather than
	// from a timer. (In a wildcard subscription an empty version is
	// go-control-plane's "answer this name", so it is not skipped there.)
	var absentNames []string
	for name, v := range returned {
		_, sub := subscribed[name]
		switch {
		case set.Get(name) != nil:
		case wildcard:
			removed = append(removed, name)
		case sub && v != absent:
			removed = append(removed, name)
			absentNames = append(absentNames, name)
		}
	}
	if !wildcard {
		for name := range subscribed {
			if _, ok := returned[name]; !ok && set.Get(name) == nil {
				removed = append(removed, name)
				absentNames = append(absentNames, name)
			}
		}
	}
	first := w.req.GetResponseNonce() == "" && len(returned) == 0 && wildcard
	if len(changed) == 0 && len(removed) == 0 && !first {
		return false
	}
	slices.Sort(removed)
	next := make(map[string]string, len(returned)+len(changed))
	for k, v := range returned {
		next[k] = v
	}
	for _, r := range changed {
		next[r.Name] = r.Version
	}
	for _, name := range removed {
		delete(next, name)
	}
	for _, name := range absentNames {
		next[name] = absent
	}
	resp := &deltaResponse{
		req:  w.req,
		next: next,
		out: discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: set.Version(),
			Resources:         changed,
			RemovedResources:  removed,
			TypeUrl:           w.req.GetTypeUrl(),
		},
	}
	select {
	case w.ch <- resp:
		n.recordSent(w.req.GetTypeUrl(), resp.out.SystemVersionInfo)
		return true
	default:
		c.log.Error("xDS delta response channel full; will retry at the next publish", "node", n.id, "type", w.req.GetTypeUrl())
		return false
	}
}

// absent is the version recorded in a stream's returned resources for a
// name it asked for and was answered without (the view does not hold it);
// no resource version is empty.
const absent = ""

// answered reports whether the stream already holds the answer to its
// named subscription: each subscribed name at the version of sel, or
// absent when sel does not hold it.
func answered(subscribed map[string]struct{}, sel []*Resource, returned map[string]string) bool {
	if len(subscribed) != len(returned) {
		return false
	}
	for name := range subscribed {
		if _, ok := returned[name]; !ok {
			return false
		}
	}
	held := 0
	for _, r := range sel {
		if v := returned[r.name]; v != r.version {
			return false
		}
		held++
	}
	return held == holds(returned)
}

// holds counts the resources a stream holds (its returned resources
// without the names answered absent).
func holds(returned map[string]string) int {
	n := 0
	for _, v := range returned {
		if v != absent {
			n++
		}
	}
	return n
}

func versionMap(rs []*Resource) map[string]string {
	m := make(map[string]string, len(rs))
	for _, r := range rs {
		m[r.name] = r.version
	}
	return m
}

func returnedDigest(m map[string]string) uint64 {
	var d uint64
	for n, v := range m {
		if v == absent {
			continue // answered without it: not part of the version sent
		}
		d += entryDigest(n, v)
	}
	return d
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// entryDigest hashes one name/version pair; a set's digest is the sum of its
// entries' digests, so it does not depend on order.
func entryDigest(name, version string) uint64 {
	h := fnvString(fnvOffset, name)
	h = fnv(h, []byte{0})
	h = fnvString(h, version)
	// splitmix64 finalizer spreads the bits before summing.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func digestString(d uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(d >> (56 - 8*i))
	}
	return hex.EncodeToString(b[:])
}

type sotwResponse struct {
	req      *gcpcache.Request
	version  string
	anys     []*anypb.Any
	returned map[string]string
}

func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	// A fresh message each call: the server sets its nonce. The Anys are shared.
	return &discovery.DiscoveryResponse{VersionInfo: r.version, Resources: r.anys, TypeUrl: r.req.GetTypeUrl()}, nil
}
func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)             { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.version }
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *sotwResponse) GetContext() context.Context             { return context.Background() }

type deltaResponse struct {
	req  *gcpcache.DeltaRequest
	next map[string]string
	out  discovery.DeltaDiscoveryResponse
}

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return &r.out, nil
}
func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                 { return r.out.SystemVersionInfo, nil }
func (r *deltaResponse) GetResponseVersion() string                        { return r.out.SystemVersionInfo }
func (r *deltaResponse) GetNextVersionMap() map[string]string              { return r.next }
func (r *deltaResponse) GetReturnedResources() map[string]string           { return r.next }
func (r *deltaResponse) GetContext() context.Context                       { return context.Background() }
