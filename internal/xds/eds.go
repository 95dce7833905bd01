package xds

import (
	"slices"
	"sync"
	"sync/atomic"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
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
	name string     // render.EDSName(svc), the order of a group's slots
	mu   sync.Mutex // held while res is built (groups render in parallel)
	res  atomic.Pointer[cache.Resource]
	refs atomic.Int32 // groups whose slots include it; at 0 it is dropped
}

// holdSlot returns svc's EDS slot, counting one more group depending on
// it (safe in parallel renders: see publishGroups). Every group holds a
// slot for each upstream, so the slots are found without a lock.
func (p *Publisher) holdSlot(svc mesh.MeshService) *edsSlot {
	sl, ok := p.eds.Get(svc)
	if !ok {
		sl = p.eds.Keep(svc, &edsSlot{svc: svc, name: render.EDSName(svc)})
	}
	sl.refs.Add(1)
	return sl
}

// edsResource returns the (shared) ClusterLoadAssignment of the slot's
// service, built once until dropEDS drops it. It is encoded directly
// (render.EncodeClusterLoadAssignment), never built as a message: valid
// by construction, it is not validated (see render.Validator.ValidateSet).
func (p *Publisher) edsResource(sl *edsSlot) (*cache.Resource, error) {
	if r := sl.res.Load(); r != nil {
		return r, nil // every caller of the service after the first
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if r := sl.res.Load(); r != nil {
		return r, nil
	}
	b, err := render.EncodeClusterLoadAssignment(nil, p.mesh(), sl.svc)
	if err != nil {
		return nil, err
	}
	res, err := p.cache.NewEncodedResource(sl.name, (*endpointv3.ClusterLoadAssignment)(nil), b)
	if err != nil {
		return nil, err
	}
	r := p.interned.Intern(res)
	sl.res.Store(r)
	return r, nil
}

// dropEDS forgets svc's ClusterLoadAssignment, to be rebuilt when next
// needed (its slot is the only holder of a load assignment, so it is no
// longer interned either).
func (p *Publisher) dropEDS(svc mesh.MeshService) {
	if sl, ok := p.eds.Get(svc); ok {
		if r := sl.res.Swap(nil); r != nil {
			p.interned.Forget(r)
		}
	}
}

func (p *Publisher) dropAllEDS() {
	for svc := range p.eds.All() {
		p.dropEDS(svc)
	}
}

// edsWakeEvery is how many proxies an endpoint change's publishing
// answers before it wakes their streams (Publisher.edsWakeEvery).
const edsWakeEvery = 1000

// publishEDS rebuilds the changed services' endpoints and publishes them
// to the proxies that depend on them in cache Batches of edsWakeEvery
// proxies: each batch's streams are woken when it ends, and send on the
// other cores while the publisher answers the next. Waking each stream as
// it is answered put the publisher behind thousands of runnable streams
// whenever it was preempted or waited for the cache's lock; waking them
// all at the end left the other cores idle while it answered 10,000
// proxies (docs/performance.md, the sixteenth and seventeenth rounds).
func (p *Publisher) publishEDS(changed []mesh.MeshService) {
	end := p.cache.Batch()
	defer func() { end() }()
	published := 0
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
		sl, _ := p.eds.Get(svc) // held by deps
		r, err := p.edsResource(sl)
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
				if published++; published%p.edsWakeEvery == 0 {
					end()
					end = p.cache.Batch()
				}
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

// releaseSlots counts one group less depending on each slot, dropping
// the slots no group depends on.
func (p *Publisher) releaseSlots(slots []*edsSlot) {
	for _, sl := range slots {
		if sl.refs.Add(-1) <= 0 {
			p.dropEDS(sl.svc)
			p.eds.Take(sl.svc)
		}
	}
}
