package render

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	dfpclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	setfilterstatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/set_filter_state/v3"
	snidfpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

func nameOf(m proto.Message) protoreflect.FullName { return proto.MessageName(m) }

var (
	hcmName, routerName       = nameOf(&hcmv3.HttpConnectionManager{}), nameOf(&routerv3.Router{})
	downstreamTLSName         = nameOf(&tlsv3.DownstreamTlsContext{})
	upstreamTLSName, httpOpts = nameOf(&tlsv3.UpstreamTlsContext{}), nameOf(&httpv3.HttpProtocolOptions{})
	networkFilterTypes        = []protoreflect.FullName{nameOf(&hcmv3.HttpConnectionManager{}), nameOf(&tcpproxyv3.TcpProxy{}), nameOf(&rbacnetv3.RBAC{}),
		nameOf(&setfilterstatev3.Config{}), nameOf(&snidfpv3.FilterConfig{})}
	dfpClusterName  = nameOf(&dfpclusterv3.ClusterConfig{})
	httpFilterTypes = []protoreflect.FullName{nameOf(&routerv3.Router{}), nameOf(&rbachttpv3.RBAC{}), nameOf(&faultv3.HTTPFault{})}
)

// Validate checks one proxy's complete set of resources (listeners, route
// configurations, clusters, load assignments and, for Envoy, secrets) of
// flavour f before they are published. It reports every problem found,
// each naming the resource:
//
//   - ValidateAll on every resource and on every Any inside it (unpacked
//     with anypb.UnmarshalNew, recursively, unless [Validator.ValidateWith]
//     is given the Memo that knows what it was packed from); an Any of an
//     unexpected type where a network filter, HTTP filter, transport
//     socket, protocol options or API listener is configured;
//   - every RDS, cluster (routes, weighted clusters, tcp_proxy), EDS and
//     SDS name referenced exists in the set; names are unique per type;
//   - no two listeners on one address:port; weighted clusters sum to more
//     than 0 and at most MaxUint32; every regex compiles as RE2 (Go's regexp); EDS clusters have
//     eds_cluster_config; HCM filters end in the router; no endpoint
//     address twice in one load assignment;
//   - gRPC: no STATIC clusters, only ADS config sources, TLS from
//     certificate provider instances (gRPC has no SDS); Envoy: TLS from
//     SDS (no certificate provider instances).
func Validate(f Flavor, resources ...proto.Message) error {
	return NewValidator(f).Validate(resources...)
}

// Validator validates sets of resources as Validate does, and remembers
// what checking each shared resource on its own found (not per-proxy
// listeners, see PerProxy), so a resource message shared by many proxies'
// sets (the same pointer) is walked once.
// Resources must not be modified once validated. Safe for concurrent use
// (the xDS publisher validates groups in parallel): two calls that walk
// one new message at once both walk it and remember the same findings.
type Validator struct {
	flavor Flavor
	// mu guards memo and chains; fieldsMu fields; regexMu regexes. rest
	// is worked out once (restOnce) and only read after.
	restOnce sync.Once
	mu       sync.Mutex
	fieldsMu sync.RWMutex
	regexMu  sync.Mutex
	memo     map[proto.Message]walked
	// chains remembers the filter chains of per-proxy listeners, which
	// render shares between the proxies of a service: each is walked once,
	// not once per proxy. See ForgetChains.
	chains map[*listenerv3.FilterChain]walked
	fields map[protoreflect.FullName][]protoreflect.FieldDescriptor // see fieldsOf
	// rest holds, for each type with a typed walk, the fields of
	// interest it leaves to reflection (see restOf).
	rest [numTyped][]protoreflect.FieldDescriptor
	// regexes remembers whether each regex compiles (at most maxRegexes,
	// then it starts again).
	regexes map[string]error
	// scratch holds the states of Validate calls, kept to reuse their
	// maps and slices.
	scratch sync.Pool
}

const maxRegexes = 4096

// walked is what walking one message found.
type walked struct {
	refs []reference
	errs []finding
}

// finding is one problem, in a resource (nil for problems of the set).
type finding struct {
	in  proto.Message
	msg string
}

func (f finding) err() error {
	if f.in == nil {
		return errors.New(f.msg)
	}
	return errors.New(labelOf(f.in) + ": " + f.msg)
}

// NewValidator returns a Validator for flavour f.
func NewValidator(f Flavor) *Validator {
	if f == Gateway {
		f = Envoy // a gateway proxy is an Envoy
	}
	return &Validator{flavor: f, memo: map[proto.Message]walked{}, chains: map[*listenerv3.FilterChain]walked{}, fields: map[protoreflect.FullName][]protoreflect.FieldDescriptor{}, regexes: map[string]error{}}
}

// Len returns the number of resources whose findings the Validator
// remembers (for tests and metrics).
func (vr *Validator) Len() int {
	vr.mu.Lock()
	defer vr.mu.Unlock()
	return len(vr.memo)
}

// Forget drops what the Validator remembers (call it when the resources it
// has seen are no longer in use, to free them).
func (vr *Validator) Forget() {
	vr.mu.Lock()
	clear(vr.memo)
	clear(vr.chains)
	vr.mu.Unlock()
	vr.regexMu.Lock()
	clear(vr.regexes)
	vr.regexMu.Unlock()
}

// ForgetChains drops what the Validator remembers of per-proxy listeners'
// filter chains (call it when rendering starts sharing new ones, e.g. with
// a new render.Memo).
func (vr *Validator) ForgetChains() {
	vr.mu.Lock()
	defer vr.mu.Unlock()
	clear(vr.chains)
}

// ForgetMessages drops what the Validator remembers of resources (call it
// when they are replaced, e.g. a load assignment whose endpoints
// changed).
func (vr *Validator) ForgetMessages(ms ...proto.Message) {
	vr.mu.Lock()
	defer vr.mu.Unlock()
	for _, m := range ms {
		delete(vr.memo, m)
	}
}

// Validate checks one proxy's complete set; see [Validate].
func (vr *Validator) Validate(resources ...proto.Message) error {
	return vr.ValidateWith(nil, resources...)
}

// ValidateWith checks one proxy's complete set as Validate does, taking
// the inner message of each Any that rendering with mm packed from mm
// instead of unpacking it. Any other Any (packed elsewhere, or replaced
// since) is unpacked. mm may be nil.
func (vr *Validator) ValidateWith(mm *Memo, resources ...proto.Message) error {
	return vr.ValidateSet(mm, nil, resources...)
}

// Encoded is a resource written as bytes, not built as a message: by an
// encoder ([EncodeClusterLoadAssignment], [EncodeServiceCertSecret]) or
// from the stamp of its shape (see [ClusterResources] and its siblings). Whatever validating its
// message would check holds by construction, or was checked when it was
// written; Refs are the resources it references, which a proxy must
// receive with it.
type Encoded struct {
	TypeURL, Name string
	Bytes         []byte
	Refs          []Ref
}

// Ref names a resource that another references.
type Ref struct{ TypeURL, Name string }

// Type URLs of the resources render writes, and their kinds as the
// Validator names them.
var (
	loadAssignmentType = typeURLOf(&endpointv3.ClusterLoadAssignment{})
	clusterType        = typeURLOf(&clusterv3.Cluster{})
	listenerType       = typeURLOf(&listenerv3.Listener{})
	routeType          = typeURLOf(&routev3.RouteConfiguration{})
	secretType         = typeURLOf(&tlsv3.Secret{})
	// typeOfKind is kindOfType's inverse.
	typeOfKind = func() map[string]string {
		out := map[string]string{}
		for _, t := range []string{listenerType, routeType, clusterType, loadAssignmentType, secretType} {
			out[kindOfType(t)] = t
		}
		return out
	}()
)

// kindOfType returns the kind of the resources of type URL t, as the
// Validator names them ("" for another type): a switch, not a map, as
// every encoded resource and reference of every proxy's set asks it.
func kindOfType(t string) string {
	switch t {
	case listenerType:
		return "listener"
	case routeType:
		return "route configuration"
	case clusterType:
		return "cluster"
	case loadAssignmentType:
		return "load assignment"
	case secretType:
		return "secret"
	}
	return ""
}

func typeURLOf(m proto.Message) string { return "type.googleapis.com/" + string(nameOf(m)) }

// ValidateSet checks one proxy's complete set as ValidateWith does, some
// of its resources given as encoded: those are not walked, and what they
// and the rest reference is looked for among them too. Only listeners
// (whose address is read from Bytes), route configurations, clusters,
// load assignments and secrets are encoded.
func (vr *Validator) ValidateSet(mm *Memo, encoded []Encoded, resources ...proto.Message) error {
	v, _ := vr.scratch.Get().(*validation)
	if v == nil {
		v = &validation{}
	}
	v.startSet(vr, mm)
	defer vr.scratch.Put(v)
	defer v.end()
	for _, e := range encoded {
		kind := kindOfType(e.TypeURL)
		if kind == "" {
			v.errs = append(v.errs, finding{nil, fmt.Sprintf("%s %q: only listeners, route configurations, clusters, load assignments and secrets are encoded", e.TypeURL, e.Name)})
			continue
		}
		v.indexNamed(kind, e.Name)
		if e.TypeURL == listenerType {
			if addr, ok := listenerAddress(e.Bytes); ok {
				v.claimAddress(addr, e.Name, true)
			}
		}
		for _, r := range e.Refs {
			v.refs = append(v.refs, reference{fromKind: kind, fromName: e.Name, kind: kindOfType(r.TypeURL), name: r.Name})
		}
	}
	for _, r := range resources {
		v.index(r)
	}
	// What is remembered of each resource, looked up under one lock.
	v.known = slices.Grow(v.known[:0], len(resources))
	vr.mu.Lock()
	for _, r := range resources {
		w, ok := vr.memo[r]
		v.known = append(v.known, known{w, ok})
	}
	vr.mu.Unlock()
	for i, r := range resources {
		if r == nil {
			continue
		}
		if kind, _ := kindAndName(r); kind == "" {
			continue
		}
		w, remembered := v.known[i].walked, v.known[i].ok
		l, isListener := r.(*listenerv3.Listener)
		v.in = r
		if isListener {
			v.uniqueAddress(l)
		}
		if remembered {
			v.refs = append(v.refs, w.refs...)
			v.errs = append(v.errs, w.errs...)
			continue
		}
		refs, errs := len(v.refs), len(v.errs)
		v.validateAll(r)
		// A per-proxy listener is seen once; remembering it would only
		// grow the memo with every proxy that connects. Its filter
		// chains are shared, and remembered.
		perProxy := isListener && PerProxy(l.GetName())
		v.chains = perProxy
		v.walkMsg(r)
		v.chains = false
		if !perProxy {
			w := walked{refs: slices.Clone(v.refs[refs:]), errs: slices.Clone(v.errs[errs:])}
			vr.mu.Lock()
			vr.memo[r] = w
			vr.mu.Unlock()
		}
	}
	for _, ref := range v.refs {
		if !v.names(ref.kind)[ref.name] {
			msg := fmt.Sprintf("references %s %q, which is not in the set: render and publish it with the referrer", ref.kind, ref.name)
			if ref.from == nil && ref.fromKind != "" {
				msg = ref.fromKind + " " + strconv.Quote(ref.fromName) + ": " + msg
			}
			v.errs = append(v.errs, finding{ref.from, msg})
		}
	}
	errs := make([]error, len(v.errs))
	for i, f := range v.errs {
		errs[i] = f.err()
	}
	return errors.Join(errs...)
}

// walkOne checks resource r on its own as a Validator of flavour f does
// in a set (the checks of the set as a whole aside): what it references,
// and what is wrong with it.
func walkOne(f Flavor, r proto.Message) ([]reference, []finding) {
	vr := templateValidators[Envoy]
	if f == GRPC {
		vr = templateValidators[GRPC]
	}
	v := &validation{}
	v.start(vr, nil)
	v.in = r
	v.validateAll(r)
	v.walkMsg(r)
	return v.refs, v.errs
}

// templateValidators walk the templates of stamps (walkOne): they
// remember only what they learn of types (see fieldsOf) and regexes.
var templateValidators = map[Flavor]*Validator{Envoy: NewValidator(Envoy), GRPC: NewValidator(GRPC)}

// known is what a Validator remembers of one resource, if anything.
type known struct {
	walked
	ok bool
}

// reference is a name of kind that resource from refers to (from is nil
// once remembered for a filter chain, and for an encoded resource, which
// fromKind and fromName name).
type reference struct {
	from               proto.Message
	fromKind, fromName string
	kind, name         string
}

type validation struct {
	vr                                        *Validator
	flavor                                    Flavor
	memo                                      *Memo // may hold what Anys were packed from
	listeners, routes, clusters, eds, secrets map[string]bool
	addrs                                     map[netip.AddrPort]string // listener address -> listener
	endpoints                                 map[endpointAddr]bool     // see loadAssignment
	refs                                      []reference
	errs                                      []finding
	known                                     []known                       // what the Validator remembers of each resource of the call
	chains                                    bool                          // walking a per-proxy listener: use Validator.chains
	in                                        proto.Message                 // the resource being walked
	met                                       map[protoreflect.FullName]int // if set, counts the checks walk runs, by type (tests)
}

// start readies v, kept from vr's last call, for a new one.
func (v *validation) start(vr *Validator, mm *Memo) {
	v.vr, v.flavor, v.memo = vr, vr.flavor, mm
}

// startSet readies v for checking a set: start, and the maps of the set's
// names and listener addresses, which checking one resource on its own
// (walkOne, for every new stamp's template) does not use.
func (v *validation) startSet(vr *Validator, mm *Memo) {
	v.start(vr, mm)
	if v.listeners == nil {
		v.listeners, v.routes, v.clusters, v.eds, v.secrets = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		v.addrs = map[netip.AddrPort]string{}
	}
}

// end lets go of what the call saw, keeping the space.
func (v *validation) end() {
	for _, m := range []map[string]bool{v.listeners, v.routes, v.clusters, v.eds, v.secrets} {
		clear(m)
	}
	clear(v.addrs)
	clear(v.refs)
	clear(v.errs)
	clear(v.known)
	v.refs, v.errs, v.memo, v.in, v.chains = v.refs[:0], v.errs[:0], nil, nil, false
}

// kindAndName returns the kind and name of resource r ("" for another
// type).
func kindAndName(r proto.Message) (kind, name string) {
	switch r := r.(type) {
	case *listenerv3.Listener:
		return "listener", r.GetName()
	case *routev3.RouteConfiguration:
		return "route configuration", r.GetName()
	case *clusterv3.Cluster:
		return "cluster", r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return "load assignment", r.GetClusterName()
	case *tlsv3.Secret:
		return "secret", r.GetName()
	}
	return "", ""
}

// labelOf names resource r in errors (`cluster "default/bookstore"`), or
// returns "".
func labelOf(r proto.Message) string {
	kind, name := kindAndName(r)
	if kind == "" {
		return ""
	}
	return kind + " " + strconv.Quote(name)
}

// meet counts m as met by a check, if counting (tests); every check calls
// it first.
func (v *validation) meet(m proto.Message) {
	if v.met != nil {
		v.met[proto.MessageName(m)]++
	}
}

func (v *validation) fail(format string, args ...any) {
	v.errs = append(v.errs, finding{v.in, fmt.Sprintf(format, args...)})
}

func (v *validation) ref(kind, name string) {
	v.refs = append(v.refs, reference{from: v.in, kind: kind, name: name})
}

func (v *validation) index(r proto.Message) {
	kind, name := kindAndName(r)
	if kind == "" {
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("unexpected resource type %T: want a listener, route configuration, cluster, load assignment or secret", r)})
		return
	}
	v.indexNamed(kind, name)
}

// indexNamed indexes the resource of kind (as kindAndName names it) named
// name.
func (v *validation) indexNamed(kind, name string) {
	if kind == "secret" && v.flavor == GRPC {
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("secret %q: gRPC has no SDS; its TLS comes from certificate provider %q", name, CertProviderInstance)})
	}
	v.add(v.names(kind), kind, name)
}

// names returns the names of the set's resources of kind.
func (v *validation) names(kind string) map[string]bool {
	switch kind {
	case "listener":
		return v.listeners
	case "route configuration":
		return v.routes
	case "cluster":
		return v.clusters
	case "load assignment":
		return v.eds
	case "secret":
		return v.secrets
	}
	return nil
}

// add indexes the resource of kind named name in m (one of v's maps of
// names), reporting a missing or repeated name.
func (v *validation) add(m map[string]bool, kind, name string) {
	switch {
	case name == "":
		v.errs = append(v.errs, finding{nil, kind + " without a name"})
	case m[name]:
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("%s %q appears twice in the set", kind, name)})
	}
	m[name] = true
}

func (v *validation) validateAll(m proto.Message) {
	if va, ok := m.(interface{ ValidateAll() error }); ok {
		if err := va.ValidateAll(); err != nil {
			v.fail("%s: %v", proto.MessageName(m), err)
		}
	}
}

// walk visits m and every message below it that a check applies to,
// unpacking Anys. It descends only into fields through which such a
// message can be reached (see [Validator.fieldsOf]); ValidateAll has
// already checked the rest. Types render produces have a typed walk (see
// typedWalks); others are walked reflectively.
func (v *validation) walk(m protoreflect.Message) {
	if m.IsValid() {
		v.walkMsg(m.Interface())
	}
}

// unpack returns the message in a: the one it was packed from, if a is
// one of render's shared constants or the Memo knows it (then forgetting it: what the walk finds is remembered),
// or else a new one unmarshalled from it.
func (v *validation) unpack(a *anypb.Any) (proto.Message, error) {
	if m, ok := constants[a]; ok {
		return m, nil
	}
	if v.memo != nil {
		if m, ok := v.memo.takePacked(a); ok {
			return m, nil
		}
	}
	return a.UnmarshalNew()
}

// walkChain walks a per-proxy listener's filter chain once per Validator:
// what it finds is remembered without the listener's label and given the
// label of each listener that holds the chain.
func (v *validation) walkChain(fc *listenerv3.FilterChain) {
	v.vr.mu.Lock()
	w, ok := v.vr.chains[fc]
	v.vr.mu.Unlock()
	if !ok {
		refs, errs := len(v.refs), len(v.errs)
		v.wFilterChain(fc)
		w = walked{refs: slices.Clone(v.refs[refs:]), errs: slices.Clone(v.errs[errs:])}
		for i := range w.refs {
			w.refs[i].from = nil
		}
		for i := range w.errs {
			w.errs[i].in = nil
		}
		v.refs, v.errs = v.refs[:refs], v.errs[:errs]
		v.vr.mu.Lock()
		v.vr.chains[fc] = w
		v.vr.mu.Unlock()
	}
	for _, r := range w.refs {
		r.from = v.in
		v.refs = append(v.refs, r)
	}
	for _, f := range w.errs {
		f.in = v.in
		v.errs = append(v.errs, f)
	}
}

// walkFields checks m and walks on below it, reflectively.
func (v *validation) walkFields(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	md := m.Descriptor()
	if check := checks[md.FullName()]; check != nil {
		check(v, m.Interface())
	}
	v.walkFieldsOf(m, v.vr.fieldsOf(md))
}

// walkFieldsOf walks the messages in fields fds of m.
func (v *validation) walkFieldsOf(m protoreflect.Message, fds []protoreflect.FieldDescriptor) {
	for _, fd := range fds {
		switch {
		case fd.IsList():
			for i, l := 0, m.Get(fd).List(); i < l.Len(); i++ {
				v.walk(l.Get(i).Message())
			}
		case fd.IsMap():
			m.Get(fd).Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				v.walk(mv.Message())
				return true
			})
		case m.Has(fd):
			v.walk(m.Get(fd).Message())
		}
	}
}

// fieldsOf returns md's message, list-of-message and map-of-message fields
// through which walk can reach an Any or a message that has a check. It is
// worked out once per message type: for every type reachable from md, a
// type is of interest if it has a check, is an Any, or has a field of a
// type of interest (to a fixed point, as types recurse).
func (vr *Validator) fieldsOf(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	vr.fieldsMu.RLock()
	fs, ok := vr.fields[md.FullName()]
	vr.fieldsMu.RUnlock()
	if ok {
		return fs
	}
	vr.fieldsMu.Lock()
	defer vr.fieldsMu.Unlock()
	if fs, ok := vr.fields[md.FullName()]; ok {
		return fs
	}
	reach := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	var collect func(protoreflect.MessageDescriptor)
	collect = func(d protoreflect.MessageDescriptor) {
		if _, ok := reach[d.FullName()]; ok {
			return
		}
		reach[d.FullName()] = d
		for i, fs := 0, d.Fields(); i < fs.Len(); i++ {
			if t := messageOf(fs.Get(i)); t != nil {
				collect(t)
			}
		}
	}
	collect(md)
	of := map[protoreflect.FullName]bool{}
	for name := range reach {
		of[name] = checks[name] != nil || name == anyName
	}
	for changed := true; changed; {
		changed = false
		for name, d := range reach {
			for i, fs := 0, d.Fields(); !of[name] && i < fs.Len(); i++ {
				if t := messageOf(fs.Get(i)); t != nil && of[t.FullName()] {
					of[name], changed = true, true
				}
			}
		}
	}
	for name, d := range reach {
		if _, ok := vr.fields[name]; ok {
			continue
		}
		var walk []protoreflect.FieldDescriptor
		for i, fs := 0, d.Fields(); i < fs.Len(); i++ {
			if t := messageOf(fs.Get(i)); t != nil && of[t.FullName()] {
				walk = append(walk, fs.Get(i))
			}
		}
		vr.fields[name] = walk
	}
	return vr.fields[md.FullName()]
}

var anyName = nameOf(&anypb.Any{})

// messageOf returns the message type a field holds (a map's value type for
// a map), or nil.
func messageOf(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		return fd.MapValue().Message()
	}
	return fd.Message()
}

func anyIs(a *anypb.Any, want ...protoreflect.FullName) bool {
	return a != nil && slices.Contains(want, a.MessageName())
}

// check is what walk checks of one message of a given type (recording its
// references); checks lists every type that has one, and walk descends
// only towards those types and Anys. The typed walks (see typedWalks)
// call the same methods.
type check func(*validation, proto.Message)

func checkOf[T proto.Message](f func(*validation, T)) (protoreflect.FullName, check) {
	var zero T
	return nameOf(zero), func(v *validation, m proto.Message) { f(v, m.(T)) }
}

var checks = func() map[protoreflect.FullName]check {
	m := map[protoreflect.FullName]check{}
	add := func(name protoreflect.FullName, c check) { m[name] = c }
	add(checkOf((*validation).listener))
	add(checkOf((*validation).apiListener))
	add(checkOf((*validation).filterChain))
	add(checkOf((*validation).networkFilter))
	add(checkOf((*validation).hcm))
	add(checkOf((*validation).httpFilter))
	add(checkOf((*validation).rds))
	add(checkOf((*validation).configSource))
	add(checkOf((*validation).routeAction))
	add(checkOf((*validation).weightedClusters))
	add(checkOf((*validation).tcpProxy))
	add(checkOf((*validation).tcpWeightedClusters))
	add(checkOf((*validation).sdsSecretConfig))
	add(checkOf((*validation).commonTLS))
	add(checkOf((*validation).regex))
	add(checkOf((*validation).cluster))
	add(checkOf((*validation).loadAssignment))
	add(checkOf((*validation).dnsCache))
	return m
}()

func (v *validation) apiListener(m *listenerv3.ApiListener) {
	v.meet(m)
	if !anyIs(m.GetApiListener(), hcmName) {
		v.fail("api_listener holds %q, want an HttpConnectionManager", m.GetApiListener().GetTypeUrl())
	}
}

func (v *validation) filterChain(m *listenerv3.FilterChain) {
	v.meet(m)
	if ts := m.GetTransportSocket(); ts != nil && !anyIs(ts.GetTypedConfig(), downstreamTLSName) {
		v.fail("filter chain transport socket holds %q, want a DownstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
}

func (v *validation) networkFilter(m *listenerv3.Filter) {
	v.meet(m)
	if !anyIs(m.GetTypedConfig(), networkFilterTypes...) {
		v.fail("network filter %q holds %q, want one of %v", m.GetName(), m.GetTypedConfig().GetTypeUrl(), networkFilterTypes)
	}
}

func (v *validation) hcm(m *hcmv3.HttpConnectionManager) {
	v.meet(m)
	fs := m.GetHttpFilters()
	if len(fs) == 0 || !anyIs(fs[len(fs)-1].GetTypedConfig(), routerName) {
		v.fail("HTTP connection manager %q: http_filters must end in the router filter", m.GetStatPrefix())
	}
}

func (v *validation) httpFilter(m *hcmv3.HttpFilter) {
	v.meet(m)
	if !anyIs(m.GetTypedConfig(), httpFilterTypes...) {
		v.fail("HTTP filter %q holds %q, want one of %v", m.GetName(), m.GetTypedConfig().GetTypeUrl(), httpFilterTypes)
	}
}

func (v *validation) rds(m *hcmv3.Rds) {
	v.meet(m)
	v.ref("route configuration", m.GetRouteConfigName())
}

func (v *validation) configSource(m *corev3.ConfigSource) {
	v.meet(m)
	if v.flavor == GRPC && m.GetAds() == nil && m.GetSelf() == nil {
		v.fail("config source %v: gRPC accepts only ads or self", m)
	}
}

func (v *validation) routeAction(m *routev3.RouteAction) {
	v.meet(m)
	if c := m.GetCluster(); c != "" {
		v.ref("cluster", c)
	}
	for _, mp := range m.GetRequestMirrorPolicies() {
		v.ref("cluster", mp.GetCluster())
	}
}

func (v *validation) weightedClusters(m *routev3.WeightedCluster) {
	v.meet(m)
	var sum uint64
	for _, c := range m.GetClusters() {
		v.ref("cluster", c.GetName())
		sum += uint64(c.GetWeight().GetValue())
	}
	switch {
	case sum == 0:
		v.fail("weighted clusters %v sum to 0: drop the route or give a backend weight", clusterNames(m.GetClusters()))
	case sum > math.MaxUint32:
		v.fail("weighted clusters %v sum to %d, more than %d (Envoy and gRPC refuse it)", clusterNames(m.GetClusters()), sum, uint32(math.MaxUint32))
	}
}

func (v *validation) tcpProxy(m *tcpproxyv3.TcpProxy) {
	v.meet(m)
	if c := m.GetCluster(); c != "" {
		v.ref("cluster", c)
	}
}

func (v *validation) tcpWeightedClusters(m *tcpproxyv3.TcpProxy_WeightedCluster) {
	v.meet(m)
	var sum uint64
	for _, c := range m.GetClusters() {
		v.ref("cluster", c.GetName())
		sum += uint64(c.GetWeight())
	}
	switch {
	case sum == 0:
		v.fail("tcp_proxy weighted clusters sum to 0: give a backend weight")
	case sum > math.MaxUint32:
		v.fail("tcp_proxy weighted clusters sum to %d, more than %d (kept within uint32, as Envoy and gRPC require of routes)", sum, uint32(math.MaxUint32))
	}
}

func (v *validation) sdsSecretConfig(m *tlsv3.SdsSecretConfig) {
	v.meet(m)
	v.ref("secret", m.GetName())
}

func (v *validation) regex(m *matcherv3.RegexMatcher) {
	v.meet(m)
	vr := v.vr
	vr.regexMu.Lock()
	err, ok := vr.regexes[m.GetRegex()]
	vr.regexMu.Unlock()
	if !ok {
		_, err = regexp.Compile(m.GetRegex())
		vr.regexMu.Lock()
		if len(vr.regexes) >= maxRegexes {
			clear(vr.regexes)
		}
		vr.regexes[m.GetRegex()] = err
		vr.regexMu.Unlock()
	}
	if err != nil {
		v.fail("regex %q is not RE2: %v", m.GetRegex(), err)
	}
}

type endpointAddr struct {
	ip   string
	port uint32
}

func (v *validation) loadAssignment(m *endpointv3.ClusterLoadAssignment) {
	v.meet(m)
	if v.endpoints == nil {
		v.endpoints = map[endpointAddr]bool{}
	}
	seen := v.endpoints
	defer clear(seen)
	for _, loc := range m.GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			a := endpointAddr{sa.GetAddress(), sa.GetPortValue()}
			if seen[a] {
				v.fail("endpoint %s:%d appears twice (gRPC rejects duplicate endpoint addresses)", a.ip, a.port)
			}
			seen[a] = true
		}
		if v.flavor == GRPC && loc.GetLoadBalancingWeight().GetValue() == 0 {
			v.fail("locality without load_balancing_weight (gRPC ignores it)")
		}
	}
}

func clusterNames(ws []*routev3.WeightedCluster_ClusterWeight) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.GetName())
	}
	return out
}

func (v *validation) listener(l *listenerv3.Listener) {
	v.meet(l)
	if l.GetApiListener() != nil {
		if v.flavor == Envoy {
			v.fail("api_listener is for gRPC clients; Envoy needs an address")
		}
		return
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		v.fail("no socket address and no api_listener")
		return
	}
	if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
		v.fail("address %q is not an IP address", sa.GetAddress())
	}
}

// uniqueAddress checks, across the set, that no two listeners share an
// address and port (it is not remembered per resource).
func (v *validation) uniqueAddress(l *listenerv3.Listener) {
	sa := l.GetAddress().GetSocketAddress()
	ip, err := netip.ParseAddr(sa.GetAddress())
	if l.GetApiListener() != nil || sa == nil || err != nil {
		return
	}
	v.claimAddress(netip.AddrPortFrom(ip, uint16(sa.GetPortValue())), l.GetName(), false)
}

// claimAddress records that listener name listens on addr, reporting
// another that does too (naming name when it is encoded: a finding about
// a message names it already).
func (v *validation) claimAddress(addr netip.AddrPort, name string, encoded bool) {
	if other, ok := v.addrs[addr]; ok {
		label := ""
		if encoded {
			label = "listener " + strconv.Quote(name) + ": "
		}
		v.fail("%slistens on %s like listener %q: give each listener its own address and port", label, addr, other)
		return
	}
	v.addrs[addr] = name
}

// listenerAddress returns the socket address of the encoded listener b
// (false for an API listener, or one without an IP address).
func listenerAddress(b []byte) (netip.AddrPort, bool) {
	const (
		listenerAddressField = 2  // Listener.address
		listenerAPIField     = 19 // Listener.api_listener
	)
	addr, ok := field(b, listenerAddressField, protowire.BytesType)
	if !ok {
		return netip.AddrPort{}, false
	}
	if _, api := field(b, listenerAPIField, protowire.BytesType); api {
		return netip.AddrPort{}, false
	}
	sock, ok := field(addr, addressSocket, protowire.BytesType)
	if !ok {
		return netip.AddrPort{}, false
	}
	text, _ := field(sock, socketAddr, protowire.BytesType)
	ip, err := netip.ParseAddr(string(text))
	if err != nil {
		return netip.AddrPort{}, false
	}
	var port uint64
	if v, ok := field(sock, socketPortValue, protowire.VarintType); ok {
		port, _ = protowire.ConsumeVarint(v)
	}
	return netip.AddrPortFrom(ip, uint16(port)), true
}

// field returns the value of the last field num of wire type typ in the
// encoded message b: a length-delimited field's content, another's
// encoding (a varint's bytes).
func field(b []byte, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	var out []byte
	found := false
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(n, t, b[l:])
		if m < 0 {
			return nil, false
		}
		if n == num && t == typ {
			out, found = b[l:l+m], true
			if t == protowire.BytesType {
				out, _ = protowire.ConsumeBytes(out)
			}
		}
		b = b[l+m:]
	}
	return out, found
}

func (v *validation) commonTLS(c *tlsv3.CommonTlsContext) {
	v.meet(c)
	usesSDS := len(c.GetTlsCertificateSdsSecretConfigs()) > 0 || c.GetValidationContextSdsSecretConfig() != nil ||
		c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig() != nil
	usesProvider := c.GetTlsCertificateProviderInstance() != nil || c.GetValidationContext().GetCaCertificateProviderInstance() != nil ||
		c.GetCombinedValidationContext().GetDefaultValidationContext().GetCaCertificateProviderInstance() != nil
	switch v.flavor {
	case GRPC:
		if usesSDS || c.GetTlsCertificateProviderInstance() == nil {
			v.fail("gRPC TLS must use certificate provider instance %q for its certificate and CA (gRPC has no SDS)", CertProviderInstance)
		}
	case Envoy:
		if usesProvider || !usesSDS && !originatesToOutside(c) && !gatewayFileCert(c) {
			v.fail("Envoy TLS must take its certificate and CA by SDS (%q, %q), not certificate provider instances (or, to a host outside the mesh, no certificate and the system's roots)", ServiceCertSecret, RootCASecret)
		}
	}
}

func (v *validation) cluster(c *clusterv3.Cluster) {
	v.meet(c)
	if ts := c.GetTransportSocket(); ts != nil && !anyIs(ts.GetTypedConfig(), upstreamTLSName) {
		v.fail("transport socket holds %q, want an UpstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
	for k, a := range c.GetTypedExtensionProtocolOptions() {
		if k != httpProtocolOpts || !anyIs(a, httpOpts) {
			v.fail("typed_extension_protocol_options[%q] holds %q, want %s", k, a.GetTypeUrl(), httpProtocolOpts)
		}
	}
	if ct := c.GetClusterType(); ct != nil {
		v.customCluster(c, ct)
		return
	}
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		if c.GetEdsClusterConfig() == nil {
			v.fail("EDS cluster without eds_cluster_config")
			return
		}
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		v.ref("load assignment", name)
	case clusterv3.Cluster_LOGICAL_DNS:
		v.dnsCluster(c)
	case clusterv3.Cluster_STATIC:
		if v.flavor == GRPC {
			v.fail("STATIC cluster: gRPC accepts only EDS, LOGICAL_DNS and aggregate clusters")
		}
		// A load assignment without endpoints is a black hole (as
		// Istio's BlackHoleCluster): GatewayRefuseCluster.
		if c.GetLoadAssignment() == nil || len(c.GetLoadAssignment().GetEndpoints()) == 0 && c.GetName() != GatewayRefuseCluster {
			v.fail("STATIC cluster without load_assignment")
		}
	default:
		v.fail("cluster type %s is not rendered here: want EDS, STATIC, LOGICAL_DNS or a dynamic forward proxy", c.GetType())
	}
	if v.flavor == GRPC && c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN && c.GetLbPolicy() != clusterv3.Cluster_RING_HASH && c.GetLbPolicy() != clusterv3.Cluster_LEAST_REQUEST {
		v.fail("lb_policy %s is not supported by gRPC", c.GetLbPolicy())
	}
}

// customCluster checks a cluster of an extension type: only the dynamic
// forward proxy, for an egress gateway's Envoy (its DNS cache is checked by
// dnsCache, as the walk meets it).
func (v *validation) customCluster(c *clusterv3.Cluster, ct *clusterv3.Cluster_CustomClusterType) {
	switch {
	case v.flavor == GRPC:
		v.fail("cluster type %q: rendered for an egress gateway's Envoy only, not for gRPC", ct.GetName())
	case ct.GetName() != dfpCluster || !anyIs(ct.GetTypedConfig(), dfpClusterName):
		v.fail("cluster type %q holding %q is not rendered here: want %s with a %s", ct.GetName(), ct.GetTypedConfig().GetTypeUrl(), dfpCluster, dfpClusterName)
	case c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED:
		v.fail("%s cluster with lb_policy %s: Envoy requires CLUSTER_PROVIDED", dfpCluster, c.GetLbPolicy())
	}
}

// dnsCache checks a dynamic forward proxy DNS cache (of a cluster or the
// SNI dynamic forward proxy filter): it must drop internal addresses (at
// least the unspecified ones, which no MeshConfig may allow).
func (v *validation) dnsCache(m *dfpcommonv3.DnsCacheConfig) {
	v.meet(m)
	f := m.GetResolvedAddressFilter()
	if f == nil || f.GetInvertMatch() || len(f.GetRanges()) == 0 {
		v.fail("DNS cache %q has no resolved_address_filter: an egress gateway must drop internal addresses (loopback, link-local, metadata services) from the answers", m.GetName())
		return
	}
	for _, r := range f.GetRanges() {
		if _, err := netip.ParseAddr(r.GetAddressPrefix()); err != nil {
			v.fail("DNS cache %q: resolved_address_filter range %q is not an IP address", m.GetName(), r.GetAddressPrefix())
		}
	}
}
