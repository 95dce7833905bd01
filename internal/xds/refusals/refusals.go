// Package refusals owns the refusal listeners the xDS publisher gives
// proxyless gRPC clients: for each listener name a client's streams ask
// for that it may not have (an upstream it may not call, a name that is
// no service), a listener under that name whose route fails RPCs at once
// with the code render.RefusalCode gives, instead of gRPC's 15 s
// does-not-exist timer. It keeps which names each node's streams ask for,
// renders and holds (interned) the listeners a node is given, and the
// refusal cluster and load assignment their routes need. It must not
// import its parent internal/xds, nor know groups.
package refusals

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Refusal bounds: a node is given at most MaxRefusals refusal listeners
// (the first by name), so a client asking for many names cannot make the
// server render without bound; the names beyond wait for gRPC's own
// does-not-exist timer. A name longer than maxRefusalName (no
// <svc>.<ns>.mesh:<port> is) is not answered with one either.
const (
	MaxRefusals    = 256
	maxRefusalName = 300
)

// Options is what Refusals renders with.
type Options struct {
	Log      *slog.Logger
	Cache    *cache.Cache
	Interner *cache.Interner // the listeners are held in it
}

// Refusals renders the refusal listeners of nodes.
type Refusals struct {
	log      *slog.Logger
	cache    *cache.Cache
	interner *cache.Interner
	// wants holds the listener names each gRPC stream of a node asks
	// for (by node ID and stream). Written by Want, read by renders that
	// do not run at the same time.
	wants map[string]map[uint64][]string
	// cluster and cla are what the refusal listeners' routes need (made
	// once).
	once         sync.Once
	cluster, cla *cache.Resource
	err          error
}

// New returns Refusals with no names asked for.
func New(o Options) *Refusals {
	return &Refusals{log: o.Log, cache: o.Cache, interner: o.Interner, wants: map[string]map[uint64][]string{}}
}

// Want records the listener names a gRPC stream of a node asks for (nil:
// the stream ended).
func (r *Refusals) Want(nodeID string, stream uint64, names []string) {
	streams := r.wants[nodeID]
	if len(names) == 0 {
		delete(streams, stream)
		if len(streams) == 0 {
			delete(r.wants, nodeID)
		}
		return
	}
	if streams == nil {
		streams = map[uint64][]string{}
		r.wants[nodeID] = streams
	}
	streams[stream] = names
}

// Node is one node as Refusals sees it. Capped is the node's own: whether
// more names were asked for than MaxRefusals (logged when it changes).
type Node struct {
	ID     string
	Flavor render.Flavor
	Capped *bool
}

type refusal struct {
	res  *cache.Resource
	code uint32
}

// Held is the refusal listeners a node holds, by name, held interned until
// Release. A nil *Held holds none (a node without refusals keeps a nil
// pointer, not a Held).
type Held struct {
	byName map[string]refusal
	hold   cache.Hold
}

// Len returns the number of listeners held.
func (h *Held) Len() int {
	if h == nil {
		return 0
	}
	return len(h.byName)
}

// Has reports whether h holds a refusal listener named name.
func (h *Held) Has(name string) bool {
	if h == nil {
		return false
	}
	_, ok := h.byName[name]
	return ok
}

// Resources returns the listeners held.
func (h *Held) Resources() []*cache.Resource {
	if h == nil {
		return nil
	}
	return h.hold.Resources()
}

// Release lets go of the listeners (once) and empties h.
func (h *Held) Release() {
	if h == nil {
		return
	}
	h.hold.Release()
	*h = Held{}
}

// names returns the listener names n's gRPC streams ask for that real
// (the listeners it is given) does not hold, sorted, at most MaxRefusals:
// a caller dialling an upstream it may not call, or a name that is no
// service, is given a refusal listener under that name, which fails its
// RPCs at once. Server listener names (bound to an address) and over-long
// names get none.
func (r *Refusals) names(n Node, real func(string) bool) []string {
	streams := r.wants[n.ID]
	if len(streams) == 0 || n.Flavor != render.GRPC {
		*n.Capped = false
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
	if capped := len(names) > MaxRefusals; capped != *n.Capped {
		*n.Capped = capped
		if capped {
			r.log.Warn("a gRPC client asks for more listeners it may not have than are answered with refusals; the rest wait for its does-not-exist timer",
				"node", n.ID, "names", len(names), "answered", MaxRefusals, "first_unanswered", names[MaxRefusals])
		}
	}
	if len(names) > MaxRefusals {
		names = names[:MaxRefusals]
	}
	return names
}

// Render returns the refusal listeners n is to hold (see names), held
// (nil: none), reusing those of cur where the code is the same. The caller
// releases cur or the result.
func (r *Refusals) Render(m render.Mesh, n Node, cur *Held, real func(string) bool) (*Held, error) {
	names := r.names(n, real)
	if len(names) == 0 {
		return nil, nil
	}
	r.once.Do(func() {
		c, err := r.cache.NewResource(render.RefusalClusterName, render.RefusalCluster())
		if err != nil {
			r.err = err
			return
		}
		cla := render.RefusalLoadAssignment()
		e, err := r.cache.NewResource(cla.GetClusterName(), cla)
		if err != nil {
			r.err = err
			return
		}
		r.cluster, r.cla = c, e
	})
	if r.err != nil {
		return nil, r.err
	}
	out := make(map[string]refusal, len(names))
	rs := make([]*cache.Resource, 0, len(names))
	for _, name := range names {
		code := render.RefusalCode(m, name)
		if have, ok := cur.get(name); ok && have.code == code {
			out[name] = have
			rs = append(rs, have.res)
			continue
		}
		l, err := render.RefusalListener(m, name)
		if err != nil {
			return nil, err
		}
		res, err := r.cache.NewResource(name, l)
		if err != nil {
			return nil, err
		}
		res = r.interner.Intern(res)
		out[name] = refusal{res: res, code: code}
		rs = append(rs, res)
	}
	return &Held{byName: out, hold: r.interner.Hold(rs...)}, nil
}

func (h *Held) get(name string) (refusal, bool) {
	if h == nil {
		return refusal{}, false
	}
	r, ok := h.byName[name]
	return r, ok
}

// Changed reports whether the refusal listeners n holds (cur, in its
// listener set lds) differ from those it would be given now, without
// rendering them.
func (r *Refusals) Changed(m render.Mesh, n Node, cur *Held, lds *cache.Set) bool {
	real := func(name string) bool { return !cur.Has(name) && lds.Get(name) != nil }
	names := r.names(n, real)
	if len(names) != cur.Len() {
		return true
	}
	for _, name := range names {
		if have, ok := cur.get(name); !ok || have.code != render.RefusalCode(m, name) {
			return true
		}
	}
	return false
}

// Cluster returns the refusal cluster, which a node holding refusal
// listeners receives besides its group's clusters (nil before the first
// Render that gave some).
func (r *Refusals) Cluster() *cache.Resource { return r.cluster }

// WithEDS returns set with the refusal cluster's (empty) load assignment.
func (r *Refusals) WithEDS(set *cache.Set) *cache.Set {
	out, err := set.With(r.cla)
	if err != nil { // cannot fail: the resource is not nil
		return set
	}
	return out
}
