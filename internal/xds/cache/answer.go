package cache

// Answering watches: what a SotW or Delta response carries (see "Serving" in the package comment).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// answerSotw sends w its response if the view differs from what the stream
// holds. It reports whether w has been answered. Caller holds c.mu.
func (c *Cache) answerSotw(n *node, w *sotwWatch) bool {
	st := n.state(w.typ, w.req.GetTypeUrl(), false)
	if st == nil || st.view == nil {
		return false
	}
	set := st.view
	a := c.sotwAnswer(w, set)
	if a == nil {
		return false
	}
	resp := &sotwResponse{req: w.req, answer: a}
	if !w.rcv.Deliver(resp) {
		c.log.Error("xDS stream did not take a response; will retry at the next publish", "node", n.id, "type", w.req.GetTypeUrl())
		return false
	}
	c.wakes = append(c.wakes, w.rcv)
	st.recordSent(a.version)
	c.countResponse(n, w.typ)
	return true
}

// sotwAnswer returns what w's stream is to be sent of set, or nil when it
// holds that already. A group's proxies hold the same answers and are
// published the same sets, so the answers are shared where the stream
// says what it holds (w.held): what a stream holding an answer is sent
// when the view becomes a set is worked out once, for the first stream,
// and kept on the answer it held (next); a proxy's ACK of an answer to
// the view it still has costs a pointer comparison. A stream's first
// answer of a set is kept on the set, for the next stream asking for the
// same names. Caller holds c.mu.
func (c *Cache) sotwAnswer(w *sotwWatch, set *Set) *answer {
	switch h := w.held; {
	case h != nil && h.set == set:
		return nil
	case h != nil:
		if a, ok := h.next[set]; ok {
			if a == h {
				return nil // the set is new; what the stream holds answers it
			}
			return a
		}
		a := makeSotwAnswer(w.sub, set)
		if h.next == nil || len(h.next) >= maxNextAnswers {
			h.next = make(map[*Set]*answer, 1)
		}
		if a == nil {
			h.next[set] = h
		} else {
			h.next[set] = a
		}
		return a
	case !w.shared || len(w.sub.ReturnedResources()) > 0:
		return makeSotwAnswer(w.sub, set)
	}
	if w.sub.IsWildcard() {
		if set.wildcard == nil {
			set.wildcard = makeSotwAnswer(w.sub, set)
		}
		return set.wildcard
	}
	subscribed := w.sub.SubscribedResources()
	for _, a := range set.first {
		if sameKeys(subscribed, a.returned) {
			return a
		}
	}
	a := makeSotwAnswer(w.sub, set)
	if a != nil {
		if len(set.first) >= maxFirstAnswers {
			set.first = set.first[1:]
		}
		set.first = append(set.first, a)
	}
	return a
}

// A stream's held answer keeps at most maxNextAnswers answers to sets
// that came after it (a stream holds it until it ACKs the next); a set
// keeps maxFirstAnswers first answers, one per set of names asked for
// (a group's proxies ask for the same names).
const (
	maxNextAnswers  = 8
	maxFirstAnswers = 4
)

// sameKeys reports whether returned has exactly the subscribed names.
func sameKeys(subscribed map[string]struct{}, returned map[string]string) bool {
	if len(subscribed) != len(returned) {
		return false
	}
	for name := range subscribed {
		if _, ok := returned[name]; !ok {
			return false
		}
	}
	return true
}

// makeSotwAnswer makes the answer to a stream subscribed as sub, holding
// what sub returned, of set; nil if it holds that already.
func makeSotwAnswer(sub gcpcache.Subscription, set *Set) *answer {
	returned := sub.ReturnedResources()
	if sub.IsWildcard() {
		v, ok := returned[wildcardKey]
		if ok && v == set.Version() && len(returned) == 1 {
			return nil
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
		return &answer{set: set, version: set.Version(), anys: set.anys, returned: map[string]string{wildcardKey: set.Version()}}
	}
	subscribed := sub.SubscribedResources()
	var sel []*Resource
	for name := range subscribed {
		if r := set.Get(name); r != nil {
			sel = append(sel, r)
		}
	}
	if answered(subscribed, sel, returned) {
		return nil
	}
	slices.SortFunc(sel, compareNames)
	// EDS and RDS are not "all resources required" types: once a
	// stream holds them, a response need carry only those that changed
	// (the xDS protocol allows it and Envoy and gRPC rely on it), so a
	// one-endpoint change costs one ClusterLoadAssignment per proxy.
	// Not when a resource the stream holds went away: then the full
	// subset shows the change.
	partial := partialTypes[set.typeURL] && holds(returned) > 0
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
	return &answer{set: set, version: digestString(d), anys: anys, returned: ret}
}

// answerDelta sends w the resources whose versions differ from what the
// stream holds, and the names removed. Caller holds c.mu.
func (c *Cache) answerDelta(n *node, w *deltaWatch) bool {
	st := n.state(w.typ, w.req.GetTypeUrl(), false)
	if st == nil || st.view == nil {
		return false
	}
	set := st.view
	returned := w.sub.ReturnedResources()
	wildcard := w.sub.IsWildcard()
	subscribed := w.sub.SubscribedResources()
	var changed []*discovery.Resource
	var removed []string
	if wildcard {
		for _, r := range set.sorted {
			if v, ok := returned[r.name]; !ok || v != r.version {
				changed = append(changed, r.deltaResource())
			}
		}
	} else {
		for name := range subscribed {
			if r := set.Get(name); r != nil {
				if v, ok := returned[name]; !ok || v != r.version {
					changed = append(changed, r.deltaResource())
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
		st.recordSent(resp.out.SystemVersionInfo)
		c.countResponse(n, w.typ)
		return true
	default:
		c.log.Error("xDS delta response channel full; will retry at the next publish", "node", n.id, "type", w.req.GetTypeUrl())
		return false
	}
}

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

// answer is what a SotW response carries, shared by the responses to
// every stream that held the same and was sent the same; immutable but
// for next, which is guarded by the Cache's mutex.
type answer struct {
	set      *Set // the view answered
	version  string
	anys     []*anypb.Any
	returned map[string]string // what a stream holds once sent it: never modified
	// next are the answers to a stream holding this one when its view
	// became the key (this answer itself: nothing to send).
	next map[*Set]*answer

	// wire is the answer's DiscoveryResponse encoded (Wire), kept while
	// some stream sends it: the streams of a group share one encoding,
	// and an answer held by one proxy alone does not keep a copy.
	wireMu sync.Mutex
	wire   weak.Pointer[Wire]
}

// Wire is a DiscoveryResponse encoded without its nonce (see
// [sotwResponse.Wire]); Bytes must not be modified.
type Wire struct{ Bytes []byte }

type sotwResponse struct {
	req *gcpcache.Request
	*answer
}

func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	// A fresh message each call: the server sets its nonce. The Anys are shared.
	return &discovery.DiscoveryResponse{VersionInfo: r.version, Resources: r.anys, TypeUrl: r.req.GetTypeUrl()}, nil
}
func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)             { return r.version, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.version }

// Wire returns r's DiscoveryResponse encoded without a nonce, which the
// sender appends: one encoding for the responses of one answer, kept
// while a sender holds it.
func (r *sotwResponse) Wire() (*Wire, error) {
	a := r.answer
	a.wireMu.Lock()
	defer a.wireMu.Unlock()
	if w := a.wire.Value(); w != nil {
		return w, nil
	}
	b, err := proto.Marshal(&discovery.DiscoveryResponse{VersionInfo: a.version, Resources: a.anys, TypeUrl: r.req.GetTypeUrl()})
	if err != nil {
		return nil, fmt.Errorf("cache: encoding a response of %s: %w", r.req.GetTypeUrl(), err)
	}
	w := &Wire{Bytes: b}
	a.wire = weak.Make(w)
	return w, nil
}

// GetReturnedResources returns what the stream holds once sent r. The map
// may be shared with other streams' responses (see [Cache.WatchSotw]).
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
