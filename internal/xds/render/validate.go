package render

// The Validator: what it remembers across calls, and one call over a
// proxy's set, which validate_set.go, validate_walk.go and
// validate_checks.go carry out.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func nameOf(m proto.Message) protoreflect.FullName { return proto.MessageName(m) }

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

func (v *validation) validateAll(m proto.Message) {
	if va, ok := m.(interface{ ValidateAll() error }); ok {
		if err := va.ValidateAll(); err != nil {
			v.fail("%s: %v", proto.MessageName(m), err)
		}
	}
}
