// Package catalog is the mesh model. The Catalog merges the endpoints that
// provider instances discover into an immutable, versioned Snapshot; the
// Model joins that with the specification, the connected proxies and the
// startup grace into an immutable, versioned View (the specification, each
// service's participant endpoints, the trust domain, and what changed), which
// is everything xDS rendering reads. Both tell subscribers when a new one is
// published.
//
// Endpoints of one service may come from several providers (two static
// files, a cluster and a scale set); the catalog keeps each provider's
// contribution separately, so a provider's full resync replaces only its own
// endpoints. Readers never lock: a Snapshot is never modified after it is
// published, and publishing one copies only the service map, sharing the
// unchanged services' endpoint slices.
//
// The catalog imports only internal/mesh and internal/spec. It knows nothing
// about plugins, xDS or Envoy: the xDS server tells it of connected proxies
// through Model.ProxyConnected and ProxyDisconnected.
package catalog

import (
	"maps"
	"slices"
	"sync"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Snapshot is an immutable view of every service's endpoints.
type Snapshot struct {
	// Version increases by one with every published change.
	Version uint64
	// services maps each service to its merged endpoints.
	services map[mesh.MeshService]*ServiceEndpoints
	// delta lists the services that changed since the snapshot of
	// version Version-1 (sorted), so Changed against that one costs what
	// changed, not the size of the mesh.
	delta []mesh.MeshService
}

// ServiceEndpoints is one service's merged endpoints at a version.
type ServiceEndpoints struct {
	Service mesh.MeshService
	// Version is the snapshot version at which this service last changed.
	Version uint64
	// Endpoints are sorted by address, then provider; an address reported
	// by two providers appears once per provider.
	Endpoints []mesh.Endpoint
}

// Services returns every service, sorted.
func (s *Snapshot) Services() []mesh.MeshService {
	out := slices.Collect(maps.Keys(s.services))
	slices.SortFunc(out, mesh.MeshService.Compare)
	return out
}

// Len returns the number of services.
func (s *Snapshot) Len() int { return len(s.services) }

// Endpoints returns a service's endpoints and whether the service is known.
// The returned value must not be modified.
func (s *Snapshot) Endpoints(svc mesh.MeshService) (*ServiceEndpoints, bool) {
	se, ok := s.services[svc]
	return se, ok
}

// Changed returns the services whose endpoints differ between old and s
// (added, changed or removed), sorted. A nil old means every service.
func (s *Snapshot) Changed(old *Snapshot) []mesh.MeshService {
	if old != nil && old.Version+1 == s.Version && s.delta != nil {
		return slices.Clone(s.delta)
	}
	var out []mesh.MeshService
	for svc, se := range s.services {
		if old == nil {
			out = append(out, svc)
			continue
		}
		if prev, ok := old.services[svc]; !ok || prev.Version != se.Version {
			out = append(out, svc)
		}
	}
	if old != nil {
		for svc := range old.services {
			if _, ok := s.services[svc]; !ok {
				out = append(out, svc)
			}
		}
	}
	slices.SortFunc(out, mesh.MeshService.Compare)
	return out
}

// Catalog holds the current snapshot and each provider's contribution.
// It is safe for concurrent use.
type Catalog struct {
	mu sync.Mutex
	// bySource[provider][service] is what that provider last reported.
	bySource map[string]map[mesh.MeshService][]mesh.Endpoint
	current  *Snapshot
	subs     map[chan struct{}]struct{}
}

// New returns an empty catalog at version 0.
func New() *Catalog {
	return &Catalog{
		bySource: map[string]map[mesh.MeshService][]mesh.Endpoint{},
		current:  &Snapshot{services: map[mesh.MeshService]*ServiceEndpoints{}},
		subs:     map[chan struct{}]struct{}{},
	}
}

// Snapshot returns the current snapshot.
func (c *Catalog) Snapshot() *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// Subscribe returns a channel that receives a value whenever a new snapshot
// is published. Notifications coalesce: a slow reader sees one signal for
// many changes and reads the latest Snapshot. Call cancel when done.
func (c *Catalog) Subscribe() (notify <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.subs[ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.subs, ch)
		c.mu.Unlock()
	}
}

// SetEndpoints records that provider reports eps for svc (its complete
// current set). An empty eps keeps the service known with no endpoints.
func (c *Catalog) SetEndpoints(provider string, svc mesh.MeshService, eps []mesh.Endpoint) {
	c.update(provider, func(src map[mesh.MeshService][]mesh.Endpoint) []mesh.MeshService {
		src[svc] = normalize(provider, eps)
		return []mesh.MeshService{svc}
	})
}

// DeleteService records that provider no longer reports svc.
func (c *Catalog) DeleteService(provider string, svc mesh.MeshService) {
	c.update(provider, func(src map[mesh.MeshService][]mesh.Endpoint) []mesh.MeshService {
		delete(src, svc)
		return []mesh.MeshService{svc}
	})
}

// ReplaceProvider replaces everything provider reports with all, as after a
// full list. Services it no longer reports are dropped from its share.
func (c *Catalog) ReplaceProvider(provider string, all map[mesh.MeshService][]mesh.Endpoint) {
	c.update(provider, func(src map[mesh.MeshService][]mesh.Endpoint) []mesh.MeshService {
		touched := slices.Collect(maps.Keys(src))
		clear(src)
		for svc, eps := range all {
			src[svc] = normalize(provider, eps)
			touched = append(touched, svc)
		}
		return touched
	})
}

// RemoveProvider drops everything provider reported.
func (c *Catalog) RemoveProvider(provider string) {
	c.ReplaceProvider(provider, nil)
}

// update applies fn to provider's share and publishes a new snapshot if any
// touched service's merged endpoints changed.
func (c *Catalog) update(provider string, fn func(map[mesh.MeshService][]mesh.Endpoint) []mesh.MeshService) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.bySource[provider]
	if src == nil {
		src = map[mesh.MeshService][]mesh.Endpoint{}
		c.bySource[provider] = src
	}
	touched := fn(src)
	if len(src) == 0 {
		delete(c.bySource, provider)
	}

	version := c.current.Version + 1
	var next map[mesh.MeshService]*ServiceEndpoints
	var delta []mesh.MeshService
	for _, svc := range touched {
		merged, known := c.merge(svc)
		prev, had := c.current.services[svc]
		if known == had && had && slices.EqualFunc(prev.Endpoints, merged, endpointEqual) {
			continue
		}
		if !known && !had {
			continue
		}
		if next == nil {
			next = maps.Clone(c.current.services)
		}
		delta = append(delta, svc)
		if known {
			next[svc] = &ServiceEndpoints{Service: svc, Version: version, Endpoints: merged}
		} else {
			delete(next, svc)
		}
	}
	if next == nil {
		return
	}
	slices.SortFunc(delta, mesh.MeshService.Compare)
	c.current = &Snapshot{Version: version, services: next, delta: slices.Compact(delta)}
	for ch := range c.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// merge returns svc's endpoints across all providers, and whether any
// provider reports svc at all.
func (c *Catalog) merge(svc mesh.MeshService) ([]mesh.Endpoint, bool) {
	var out []mesh.Endpoint
	known := false
	for _, src := range c.bySource {
		eps, ok := src[svc]
		if !ok {
			continue
		}
		known = true
		out = append(out, eps...)
	}
	slices.SortFunc(out, mesh.Endpoint.Compare)
	return out, known
}

// normalize stamps the provider on each endpoint, sorts them and drops
// duplicate addresses (the first one's labels win).
func normalize(provider string, eps []mesh.Endpoint) []mesh.Endpoint {
	out := make([]mesh.Endpoint, len(eps))
	for i, e := range eps {
		e.Provider = provider
		out[i] = e
	}
	slices.SortStableFunc(out, mesh.Endpoint.Compare)
	return slices.CompactFunc(out, func(a, b mesh.Endpoint) bool { return a.AddrPort() == b.AddrPort() })
}

func endpointEqual(a, b mesh.Endpoint) bool {
	return a.AddrPort() == b.AddrPort() && a.Provider == b.Provider && maps.Equal(a.Labels, b.Labels)
}
