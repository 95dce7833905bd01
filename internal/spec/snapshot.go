package spec

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// Snapshot is an immutable, versioned view of the mesh specification with
// the queries the xDS layer needs. Values it returns must not be modified.
type Snapshot struct {
	version  uint64
	st       *state
	config   *MeshConfig
	services map[mesh.MeshService]ServiceInfo
	ordered  []ServiceInfo
	keys     []Key // every document, in kind, namespace, name order

	// Indexes built once per snapshot, so the queries rendering makes for
	// every proxy cost what they touch, not the size of the mesh.
	byAccount   map[mesh.ServiceAccount][]mesh.MeshService
	ttByDest    map[mesh.ServiceAccount][]Key                 // TrafficTargets by destination, in key order
	dstBySource map[mesh.ServiceAccount][]mesh.ServiceAccount // the destinations of each source's TrafficTargets, in their key order
	splits      []Key                                         // TrafficSplits, in key order
	splitRoot   map[mesh.MeshService]Key                      // the first TrafficSplit of each root
	pairs       map[[2]mesh.ServiceAccount]bool               // {source, destination} some TrafficTarget allows
	gateway     *gateway.Index                                // Gateway API routes and Gateways
	resilience  *resilienceIndex                              // failure-handling policies
	// resilienceCache holds this snapshot's answers of ServiceResilience
	// and CallResilience.
	resilienceCache resilienceCache
	// inbound holds each destination account's []InboundRule, worked out
	// at the first question (rendering asks several times per proxy).
	inbound sync.Map
}

// ServiceInfo is a Service with its virtual IP.
type ServiceInfo struct {
	Service        mesh.MeshService    `json:"service"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	Ports          []ServicePort       `json:"ports"`
	VIP            netip.Addr          `json:"vip"`
}

// Hostname returns <service>.<namespace>.mesh, the name agents write into
// the hosts file for the VIP.
func (s ServiceInfo) Hostname() string { return s.Service.Name + "." + s.Service.Namespace + ".mesh" }

func newSnapshot(st *state, version uint64) *Snapshot {
	s := &Snapshot{version: version, st: st, config: st.meshConfig(), services: map[mesh.MeshService]ServiceInfo{}, keys: sortedObjectKeys(st.objects),
		byAccount: map[mesh.ServiceAccount][]mesh.MeshService{}, ttByDest: map[mesh.ServiceAccount][]Key{},
		dstBySource: map[mesh.ServiceAccount][]mesh.ServiceAccount{}, splitRoot: map[mesh.MeshService]Key{}, pairs: map[[2]mesh.ServiceAccount]bool{}}
	for _, k := range s.keys {
		switch o := st.objects[k].(type) {
		case *TrafficTarget:
			d := o.Spec.Destination
			dst := mesh.ServiceAccount{Namespace: d.Namespace, Name: d.Name}
			s.ttByDest[dst] = append(s.ttByDest[dst], k)
			seen := map[mesh.ServiceAccount]bool{}
			for _, src := range o.Spec.Sources {
				sa := mesh.ServiceAccount{Namespace: src.Namespace, Name: src.Name}
				if !seen[sa] {
					seen[sa] = true
					s.dstBySource[sa] = append(s.dstBySource[sa], dst)
				}
				s.pairs[[2]mesh.ServiceAccount{sa, dst}] = true
			}
		case *TrafficSplit:
			s.splits = append(s.splits, k)
			root := mesh.MeshService{Namespace: k.Namespace, Name: o.Spec.Service}
			if _, ok := s.splitRoot[root]; !ok {
				s.splitRoot[root] = k
			}
		}
	}
	s.gateway = s.gatewayIndex()
	s.resilience = newResilienceIndex(st, s.keys, s.config)
	for _, k := range s.keys {
		info, ok := serviceInfoOf(st, k)
		if !ok {
			continue
		}
		ms := info.Service
		s.services[ms] = info
		s.ordered = append(s.ordered, info)
		s.byAccount[info.ServiceAccount] = append(s.byAccount[info.ServiceAccount], ms)
	}
	return s
}

// Version increases with every change to the specification.
func (s *Snapshot) Version() uint64 { return s.version }

// Services returns every Service, ordered by namespace and name.
func (s *Snapshot) Services() []ServiceInfo { return s.ordered }

// Service returns one Service.
func (s *Snapshot) Service(svc mesh.MeshService) (ServiceInfo, bool) {
	info, ok := s.services[svc]
	return info, ok
}

// ServicesOf returns the Services whose workloads run as account, ordered
// by namespace and name. The slice must not be modified.
func (s *Snapshot) ServicesOf(account mesh.ServiceAccount) []mesh.MeshService {
	return s.byAccount[account]
}

// Permissive reports whether every service may reach every other.
func (s *Snapshot) Permissive() bool { return s.config.Spec.Traffic.Permissive }

// ServiceCertLifetime is the lifetime of service (proxy-to-proxy) certificates.
func (s *Snapshot) ServiceCertLifetime() time.Duration {
	return time.Duration(s.config.Spec.Certificate.ServiceLifetime)
}

// ProxyCertLifetime is the lifetime of proxy (xDS client) certificates.
func (s *Snapshot) ProxyCertLifetime() time.Duration {
	return time.Duration(s.config.Spec.Certificate.ProxyLifetime)
}

// VIPRange is the outbound virtual IP range.
func (s *Snapshot) VIPRange() netip.Prefix { return s.config.vipRange() }

// RequireConnectedProxy reports whether an endpoint is sent to other
// proxies only while its own proxy is connected.
func (s *Snapshot) RequireConnectedProxy() bool {
	return *s.config.Spec.Endpoints.RequireConnectedProxy
}

// MeshConfig returns the MeshConfig in effect (defaults when none applied).
func (s *Snapshot) MeshConfig() MeshConfigSpec { return s.config.Spec }

// HTTPRouteMatch is one resolved HTTPRouteGroup match.
type HTTPRouteMatch struct {
	// Group is the HTTPRouteGroup's name, Name the match's.
	Group     string            `json:"group"`
	Name      string            `json:"name"`
	PathRegex string            `json:"pathRegex,omitempty"`
	Methods   []string          `json:"methods,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// InboundRule is what one TrafficTarget allows into a destination.
type InboundRule struct {
	// Policy names the TrafficTarget.
	Policy Key `json:"policy"`
	// Sources are the service accounts allowed in.
	Sources []mesh.ServiceAccount `json:"sources"`
	// Port restricts the rule to one destination port; 0 means all.
	Port int `json:"port,omitempty"`
	// HTTP lists the allowed HTTP requests (from HTTPRouteGroup rules).
	HTTP []HTTPRouteMatch `json:"http,omitempty"`
	// TCPPorts lists allowed TCP ports (from TCPRoute rules); TCPAllPorts
	// is set by a TCPRoute without ports.
	TCPPorts    []int `json:"tcpPorts,omitempty"`
	TCPAllPorts bool  `json:"tcpAllPorts,omitempty"`
}

// Inbound returns the TrafficTargets whose destination is the service
// account of dst, resolved against their route groups. Rules naming route
// groups that do not exist contribute nothing. In permissive mode the
// caller allows everything and need not ask.
//
// The rules are shared by every caller: they must not be modified.
func (s *Snapshot) Inbound(dst mesh.MeshService) []InboundRule {
	info, ok := s.services[dst]
	if !ok {
		return nil
	}
	if rules, ok := s.inbound.Load(info.ServiceAccount); ok {
		return rules.([]InboundRule)
	}
	rules, _ := s.inbound.LoadOrStore(info.ServiceAccount, s.inboundOf(info.ServiceAccount))
	return rules.([]InboundRule)
}

// inboundOf works out the inbound rules of dst's services (see Inbound).
func (s *Snapshot) inboundOf(dst mesh.ServiceAccount) []InboundRule {
	var out []InboundRule
	for _, k := range s.ttByDest[dst] {
		tt := s.st.objects[k].(*TrafficTarget)
		d := tt.Spec.Destination
		r := InboundRule{Policy: k}
		if d.Port != nil {
			r.Port = *d.Port
		}
		for _, src := range tt.Spec.Sources {
			r.Sources = append(r.Sources, mesh.ServiceAccount{Namespace: src.Namespace, Name: src.Name})
		}
		for _, rule := range tt.Spec.Rules {
			switch g := s.st.objects[Key{Kind: rule.Kind, Namespace: k.Namespace, Name: rule.Name}].(type) {
			case *HTTPRouteGroup:
				for _, m := range g.Spec.Matches {
					if len(rule.Matches) > 0 && !slices.Contains(rule.Matches, m.Name) {
						continue
					}
					r.HTTP = append(r.HTTP, HTTPRouteMatch{Group: g.Metadata.Name, Name: m.Name, PathRegex: m.PathRegex, Methods: m.Methods, Headers: m.Headers})
				}
			case *TCPRoute:
				if len(rule.Matches) > 0 && !slices.Contains(rule.Matches, g.Spec.Matches.Name) {
					continue
				}
				if len(g.Spec.Matches.Ports) == 0 {
					r.TCPAllPorts = true
				}
				r.TCPPorts = append(r.TCPPorts, g.Spec.Matches.Ports...)
			}
		}
		slices.Sort(r.TCPPorts)
		r.TCPPorts = slices.Compact(r.TCPPorts)
		out = append(out, r)
	}
	return out
}

// Allows reports whether src may call dst: always in permissive mode,
// otherwise when a TrafficTarget whose destination is dst's service
// account lists src (whatever its rules allow).
func (s *Snapshot) Allows(src mesh.ServiceAccount, dst mesh.MeshService) bool {
	if s.Permissive() {
		return true
	}
	info, ok := s.services[dst]
	return ok && s.pairs[[2]mesh.ServiceAccount{src, info.ServiceAccount}]
}

// AllowedSources returns the service accounts any TrafficTarget lets into
// dst (every service account in the mesh when permissive).
func (s *Snapshot) AllowedSources(dst mesh.MeshService) []mesh.ServiceAccount {
	var out []mesh.ServiceAccount
	if s.Permissive() {
		for _, info := range s.ordered {
			out = append(out, info.ServiceAccount)
		}
	} else {
		for _, r := range s.Inbound(dst) {
			out = append(out, r.Sources...)
		}
	}
	slices.SortFunc(out, func(a, b mesh.ServiceAccount) int {
		return mesh.MeshService(a).Compare(mesh.MeshService(b))
	})
	return slices.Compact(out)
}

// Upstreams returns the services src may call: every other service when
// permissive; otherwise the services running as a TrafficTarget
// destination that lists src, plus the root of any TrafficSplit with such
// a backend (clients call the root's VIP and the split picks a backend).
func (s *Snapshot) Upstreams(src mesh.ServiceAccount) []mesh.MeshService {
	ups := s.AllowedUpstreams(src)
	out := make([]mesh.MeshService, len(ups))
	for i, u := range ups {
		out[i] = u.Service
	}
	return out
}

// Upstream is a service a service account may call (see Upstreams).
type Upstream struct {
	Service mesh.MeshService
	// Allowed is Allows(src, Service): whether a TrafficTarget lets src
	// into Service itself (always when permissive), not only through a
	// TrafficSplit it is the root of, or Gateway API routes.
	Allowed bool
}

// AllowedUpstreams returns Upstreams(src), each with whether src is
// allowed into it (Allows), without looking that up again: the render
// of every proxy's outbound plan asks both.
func (s *Snapshot) AllowedUpstreams(src mesh.ServiceAccount) []Upstream {
	if !s.Permissive() && len(s.splits) == 0 && s.gateway.Empty() {
		// Only TrafficTargets decide: the services of src's destinations,
		// all allowed, without a set to gather them in (every proxy's
		// plan asks this in a full generation).
		n := 0
		for _, dst := range s.dstBySource[src] {
			n += len(s.ServicesOf(dst))
		}
		out := make([]Upstream, 0, n)
		for _, dst := range s.dstBySource[src] {
			for _, svc := range s.ServicesOf(dst) {
				if info, ok := s.services[svc]; ok && info.ServiceAccount != src {
					out = append(out, Upstream{Service: svc, Allowed: true})
				}
			}
		}
		slices.SortFunc(out, func(a, b Upstream) int { return a.Service.Compare(b.Service) })
		return slices.CompactFunc(out, func(a, b Upstream) bool { return a.Service == b.Service })
	}
	var allowed map[mesh.MeshService]bool
	var direct map[mesh.MeshService]bool // those a TrafficTarget lets src into
	if s.Permissive() {
		allowed = make(map[mesh.MeshService]bool, len(s.ordered))
		for _, info := range s.ordered {
			allowed[info.Service] = true
		}
		direct = allowed
	} else {
		dsts := s.dstBySource[src]
		allowed = make(map[mesh.MeshService]bool, len(dsts))
		for _, dst := range dsts {
			for _, svc := range s.ServicesOf(dst) {
				allowed[svc] = true
			}
		}
		direct = allowed
		if len(s.splits) > 0 || !s.gateway.Empty() { // they add to allowed
			direct = maps.Clone(allowed)
		}
		for _, k := range s.splits {
			ts := s.st.objects[k].(*TrafficSplit)
			for _, b := range ts.Spec.Backends {
				if allowed[mesh.MeshService{Namespace: ts.Metadata.Namespace, Name: b.Service}] {
					allowed[mesh.MeshService{Namespace: ts.Metadata.Namespace, Name: ts.Spec.Service}] = true
				}
			}
		}
		s.gateway.Upstreams(src.Namespace, allowed)
	}
	out := make([]Upstream, 0, len(allowed))
	for svc := range allowed {
		if info, ok := s.services[svc]; ok && info.ServiceAccount != src {
			out = append(out, Upstream{Service: svc, Allowed: direct[svc]})
		}
	}
	slices.SortFunc(out, func(a, b Upstream) int { return a.Service.Compare(b.Service) })
	return out
}

// WeightedService is one TrafficSplit backend.
type WeightedService struct {
	Service mesh.MeshService `json:"service"`
	Weight  int              `json:"weight"`
}

// Split is the TrafficSplit of a root service.
type Split struct {
	Policy   Key               `json:"policy"`
	Root     mesh.MeshService  `json:"root"`
	Backends []WeightedService `json:"backends"`
	// Matches name the HTTPRouteGroups the split is limited to (all
	// traffic when empty).
	Matches []HTTPRouteMatch `json:"matches,omitempty"`
}

// Split returns the TrafficSplit for root; when several name the same root
// the first by name wins.
func (s *Snapshot) Split(root mesh.MeshService) (Split, bool) {
	if k, ok := s.splitRoot[root]; ok {
		ts := s.st.objects[k].(*TrafficSplit)
		sp := Split{Policy: k, Root: root}
		for _, b := range ts.Spec.Backends {
			sp.Backends = append(sp.Backends, WeightedService{Service: mesh.MeshService{Namespace: k.Namespace, Name: b.Service}, Weight: b.Weight})
		}
		for _, m := range ts.Spec.Matches {
			if g, ok := s.st.objects[Key{Kind: KindHTTPRouteGroup, Namespace: k.Namespace, Name: m.Name}].(*HTTPRouteGroup); ok && m.Kind == KindHTTPRouteGroup {
				for _, hm := range g.Spec.Matches {
					sp.Matches = append(sp.Matches, HTTPRouteMatch{Group: g.Metadata.Name, Name: hm.Name, PathRegex: hm.PathRegex, Methods: hm.Methods, Headers: hm.Headers})
				}
			}
		}
		return sp, true
	}
	return Split{}, false
}

// keysOf returns the keys of the documents of one kind: a range of keys,
// which are in kind order. Egress asked for every render of every group
// scanned every document (a map lookup each) and was a third of a full
// generation for W; the range is found by two binary searches.
func (s *Snapshot) keysOf(kind string) []Key {
	ord := kindOrder(kind)
	lo := sort.Search(len(s.keys), func(i int) bool { return kindOrder(s.keys[i].Kind) >= ord })
	hi := lo + sort.Search(len(s.keys)-lo, func(i int) bool { return kindOrder(s.keys[lo+i].Kind) > ord })
	return s.keys[lo:hi]
}

// Objects returns copies of the stored documents of the given kinds (all
// when none), ordered by kind, namespace and name; Services carry their VIP
// in status.
func (s *Snapshot) Objects(kinds ...string) []Object {
	var out []Object
	for _, k := range s.keys {
		if len(kinds) > 0 && !slices.Contains(kinds, k.Kind) {
			continue
		}
		out = append(out, s.withStatus(s.st.objects[k]))
	}
	return out
}

// Object returns a copy of one stored document, with its status; the
// error, when it does not exist, wraps ErrNotFound and names a near name.
func (s *Snapshot) Object(k Key) (Object, error) {
	o, ok := s.st.objects[k]
	if !ok {
		return nil, notFoundError{k, didYouMean(k.Name, namesOfKind(s.st, k.Kind, k.Namespace))}
	}
	return s.withStatus(o), nil
}

// notFoundError says a document does not exist, suggesting a near name;
// it wraps ErrNotFound.
type notFoundError struct {
	k    Key
	hint string
}

func (e notFoundError) Error() string { return fmt.Sprintf("%s does not exist%s", e.k, e.hint) }
func (e notFoundError) Unwrap() error { return ErrNotFound }

func (s *Snapshot) withStatus(o Object) Object {
	ki, _ := lookupKind(o.Key().Kind)
	c, _ := newObjectFor(ki, o.typeMeta().APIVersion)
	b, _ := json.Marshal(o)
	_ = json.Unmarshal(b, c)
	if k := c.Key(); k.Kind == KindService {
		if ip, ok := s.st.vips[mesh.MeshService{Namespace: k.Namespace, Name: k.Name}]; ok {
			setVIP(c, ip.String())
		}
	}
	withRouteStatus(s.st, c)
	return c
}

// nextSnapshot builds the snapshot of st, which differs from prev's
// state in the documents touched only. When they are Services (the churn
// of a large mesh) it starts from prev: the sorted keys and Services are
// merged rather than sorted again, and the indexes of policies, which
// Services do not change, are shared; otherwise, or when prev is not the
// snapshot of the state before, it builds everything (newSnapshot).
func nextSnapshot(prev *Snapshot, st *state, version uint64, touched []Key) *Snapshot {
	if prev == nil || len(touched) == 0 || slices.ContainsFunc(touched, func(k Key) bool { return k.Kind != KindService }) {
		return newSnapshot(st, version)
	}
	changed := make(map[Key]bool, len(touched))
	var added []Key
	for _, k := range touched {
		if changed[k] {
			continue
		}
		changed[k] = true
		if _, ok := st.objects[k]; ok {
			added = append(added, k)
		}
	}
	slices.SortFunc(added, Key.compare)
	s := &Snapshot{version: version, st: st, config: st.meshConfig(),
		keys:     mergeSorted(prev.keys, func(k Key) bool { return changed[k] }, added, Key.compare),
		services: maps.Clone(prev.services),
		ttByDest: prev.ttByDest, dstBySource: prev.dstBySource, splits: prev.splits, splitRoot: prev.splitRoot, pairs: prev.pairs,
		resilience: prev.resilience,
		byAccount:  maps.Clone(prev.byAccount),
	}
	s.gateway = s.gatewayIndex()
	var infos []ServiceInfo
	accounts := map[mesh.ServiceAccount]bool{} // whose Services changed
	for k := range changed {
		ms := mesh.MeshService{Namespace: k.Namespace, Name: k.Name}
		if was, ok := prev.services[ms]; ok {
			accounts[was.ServiceAccount] = true
			delete(s.services, ms)
		}
		info, ok := serviceInfoOf(st, k)
		if !ok {
			continue
		}
		s.services[ms] = info
		accounts[info.ServiceAccount] = true
		infos = append(infos, info)
	}
	slices.SortFunc(infos, func(a, b ServiceInfo) int { return a.Service.Compare(b.Service) })
	s.ordered = mergeSorted(prev.ordered, func(i ServiceInfo) bool { return changed[serviceKey(i.Service)] }, infos,
		func(a, b ServiceInfo) int { return a.Service.Compare(b.Service) })
	joined := map[mesh.ServiceAccount][]mesh.MeshService{}
	for _, info := range infos {
		joined[info.ServiceAccount] = append(joined[info.ServiceAccount], info.Service)
	}
	for a := range accounts {
		var svcs []mesh.MeshService
		for _, ms := range prev.byAccount[a] {
			if !changed[serviceKey(ms)] {
				svcs = append(svcs, ms)
			}
		}
		svcs = append(svcs, joined[a]...)
		slices.SortFunc(svcs, mesh.MeshService.Compare)
		if len(svcs) == 0 {
			delete(s.byAccount, a)
		} else {
			s.byAccount[a] = svcs
		}
	}
	return s
}

// mergeSorted returns the elements of sorted that drop does not name,
// merged with add (sorted too), in a new slice.
func mergeSorted[T any](sorted []T, drop func(T) bool, add []T, cmp func(a, b T) int) []T {
	out := make([]T, 0, len(sorted)+len(add))
	for _, v := range sorted {
		if drop(v) {
			continue
		}
		for len(add) > 0 && cmp(add[0], v) < 0 {
			out = append(out, add[0])
			add = add[1:]
		}
		out = append(out, v)
	}
	return append(out, add...)
}

// serviceInfoOf returns what a snapshot answers of the Service document k
// in st; false when k is not a Service there.
func serviceInfoOf(st *state, k Key) (ServiceInfo, bool) {
	svc, ok := serviceOf(st.objects[k])
	if !ok {
		return ServiceInfo{}, false
	}
	ms := mesh.MeshService{Namespace: k.Namespace, Name: k.Name}
	return ServiceInfo{
		Service:        ms,
		ServiceAccount: mesh.ServiceAccount{Namespace: k.Namespace, Name: svc.Spec.ServiceAccount},
		Ports:          svc.Spec.Ports,
		VIP:            st.vips[ms],
	}, true
}
