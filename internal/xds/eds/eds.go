// Package eds owns the ClusterLoadAssignments the xDS publisher fans out:
// one slot per service some group of proxies depends on, whose load
// assignment is encoded once (render.EncodeClusterLoadAssignment) until
// the service's endpoints change, and each group's set of its slots'
// assignments, updated in place when one changes. Which groups and proxies
// receive a change is the publisher's business: this package must not
// import its parent internal/xds, nor know proxies or groups.
package eds

import (
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
	"github.com/osm-vm/osm-vm/internal/xds/shard"
)

// Options is what Slots builds with.
type Options struct {
	Cache *cache.Cache
	// Interner interns each slot's assignment; a slot is the only holder
	// of its assignment, outside the Interner's counts.
	Interner *cache.Interner
}

// Slots holds the slot of each service some group depends on (a
// shard.Map: groups render in parallel).
type Slots struct {
	cache    *cache.Cache
	interner *cache.Interner
	m        *shard.Map[mesh.MeshService, *Slot]
}

// New returns empty Slots.
func New(o Options) *Slots {
	return &Slots{cache: o.Cache, interner: o.Interner, m: shard.New[mesh.MeshService, *Slot]()}
}

// Slot holds a service's ClusterLoadAssignment; groups keep pointers to
// the slots of their dependencies, so publishing an endpoint change to
// many groups does not look each dependency up. res is nil until built,
// and again when the service's endpoints, its connected proxies or the
// participant rule change.
type Slot struct {
	svc  mesh.MeshService
	name string     // render.EDSName(svc), the order of a group's slots
	mu   sync.Mutex // held while res is built (groups render in parallel)
	res  atomic.Pointer[cache.Resource]
	refs atomic.Int32 // groups whose slots include it; at 0 it is dropped
}

// Service returns the slot's service.
func (sl *Slot) Service() mesh.MeshService { return sl.svc }

// hold returns svc's slot, counting one more group depending on it (safe
// in parallel renders). Every group holds a slot for each upstream, so
// the slots are found without a lock.
func (s *Slots) hold(svc mesh.MeshService) *Slot {
	sl, ok := s.m.Get(svc)
	if !ok {
		sl = s.m.Keep(svc, &Slot{svc: svc, name: render.EDSName(svc)})
	}
	sl.refs.Add(1)
	return sl
}

// Get returns svc's slot, if a group depends on it.
func (s *Slots) Get(svc mesh.MeshService) (*Slot, bool) { return s.m.Get(svc) }

// Services returns the services some group depends on.
func (s *Slots) Services() iter.Seq[mesh.MeshService] {
	return func(yield func(mesh.MeshService) bool) {
		for svc := range s.m.All() {
			if !yield(svc) {
				return
			}
		}
	}
}

// Len returns the number of slots.
func (s *Slots) Len() int { return s.m.Len() }

// Resource returns the (shared) ClusterLoadAssignment of the slot's
// service in m, built once until Drop drops it. It is encoded directly
// (render.EncodeClusterLoadAssignment), never built as a message: valid
// by construction, it is not validated (see render.Validator.ValidateSet).
func (s *Slots) Resource(m render.Mesh, sl *Slot) (*cache.Resource, error) {
	if r := sl.res.Load(); r != nil {
		return r, nil // every caller of the service after the first
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if r := sl.res.Load(); r != nil {
		return r, nil
	}
	b, err := render.EncodeClusterLoadAssignment(nil, m, sl.svc)
	if err != nil {
		return nil, err
	}
	res, err := s.cache.NewEncodedResource(sl.name, (*endpointv3.ClusterLoadAssignment)(nil), b)
	if err != nil {
		return nil, err
	}
	r := s.interner.Intern(res)
	sl.res.Store(r)
	return r, nil
}

// Drop forgets svc's ClusterLoadAssignment, to be rebuilt when next
// needed (its slot is the only holder of a load assignment, so it is no
// longer interned either).
func (s *Slots) Drop(svc mesh.MeshService) {
	if sl, ok := s.m.Get(svc); ok {
		if r := sl.res.Swap(nil); r != nil {
			s.interner.Forget(r)
		}
	}
}

// DropAll drops every service's assignment.
func (s *Slots) DropAll() {
	for svc := range s.m.All() {
		s.Drop(svc)
	}
}

// Group is the load assignments one group of proxies receives: a slot per
// service it depends on, sorted by EDS name, and the set of their
// resources when last built. The zero Group depends on nothing.
type Group struct {
	slots []*Slot
	set   *cache.Set
}

// HoldGroup returns the Group of the services deps, counting it among the
// dependents of each one's slot until Release. Safe in parallel renders.
func (s *Slots) HoldGroup(deps []mesh.MeshService) Group {
	slots := make([]*Slot, len(deps))
	for i, d := range deps {
		slots[i] = s.hold(d)
	}
	slices.SortFunc(slots, func(a, b *Slot) int { return strings.Compare(a.name, b.name) })
	return Group{slots: slots}
}

// Release counts g one dependent less of each of its slots, dropping the
// slots no group depends on, and empties g.
func (s *Slots) Release(g *Group) {
	for _, sl := range g.slots {
		if sl.refs.Add(-1) <= 0 {
			s.Drop(sl.svc)
			s.m.Take(sl.svc)
		}
	}
	*g = Group{}
}

// Slots returns g's slots, sorted by EDS name.
func (g *Group) Slots() []*Slot { return g.slots }

// Built reports whether g's set was built (Set) since it was held.
func (g *Group) Built() bool { return g.set != nil }

// Replace returns g's set, built before, with the resource of its slot i
// replaced by r (the one service changed), and keeps it.
func (g *Group) Replace(i int, r *cache.Resource) (*cache.Set, error) {
	rs := slices.Clone(g.set.Resources())
	rs[i] = r
	set, err := g.set.Update(rs)
	g.set = set
	return set, err
}

// Set returns g's load assignments in m. The set last built is kept:
// unchanged, it is returned as is; when some slots' resources changed (an
// endpoint change), the new set is an Update of it.
func (g *Group) Set(s *Slots, m render.Mesh) (*cache.Set, error) {
	var held []*cache.Resource
	if g.set != nil {
		held = g.set.Resources() // one per slot, in slot order
	}
	var rs []*cache.Resource
	for i, sl := range g.slots {
		r, err := s.Resource(m, sl)
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
	case g.set == nil:
		set, err = cache.NewSortedSet(rs) // slots are sorted by EDS name
	case rs == nil:
		return g.set, nil
	default:
		set, err = g.set.Update(rs)
	}
	if err != nil {
		return nil, err
	}
	g.set = set
	return set, nil
}
