package xds

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/eds"
	"github.com/osm-vm/osm-vm/internal/xds/refusals"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

type groupKey struct {
	service mesh.MeshService
	flavor  render.Flavor
}

type group struct {
	key    groupKey
	nodes  map[string]*node
	inputs render.Inputs     // what rds, cds and shared were rendered from
	shared []*cache.Resource // listeners that do not depend on the address
	rds    *cache.Set
	cds    *cache.Set
	eds    eds.Group // the load assignments of the services whose endpoints it receives
	// held holds the resources of rds, cds and shared, each in the slice
	// the group keeps them in (not copied into one: a full generation's
	// releases and retains of every group's were 7% of what it allocated).
	held [3]cache.Hold
	// prev and prevEDS hold what held and eds held while rerender renders
	// the group again, released after it (so that what renders the same
	// is found interned), in place: no copy of every group's holdings.
	prev    [3]cache.Hold
	prevEDS eds.Group
	err     error
}

// release lets go of what the group holds and forgets it.
func (g *group) release(slots *eds.Slots) {
	for i := range g.held {
		g.held[i].Release()
	}
	slots.Release(&g.eds)
}

type node struct {
	proxy Proxy
	group *group
	lds   *cache.Set
	// refused holds the refusal listeners in lds: the names its streams
	// ask for that it may not have (see package refusals).
	refused *refusals.Held
	capped  bool // more names were asked for than refusals.MaxRefusals
}

// refusalNode is n as package refusals sees it.
func (n *node) refusalNode() refusals.Node {
	return refusals.Node{ID: n.proxy.NodeID, Flavor: n.proxy.Flavor, Capped: &n.capped}
}

// dependent is a group that receives a service's endpoints, and the index
// of that service's slot in the group's slots.
type dependent struct {
	g    *group
	slot int
}

// nodeRender is what rendering one proxy's configuration gave
// (prepareNode), to be published (commitNode).
type nodeRender struct {
	n *node
	// grouped is set when its group's resources were rendered (again).
	grouped bool
	// refused are the refusal listeners in lds, held.
	refused                 *refusals.Held
	cds, eds, sds, lds, rds *cache.Set
	err                     error
}

func compareGroups(a, b *group) int { return compareGroupKeys(a.key, b.key) }

func compareGroupKeys(a, b groupKey) int {
	if c := a.service.Compare(b.service); c != 0 {
		return c
	}
	return int(a.flavor) - int(b.flavor)
}

// references returns what e references, as the cache keeps it.
func references(e render.Encoded) []cache.Reference {
	refs := make([]cache.Reference, len(e.Refs))
	for i, r := range e.Refs {
		refs[i] = cache.Reference(r)
	}
	return refs
}

// validateInput is what validate passes the validator, kept between
// calls (validateInputs) to reuse the space.
type validateInput struct {
	msgs    []proto.Message
	encoded []render.Encoded
	refs    []render.Ref
	ends    []int // where each encoded resource's references end in refs
}

func (in *validateInput) reset() {
	clear(in.msgs)
	clear(in.encoded)
	clear(in.refs)
	in.msgs, in.encoded, in.refs, in.ends = in.msgs[:0], in.encoded[:0], in.refs[:0], in.ends[:0]
}

var validateInputs sync.Pool
