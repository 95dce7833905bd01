package render

import (
	"sync"
	"sync/atomic"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/xds/shard"
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
// and must not be modified. It is safe for concurrent use by renderings
// of one Mesh (the xDS publisher renders groups in parallel): two that
// build the same message at once both build it, and the first to finish
// is remembered and returned to both, so every caller of an upstream still
// gets one pointer. Rendering with Meshes of different snapshots at once
// is not supported (each would make it forget the other's messages).
type Memo struct {
	// bound is what the Memo serves (see use): read by every lookup
	// without a lock, replaced under mu.
	bound atomic.Pointer[memoBinding]
	mu    sync.Mutex // guards emptiness, and replacing bound
	// emptiness is what the plans asked of the View bound: whether each
	// split root and backend had no endpoints. A View that answers
	// otherwise for one of them makes the Memo forget its plans and
	// messages, as a new specification does.
	emptiness map[mesh.MeshService]bool
	// The maps below are shard.Maps, looked up without a lock, so that
	// parallel renderings neither wait for one another nor write the same
	// cache lines; their entries go all at once (Forget), so they are
	// allocated in blocks (shard.NewGenerational).
	plans *shard.Map[planKey, []outbound]
	msgs  *shard.Map[memoKey, proto.Message]
	// packed holds the typed message of each Any packed while building a
	// message of msgs, so that a Validator given the Memo (see
	// [Validator.ValidateWith]) need not unpack it. The Validator drops
	// each entry it uses; the rest go with the Memo's snapshot. So it
	// never holds more than one entry per Any inside msgs.
	packed *shard.Map[*anypb.Any, packedAny]
	// principals holds the RBAC principal of each service account that
	// inbound rules have named: a caller of many services is one message
	// in all their policies.
	principals *shard.Map[mesh.ServiceAccount, *rbacv3.Principal]
	// permissions holds the RBAC permission of each HTTPRouteGroup match
	// inbound rules have allowed, by flavour: a route group most
	// TrafficTargets share is one message in all their policies.
	permissions *shard.Map[permissionKey, memoPermission]
	// parts holds the encoding of each principal and permission (of the
	// two maps above) that inbound rules written as bytes hold, or that
	// it failed validation (see encodedParts).
	parts *shard.Map[proto.Message, encodedRules]
	// shapes holds the stamp of each shape of resource rendered as bytes
	// (see stamp), and encoded the resources written from them, by what
	// msgs would hold their messages under.
	shapes  *shard.Map[shapeKey, *shape]
	encoded *shard.Map[memoKey, Encoded]
	// rules holds the encoded RBAC rules of each inbound listener (by its
	// chain's key), validated, or that they failed validation.
	rules *shard.Map[memoKey, encodedRules]
}

// memoBinding is the specification snapshot, trust domain and View a
// Memo serves.
type memoBinding struct {
	spec        *spec.Snapshot
	trustDomain string
	view        *catalog.View
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
	memoLocalCluster    // a shape of local cluster (see encodedLocalCluster)
	memoInboundRoute    // a shape of inbound route configuration (see encodedInboundRoute)
	memoInboundListener // a shape of inbound listener (see encodedInboundListener)
)

// memoKey names a shared message by what determines its content within one
// specification snapshot: the cluster's name, the route name of an
// outbound (which encodes the upstream, port, split subset and flavour), or
// for an inbound filter chain the inbound name (service and port); a
// cluster by its service and flavour.
type memoKey struct {
	kind memoKind
	name string
	// svc and flavor name a cluster (memoCluster) without building its
	// name: a lookup per caller and upstream.
	svc    mesh.MeshService
	flavor Flavor
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{
		emptiness: map[mesh.MeshService]bool{},
		plans:     shard.NewGenerational[planKey, []outbound](), msgs: shard.NewGenerational[memoKey, proto.Message](),
		packed: shard.NewGenerational[*anypb.Any, packedAny](), principals: shard.NewGenerational[mesh.ServiceAccount, *rbacv3.Principal](),
		permissions: shard.NewGenerational[permissionKey, memoPermission](), parts: shard.NewGenerational[proto.Message, encodedRules](),
		shapes: shard.NewGenerational[shapeKey, *shape](), encoded: shard.NewGenerational[memoKey, Encoded](), rules: shard.NewGenerational[memoKey, encodedRules](),
	}
}

// Len returns the number of messages the Memo holds (for tests and metrics).
func (mm *Memo) Len() int {
	return mm.msgs.Len()
}

// use makes mm serve m, forgetting what it holds for another snapshot or
// trust domain, or for a View in which a split root or backend its plans
// consulted gained its first endpoints or lost its last. Serving m
// already, as every lookup of a rendering but its first does, takes no
// lock.
func (mm *Memo) use(m Mesh) {
	if b := mm.bound.Load(); b != nil && b.view == m.View && b.spec == m.Spec() && b.trustDomain == m.TrustDomain() {
		return
	}
	mm.mu.Lock()
	defer mm.mu.Unlock()
	// A Memo bound to nothing (new, or after Forget) holds nothing.
	b := mm.bound.Load()
	if b != nil && (b.spec != m.Spec() || b.trustDomain != m.TrustDomain() || b.view != m.View && mm.emptinessChanged(m.View)) {
		mm.forget()
	}
	mm.bound.Store(&memoBinding{spec: m.Spec(), trustDomain: m.TrustDomain(), view: m.View})
}

// Forget forgets everything the Memo holds, as a new Memo would hold
// nothing, but keeps the space its maps grew to: a publisher that
// renders everything again (a full generation) fills them to the same
// size.
func (mm *Memo) Forget() {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	mm.forget()
	mm.bound.Store(nil)
}

// forget clears every map (mm.mu held).
func (mm *Memo) forget() {
	mm.plans.Clear()
	mm.msgs.Clear()
	mm.packed.Clear()
	clear(mm.emptiness)
	mm.principals.Clear()
	mm.permissions.Clear()
	mm.parts.Clear()
	mm.shapes.Clear()
	mm.encoded.Clear()
	mm.rules.Clear()
}

// Stale reports whether v answers otherwise than the View the Memo's plans
// were built from whether a service they consulted (a TrafficSplit's root
// or backend) has endpoints: then those plans, and the listeners, routes
// and clusters rendered from them, change with v although the
// specification did not, and a caller that keeps rendered resources (the
// xDS publisher) must compare [InputsOf] again.
func (mm *Memo) Stale(v *catalog.View) bool {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return mm.emptinessChanged(v)
}

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
// Any b packs for it. Without a Memo it only builds. The Memo is not
// locked while build runs (it may call memoised itself); if another
// rendering remembered k meanwhile, that message is returned instead.
func memoised[T proto.Message](m Mesh, b *builder, k memoKey, build func() T) T {
	if m.Memo == nil {
		return build()
	}
	mm := m.Memo
	mm.use(m)
	if msg, ok := mm.msgs.Get(k); ok {
		return msg.(T)
	}
	start := len(b.packed)
	b.keep++
	built := build()
	b.keep--
	out := built
	if b.err == nil {
		// The packed messages go in first: once built is in msgs, another
		// rendering may hand it to a Validator.
		for _, p := range b.packed[start:] {
			mm.packed.Keep(p.any, p)
		}
		if msg := mm.msgs.Keep(k, built); msg != proto.Message(built) {
			out = msg.(T) // built meanwhile by another rendering: equal content
			for _, p := range b.packed[start:] {
				mm.packed.Take(p.any)
			}
		}
	}
	clear(b.packed[start:])
	b.packed = b.packed[:start]
	return out
}

// memoLookup returns what in, one of mm's maps, holds for k while mm
// serves m.
func memoLookup[K comparable, V any](mm *Memo, m Mesh, in *shard.Map[K, V], k K) (V, bool) {
	mm.use(m)
	return in.Get(k)
}

// noteEmptiness records that a plan asked whether svc has endpoints.
func (mm *Memo) noteEmptiness(svc mesh.MeshService, empty bool) {
	mm.mu.Lock()
	mm.emptiness[svc] = empty
	mm.mu.Unlock()
}

// rbacPrincipals returns the RBAC principals of accounts, in order: the
// Memo's messages (shared) when m has a Memo, else new ones.
func rbacPrincipals(m Mesh, accounts []mesh.ServiceAccount) []*rbacv3.Principal {
	out := make([]*rbacv3.Principal, len(accounts))
	mm := m.Memo
	if mm == nil {
		for i, a := range accounts {
			out[i] = principal(m.TrustDomain(), a)
		}
		return out
	}
	mm.use(m)
	for i, a := range accounts {
		p, ok := mm.principals.Get(a)
		if !ok {
			p = mm.principals.Keep(a, principal(m.TrustDomain(), a))
		}
		out[i] = p
	}
	return out
}

// encodedParts returns the deterministic encoding of each of msgs (RBAC
// permissions and principals, messages the Memo shares), each marshalled
// and validated as Envoy's (walkOne) once while the Memo serves its
// snapshot; false if one fails validation.
func (mm *Memo) encodedParts(msgs []proto.Message) ([][]byte, bool) {
	out := make([][]byte, len(msgs))
	for i, msg := range msgs {
		e, known := mm.parts.Get(msg)
		if !known {
			e = mm.parts.Keep(msg, encodedPart(msg))
		}
		if !e.ok {
			return nil, false
		}
		out[i] = e.b
	}
	return out, true
}

// encodedPart is msg validated as Envoy's and marshalled.
func encodedPart(msg proto.Message) encodedRules {
	if _, errs := walkOne(Envoy, msg); len(errs) > 0 {
		return encodedRules{}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	return encodedRules{b: b, ok: err == nil}
}

// takePacked returns (and forgets) what a was packed from, if a still
// holds what it was packed with (see [Validator.ValidateWith]).
func (mm *Memo) takePacked(a *anypb.Any) (proto.Message, bool) {
	p, ok := mm.packed.Take(a)
	if !ok {
		return nil, false
	}
	return p.of(a)
}

// permissionKey names an HTTPRouteGroup match (match names are unique in
// their group) for a flavour.
type permissionKey struct {
	namespace, group, name string
	flavor                 Flavor
}

// memoPermission is httpPermission's answer for a match.
type memoPermission struct {
	perm *rbacv3.Permission
	ok   bool
}

// rbacPermission returns httpPermission(hm, f) for hm, a match of a route
// group in namespace: the Memo's message (shared) when m has a Memo.
func rbacPermission(m Mesh, namespace string, hm spec.HTTPRouteMatch, f Flavor) (*rbacv3.Permission, bool) {
	mm := m.Memo
	if mm == nil {
		return httpPermission(hm, f)
	}
	k := permissionKey{namespace, hm.Group, hm.Name, f}
	if p, ok := memoLookup(mm, m, mm.permissions, k); ok {
		return p.perm, p.ok
	}
	perm, ok := httpPermission(hm, f)
	p := mm.permissions.Keep(k, memoPermission{perm, ok})
	return p.perm, p.ok
}
