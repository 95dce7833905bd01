package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// shapeKey names a shape of resource: what, besides the names a stamp
// fills in, its builder's output depends on.
type shapeKey struct {
	kind   memoKind
	flavor Flavor
	http   bool             // the upstream has an HTTP port (EDS clusters)
	port   spec.ServicePort // the port (local clusters, outbound listeners)
	// policy is an EDS cluster's failure handling: its numbers are not
	// holes, so each policy is a shape.
	policy clusterPolicy
	// call is an outbound route's failure handling (its callKey), or the
	// Retry in an outbound listener's name; fault whether an outbound
	// listener has the fault filter.
	call  string
	fault bool
	// limit is the inbound rate limit of an inbound listener or route
	// configuration (its rateLimitKey): its numbers are not holes.
	limit string
}

// shape is the stamp of one shape, with where the names go in the
// resource's name and in those it references; err if it cannot be
// stamped (then every instance is built as a message).
type shape struct {
	typeURL string
	st      *stamp
	name    []stampSeg
	refs    []shapeRef
	err     error
}

type shapeRef struct {
	typeURL string
	name    []stampSeg
}

// shapeOf returns the shape of key, building it with newShape(f, phs,
// splices, build) the first time.
func (mm *Memo) shapeOf(m Mesh, key shapeKey, f Flavor, phs []string, splices [][]byte, build func() (proto.Message, error)) *shape {
	mm.use(m)
	if sh, ok := mm.shapes.Get(key); ok {
		return sh
	}
	return mm.shapes.Keep(key, newShape(f, phs, splices, build))
}

// stamped returns the resource of shape key (built the first time, see
// shapeOf) written with vals and spl, named name; false if the shape
// cannot be stamped, a value breaks a rule, or the name written is not
// name (a builder whose output is not that shape's): the caller builds
// the resource as a message then, whose validation says what is wrong.
func (mm *Memo) stamped(m Mesh, key shapeKey, f Flavor, phs []string, splices [][]byte, build func() (proto.Message, error), name string, vals []string, spl [][]byte) (Encoded, bool) {
	sh := mm.shapeOf(m, key, f, phs, splices, build)
	if sh.err != nil {
		return Encoded{}, false
	}
	e, err := sh.write(vals, spl)
	if err != nil || e.Name != name {
		return Encoded{}, false
	}
	return e, true
}

// once returns what write wrote for at while mm serves m, calling it the
// first time (a resource shared by every caller of an upstream); two
// renderings writing it at once both write it, and every caller gets the
// first (equal content).
func (mm *Memo) once(m Mesh, at memoKey, write func() (Encoded, bool)) (Encoded, bool) {
	if e, ok := memoLookup(mm, m, mm.encoded, at); ok {
		return e, true
	}
	e, ok := write()
	if !ok {
		return Encoded{}, false
	}
	return mm.encoded.Keep(at, e), true
}

// newShape returns the shape of the message build renders with the
// placeholders phs: marshalled, walked by flavour f's checks, and made a
// stamp.
func newShape(f Flavor, phs []string, splices [][]byte, build func() (proto.Message, error)) *shape {
	msg, err := build()
	if err != nil {
		return &shape{err: err}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return &shape{err: err}
	}
	st, err := newStamp(b, msg.ProtoReflect().Descriptor(), phs, splices)
	if err != nil {
		return &shape{err: err}
	}
	refs, errs := walkOne(f, msg)
	if len(errs) > 0 {
		return &shape{err: fmt.Errorf("the template of %s: %w", typeURLOf(msg), errs[0].err())}
	}
	kind, name := kindAndName(msg)
	sh := &shape{typeURL: typeOfKind[kind], st: st, name: segments(name, phs)}
	for _, r := range refs {
		sh.refs = append(sh.refs, shapeRef{typeURL: typeOfKind[r.kind], name: segments(r.name, phs)})
	}
	return sh
}

// write returns the resource of the shape with vals for its placeholders
// and spl for its splices, or why it cannot.
func (sh *shape) write(vals []string, spl [][]byte) (Encoded, error) {
	if err := sh.st.check(vals); err != nil {
		return Encoded{}, err
	}
	e := Encoded{TypeURL: sh.typeURL, Bytes: sh.st.write(vals, spl)}
	// The names that are more than one placeholder's value or text are
	// written into one string, each a piece of it: one allocation for the
	// resource's name and its references'.
	n := joinedLen(sh.name, vals)
	for _, r := range sh.refs {
		n += joinedLen(r.name, vals)
	}
	var all string
	if n > 0 {
		var b strings.Builder
		b.Grow(n)
		writeJoined(&b, sh.name, vals)
		for _, r := range sh.refs {
			writeJoined(&b, r.name, vals)
		}
		all = b.String()
	}
	var at int
	e.Name, at = holeIn(all, at, sh.name, vals)
	if len(sh.refs) > 0 {
		e.Refs = make([]Ref, len(sh.refs))
		for i, r := range sh.refs {
			e.Refs[i].TypeURL = r.typeURL
			e.Refs[i].Name, at = holeIn(all, at, r.name, vals)
		}
	}
	return e, nil
}

// joinedLen is the length of the value a hole takes with vals when it
// must be joined (more than one segment), else 0.
func joinedLen(segs []stampSeg, vals []string) int {
	if len(segs) == 1 {
		return 0
	}
	return holeLen(segs, vals)
}

// writeJoined writes the value a hole takes with vals to b, if it must be
// joined (see joinedLen).
func writeJoined(b *strings.Builder, segs []stampSeg, vals []string) {
	if len(segs) == 1 {
		return
	}
	for _, sg := range segs {
		if sg.ph < 0 {
			b.WriteString(sg.text)
		} else {
			b.WriteString(vals[sg.ph])
		}
	}
}

// holeIn returns the value a hole takes with vals: the piece of all at at
// that writeJoined wrote, and where the next starts; or, for a hole of one
// segment, its value (no new string) and at.
func holeIn(all string, at int, segs []stampSeg, vals []string) (string, int) {
	if len(segs) == 1 {
		return holeValue(segs, vals), at
	}
	end := at + holeLen(segs, vals)
	return all[at:end], end
}

// namePlaceholders stand, in a template, for the namespace and name of
// the service it is rendered for; edsPlaceholders add its account's.
// Names in the specification are DNS labels, so these appear in no other
// text.
var (
	namePlaceholders = []string{"\x00svc-namespace\x00", "\x00svc-name\x00"}
	edsPlaceholders  = append(namePlaceholders[:2:2], "\x00sa-namespace\x00", "\x00sa-name\x00")
)

// placeholderService is the service namePlaceholders name.
var placeholderService = mesh.MeshService{Namespace: namePlaceholders[0], Name: namePlaceholders[1]}

// encodedEDSCluster returns edsCluster(m, info, f, its policy) written from the stamp
// of its shape, once per service and flavour while m.Memo serves m; false
// if it cannot be (see Memo.stamped).
func encodedEDSCluster(m Mesh, info spec.ServiceInfo, f Flavor) (Encoded, bool) {
	return m.Memo.once(m, memoKey{kind: memoCluster, svc: info.Service, flavor: f}, func() (Encoded, bool) {
		pol := clusterPolicyOf(m.Spec().ServiceResilience(info.Service), f)
		key := shapeKey{kind: memoCluster, flavor: f, http: hasHTTP(info), policy: pol}
		return m.Memo.stamped(m, key, f, edsPlaceholders, nil, func() (proto.Message, error) {
			tb := &builder{}
			tmpl := info
			tmpl.Service = placeholderService
			tmpl.ServiceAccount = mesh.ServiceAccount{Namespace: edsPlaceholders[2], Name: edsPlaceholders[3]}
			return tb.edsCluster(m, tmpl, f, pol), tb.err
		}, ClusterName(info.Service, f), []string{info.Service.Namespace, info.Service.Name, info.ServiceAccount.Namespace, info.ServiceAccount.Name}, nil)
	})
}

// encodedLocalCluster returns localCluster(svc, port) written from the
// stamp of its shape (one per port: its numbers are not holes); false if
// it cannot be (see Memo.stamped).
func encodedLocalCluster(m Mesh, svc mesh.MeshService, port spec.ServicePort) (Encoded, bool) {
	key := shapeKey{kind: memoLocalCluster, flavor: Envoy, port: port}
	return m.Memo.stamped(m, key, Envoy, namePlaceholders, nil, func() (proto.Message, error) {
		tb := &builder{}
		return tb.localCluster(placeholderService, port), tb.err
	}, LocalClusterName(svc, port.Port), []string{svc.Namespace, svc.Name}, nil)
}

// vipPlaceholder is the VIP of an outbound listener's template; its text
// is the template's third placeholder. (VIPs are IPv4: see spec's
// vipRange.)
var (
	vipPlaceholder               = netip.MustParseAddr("203.0.113.254")
	outboundListenerPlaceholders = append(namePlaceholders[:2:2], vipPlaceholder.String())
)

// encodedOutboundListener returns outboundListener(o) written from the
// stamp of its shape (one per port), once per route name while m.Memo
// serves m, for an upstream at an IPv4 VIP whose listener is named after
// it alone (HTTP, or TCP without a split); false for another (a split's
// subset or matches, Gateway API routes), or if it cannot be (see
// Memo.stamped).
func encodedOutboundListener(m Mesh, o outbound) (Encoded, bool) {
	vip := o.info.VIP
	// A TCP split's listener has weighted clusters: another shape. An
	// HTTP listener is the same whatever it routes to, but the template's
	// name has no split suffix: one with such a name is built (see
	// Memo.stamped's name check).
	if o.gw != nil || !isHTTP(o.port) && len(o.split) > 0 || o.subset || !vip.Is4() {
		return Encoded{}, false
	}
	name := o.routeName(Envoy)
	return m.Memo.once(m, memoKey{kind: memoOutboundListener, name: name}, func() (Encoded, bool) {
		key := shapeKey{kind: memoOutboundListener, port: o.port, fault: o.call.Fault != nil, call: o.retrySrc}
		return m.Memo.stamped(m, key, Envoy, outboundListenerPlaceholders, nil, func() (proto.Message, error) {
			tb := &builder{}
			tmpl := outbound{info: o.info, port: o.port, direct: o.direct, call: resilience.Route{Fault: o.call.Fault}, retrySrc: o.retrySrc}
			tmpl.info.Service, tmpl.info.VIP = placeholderService, vipPlaceholder
			return tb.outboundListener(tmpl), tb.err
		}, name, []string{o.info.Service.Namespace, o.info.Service.Name, vip.String()}, nil)
	})
}

// encodedInboundRoute returns inboundRoute(svc, port, rl) written from
// the stamp of its shape (one per port and rate limit); false if it
// cannot be (see Memo.stamped).
func encodedInboundRoute(m Mesh, svc mesh.MeshService, port spec.ServicePort, rl *resilience.RateLimit) (Encoded, bool) {
	key := shapeKey{kind: memoInboundRoute, flavor: Envoy, port: port, limit: rateLimitKey(rl)}
	return m.Memo.stamped(m, key, Envoy, namePlaceholders, nil, func() (proto.Message, error) {
		return inboundRoute(placeholderService, port, rl), nil
	}, InboundName(svc, port.Port), []string{svc.Namespace, svc.Name}, nil)
}

// encodedOutboundRoute returns outboundRoutes(o, f) written from the
// stamp of its shape (one per port and flavour), once per route name
// while m.Memo serves m, for an upstream called directly; false for
// another (a split, Gateway API routes), or if it cannot be (see
// Memo.stamped).
func encodedOutboundRoute(m Mesh, o outbound, f Flavor) (Encoded, bool) {
	if o.gw != nil || len(o.split) > 0 || o.subset || len(o.splitMatches) > 0 || !o.direct {
		return Encoded{}, false
	}
	name := o.routeName(f)
	return m.Memo.once(m, memoKey{kind: memoRoute, name: name}, func() (Encoded, bool) {
		key := shapeKey{kind: memoRoute, flavor: f, port: o.port, call: o.callKey}
		return m.Memo.stamped(m, key, f, namePlaceholders, nil, func() (proto.Message, error) {
			tmpl := outbound{info: o.info, port: o.port, direct: true, call: o.call, callKey: o.callKey, retrySrc: o.retrySrc}
			tmpl.info.Service = placeholderService
			return outboundRoutes(tmpl, f), nil
		}, name, []string{o.info.Service.Namespace, o.info.Service.Name}, nil)
	})
}

// inboundAddrPlaceholder is the proxy address of an inbound listener's
// template; its text is the template's third placeholder.
var (
	inboundAddrPlaceholder      = netip.MustParseAddr("203.0.113.253")
	inboundListenerPlaceholders = append(namePlaceholders[:2:2], inboundAddrPlaceholder.String())
)

// rulesSplice is the RBAC rules of an inbound listener's template, which
// every instance replaces with its own (encoded): valid, and unlike any
// rules render makes (its policy's name holds a placeholder).
var (
	rulesSplice = &rbacv3.RBAC{Policies: map[string]*rbacv3.Policy{"\x00rules\x00": {
		Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
		Principals:  []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Any{Any: true}}},
	}}}
	rulesSpliceBytes, _ = proto.MarshalOptions{Deterministic: true}.Marshal(rulesSplice)
)

// encodedInboundListener returns inboundListener(m, p, self, port)
// written from the stamp of its shape (one per port) with its RBAC rules
// spliced in: built, validated (as its filter's, by walkOne) and encoded
// once per service and port while m.Memo serves m. False if it cannot be
// (see Memo.stamped): the listener is built then, and its validation says
// what is wrong.
func encodedInboundListener(m Mesh, p Proxy, self spec.ServiceInfo, port spec.ServicePort) (Encoded, bool) {
	if !p.Address.IsValid() {
		return Encoded{}, false
	}
	mm := m.Memo
	name := InboundName(self.Service, port.Port)
	at := memoKey{kind: memoInboundChain, name: name}
	rules, known := memoLookup(mm, m, mm.rules, at)
	if !known {
		rules = mm.rules.Keep(at, inboundRulesBytes(m, self.Service, port, name))
	}
	if !rules.ok {
		return Encoded{}, false
	}
	rl := m.Spec().InboundRateLimit(self.Service)
	key := shapeKey{kind: memoInboundListener, flavor: Envoy, port: port, limit: rateLimitKey(rl)}
	return mm.stamped(m, key, Envoy, inboundListenerPlaceholders, [][]byte{rulesSpliceBytes}, func() (proto.Message, error) {
		tb := &builder{}
		l := inboundListenerOf(InboundName(placeholderService, port.Port), inboundAddrPlaceholder, port, tb.inboundChain(placeholderService, port, rulesSplice, rl))
		return l, tb.err
	}, name, []string{self.Service.Namespace, self.Service.Name, p.Address.String()}, [][]byte{rules.b})
}

// encodedRules is an inbound listener's RBAC rules, encoded, if ok (they
// passed validation).
type encodedRules struct {
	b  []byte
	ok bool
}

// inboundRulesBytes returns the encoded inbound RBAC rules of svc's port,
// validated as its listener's filter holds them (not ok if they fail).
//
// Outside permissive mode the rules are written directly (see
// appendInboundRules) from the encodings of their permissions and
// principals, each marshalled and validated once per Memo: the callers of
// a service are principals of many services' rules, and a full
// generation built, marshalled and validated every one of them in every
// service's rules (12% of its CPU for W).
func inboundRulesBytes(m Mesh, svc mesh.MeshService, port spec.ServicePort, name string) encodedRules {
	if m.Spec().Permissive() || m.Memo == nil {
		rules := inboundRBAC(m, svc, port, Envoy)
		var filter proto.Message = &rbachttpv3.RBAC{Rules: rules}
		if !isHTTP(port) {
			filter = &rbacnetv3.RBAC{StatPrefix: name, Rules: rules}
		}
		if _, errs := walkOne(Envoy, filter); len(errs) > 0 {
			return encodedRules{}
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rules)
		return encodedRules{b: b, ok: err == nil}
	}
	policies := inboundPolicies(m, svc, port, Envoy)
	var parts []proto.Message
	for _, p := range policies {
		for _, perm := range p.perms {
			parts = append(parts, perm)
		}
		for _, pr := range p.principals {
			parts = append(parts, pr)
		}
	}
	enc, ok := m.Memo.encodedParts(parts)
	if !ok {
		return encodedRules{}
	}
	return encodedRules{b: appendInboundRules(nil, policies, enc), ok: true}
}

// Field numbers of the RBAC rules appendInboundRules writes
// (envoy/config/rbac/v3).
const (
	rbacPolicies      = 2 // RBAC.policies, map<string, Policy>
	mapEntryKey       = 1
	mapEntryValue     = 2
	policyPermissions = 1 // Policy.permissions
	policyPrincipals  = 2 // Policy.principals
)

// appendInboundRules appends to b the wire encoding of the ALLOW rules
// holding policies (sorted by name, unique), whose permissions and
// principals are encoded in enc in that order (each policy's permissions,
// then its principals), and returns it: byte for byte what
// protobuf-go's deterministic marshal of inboundRBAC's message gives
// (TestInboundRulesWritten). ALLOW is the enum's zero, so the action is
// not written; deterministic marshalling writes a map's entries in the
// order of their keys, each with its key and value.
//
// What protoc-gen-validate checks of the rules beyond their permissions
// and principals (validated one by one) holds by construction: ALLOW is
// a defined action, and every policy has at least one permission and
// one principal.
func appendInboundRules(b []byte, policies []inboundPolicy, enc [][]byte) []byte {
	total := 0 // to grow b once
	rest := enc
	for _, p := range policies {
		parts := rest[:len(p.perms)+len(p.principals)]
		rest = rest[len(parts):]
		_, entry := policySize(p, parts)
		total += protowire.SizeTag(rbacPolicies) + protowire.SizeBytes(entry)
	}
	b = slices.Grow(b, total)
	for _, p := range policies {
		parts := enc[:len(p.perms)+len(p.principals)]
		enc = enc[len(parts):]
		size, entry := policySize(p, parts)
		b = protowire.AppendTag(b, rbacPolicies, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entry))
		b = protowire.AppendTag(b, mapEntryKey, protowire.BytesType)
		b = protowire.AppendString(b, p.name)
		b = protowire.AppendTag(b, mapEntryValue, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		for i, e := range parts {
			field := protowire.Number(policyPermissions)
			if i >= len(p.perms) {
				field = policyPrincipals
			}
			b = protowire.AppendTag(b, field, protowire.BytesType)
			b = protowire.AppendBytes(b, e)
		}
	}
	return b
}

// policySize returns the size of policy p's encoding with parts, its
// permissions' and principals' encodings, and of its entry in the rules'
// map (name and policy).
func policySize(p inboundPolicy, parts [][]byte) (size, entry int) {
	for _, e := range parts {
		size += protowire.SizeTag(policyPermissions) + protowire.SizeBytes(len(e)) // the two tags are one byte
	}
	entry = protowire.SizeTag(mapEntryKey) + protowire.SizeBytes(len(p.name)) + protowire.SizeTag(mapEntryValue) + protowire.SizeBytes(size)
	return size, entry
}
