package render

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// Memo lets the rendering of many proxies from one specification share what
// does not depend on the individual caller: the plan of each service and
// flavour (which upstream ports it may call), and each upstream's EDS
// cluster, outbound listener, gRPC API listener and outbound route
// configuration, which are the same message for every caller that receives
// them (see "Resource names"), and the filter chain of each service's
// inbound (or gRPC server) listeners, which is the same for every proxy of
// the service whatever its address. Pass one in [Mesh.Memo]; rendering returns
// the remembered message (the same pointer) where it would build an equal
// one, so output with and without a Memo is equal, and a caller that
// marshals or validates each message once does so once per upstream.
//
// A Memo serves one specification snapshot and trust domain: given a Mesh
// with another it forgets everything first. Messages it returns are shared
// and must not be modified. Not safe for concurrent use.
type Memo struct {
	spec        *spec.Snapshot
	trustDomain string
	// view is the View last served, and emptiness what its plans asked of
	// it: whether each split root and backend had no endpoints. A View
	// that answers otherwise for one of them makes the Memo forget its
	// plans and messages, as a new specification does.
	view      *catalog.View
	emptiness map[mesh.MeshService]bool
	plans     map[planKey][]outbound
	msgs      map[memoKey]proto.Message
	// packed holds the typed message of each Any packed while building a
	// message of msgs, so that a Validator given the Memo (see
	// [Validator.ValidateWith]) need not unpack it. The Validator drops
	// each entry it uses; the rest go with the Memo's snapshot. So it
	// never holds more than one entry per Any inside msgs.
	packed map[*anypb.Any]packedAny
}

// packedAny is the message an Any was packed from, with the Any's content
// when it was packed (to tell whether it has been replaced since).
type packedAny struct {
	any     *anypb.Any
	typeURL string
	value   []byte
	msg     proto.Message
}

// of returns the message a was packed from, if a still holds what it was
// packed with.
func (p packedAny) of(a *anypb.Any) (proto.Message, bool) {
	same := len(a.Value) == len(p.value) && (len(p.value) == 0 || &a.Value[0] == &p.value[0])
	return p.msg, same && a.TypeUrl == p.typeURL
}

type planKey struct {
	svc    mesh.MeshService
	flavor Flavor
}

type memoKind uint8

const (
	memoCluster memoKind = iota
	memoOutboundListener
	memoAPIListener
	memoRoute
	memoInboundChain    // the filter chain of an Envoy inbound listener (any address)
	memoGRPCServerChain // the filter chain of a gRPC server listener (any address)
	memoRefusal         // the API listener body of a refusal listener (by gRPC code)
)

// memoKey names a shared message by what determines its content within one
// specification snapshot: the cluster's name, the route name of an
// outbound (which encodes the upstream, port, split subset and flavour), or
// for an inbound filter chain the inbound name (service and port).
type memoKey struct {
	kind memoKind
	name string
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{plans: map[planKey][]outbound{}, msgs: map[memoKey]proto.Message{}, packed: map[*anypb.Any]packedAny{}, emptiness: map[mesh.MeshService]bool{}}
}

// Len returns the number of messages the Memo holds (for tests and metrics).
func (mm *Memo) Len() int { return len(mm.msgs) }

// use makes mm serve m, forgetting what it holds for another snapshot or
// trust domain, or for a View in which a split root or backend its plans
// consulted gained its first endpoints or lost its last.
func (mm *Memo) use(m Mesh) {
	if mm.spec != m.Spec() || mm.trustDomain != m.TrustDomain() || mm.view != m.View && mm.emptinessChanged(m.View) {
		clear(mm.plans)
		clear(mm.msgs)
		clear(mm.packed)
		clear(mm.emptiness)
		mm.spec, mm.trustDomain = m.Spec(), m.TrustDomain()
	}
	mm.view = m.View
}

// Stale reports whether v answers otherwise than the View the Memo's plans
// were built from whether a service they consulted (a TrafficSplit's root
// or backend) has endpoints: then those plans, and the listeners, routes
// and clusters rendered from them, change with v although the
// specification did not, and a caller that keeps rendered resources (the
// xDS publisher) must compare [InputsOf] again.
func (mm *Memo) Stale(v *catalog.View) bool { return mm.emptinessChanged(v) }

func (mm *Memo) emptinessChanged(v *catalog.View) bool {
	for svc, empty := range mm.emptiness {
		if (len(v.Endpoints(svc)) == 0) != empty {
			return true
		}
	}
	return false
}

// memoised returns the message m.Memo holds for k, or builds it with build
// and remembers it (unless b has failed), with the typed message of each
// Any b packs for it. Without a Memo it only builds.
func memoised[T proto.Message](m Mesh, b *builder, k memoKey, build func() T) T {
	if m.Memo == nil {
		return build()
	}
	m.Memo.use(m)
	if msg, ok := m.Memo.msgs[k]; ok {
		return msg.(T)
	}
	start := len(b.packed)
	b.keep++
	msg := build()
	b.keep--
	if b.err == nil {
		m.Memo.msgs[k] = msg
		for _, p := range b.packed[start:] {
			m.Memo.packed[p.any] = p
		}
	}
	clear(b.packed[start:])
	b.packed = b.packed[:start]
	return msg
}
