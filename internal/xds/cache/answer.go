package cache

// Answering watches: what a SotW or Delta response carries (see "Serving" in the package comment).

import (
	"context"
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

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
	c.countResponse(n, w.req.GetTypeUrl())
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
		c.countResponse(n, w.req.GetTypeUrl())
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
