package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Index answers rendering's questions about routes for one snapshot of
// the specification: it is built once per snapshot, so the questions
// asked for every proxy cost what they touch, not the size of the mesh.
type Index struct {
	w World
	// byParent maps a Service's port to the routes attached to it, by the
	// namespace they are in.
	byParent map[parentPort]map[string][]Route
	parents  map[mesh.MeshService]bool
	routes   []Route
	gws      []mesh.MeshService
	// gateways are the Gateways with their routes, built at the first
	// question (rendering a gateway proxy, DNS publishing).
	gatewaysOnce sync.Once
	gateways     map[mesh.MeshService]Info
}

type parentPort struct {
	svc  mesh.MeshService
	port int
}

// NewIndex indexes routes (by kind, namespace and name) and the Gateways
// gws (by namespace and name) of w.
func NewIndex(w World, routes []Route, gws []mesh.MeshService) *Index {
	x := &Index{w: w, byParent: map[parentPort]map[string][]Route{}, parents: map[mesh.MeshService]bool{}, routes: routes, gws: gws}
	for _, r := range routes {
		for _, a := range ResolveParents(w, r) {
			if a.Reason != "" || a.Gateway {
				continue
			}
			if _, ok := w.SplitOf(a.Parent); ok {
				continue // a split root: refused at apply, inert if it got here
			}
			for _, p := range a.Ports {
				pp := parentPort{a.Parent, p}
				if x.byParent[pp] == nil {
					x.byParent[pp] = map[string][]Route{}
				}
				ns := r.Name.Namespace
				if !slices.ContainsFunc(x.byParent[pp][ns], func(o Route) bool { return o.Name == r.Name }) {
					x.byParent[pp][ns] = append(x.byParent[pp][ns], r)
				}
				x.parents[a.Parent] = true
			}
		}
	}
	return x
}

// Empty reports whether no route is attached to a Service.
func (x *Index) Empty() bool { return len(x.byParent) == 0 }

// HasRoutes reports whether any route is attached to svc (for any
// caller).
func (x *Index) HasRoutes(svc mesh.MeshService) bool { return x.parents[svc] }

// Routes returns how routes route calls from callers in namespace
// callerNS to port of svc: the consumer routes of callerNS when it has
// some, else svc's producer routes; false when no route applies. Rules
// are ordered as the Gateway API's precedence says matches are tried:
// an Exact path before a prefix, longer prefixes first, then a method,
// more header matches, more query matches (gRPC: an exact service, then
// method, then more headers), then by route (namespace/name) and the
// order of rules and matches in it.
func (x *Index) Routes(svc mesh.MeshService, port int, callerNS string) (Routes, bool) {
	byNS := x.byParent[parentPort{svc, port}]
	routes, consumer := byNS[callerNS], callerNS
	if callerNS == svc.Namespace || len(routes) == 0 {
		routes, consumer = byNS[svc.Namespace], ""
	}
	if len(routes) == 0 {
		return Routes{}, false
	}
	g := Routes{Parent: svc, Port: port, Consumer: consumer, Kind: KindHTTPRoute}
	if slices.ContainsFunc(routes, func(r Route) bool { return r.GRPC != nil }) {
		g.Kind = KindGRPCRoute
	}
	for _, r := range routes {
		if r.Name.Kind != g.Kind {
			continue
		}
		g.Routes = append(g.Routes, r.Name)
		g.Rules = append(g.Rules, r.rules(x.w)...)
	}
	slices.SortStableFunc(g.Rules, compareRules)
	b, _ := json.Marshal(g)
	g.Fingerprint = string(b)
	return g, true
}

// Upstreams adds to allowed the parents of routes whose backends a caller
// in namespace callerNS may call (callers call the parent's VIP and the
// route picks).
func (x *Index) Upstreams(callerNS string, allowed map[mesh.MeshService]bool) {
	if len(x.byParent) == 0 {
		return
	}
	direct := maps.Clone(allowed)
	for pp, byNS := range x.byParent {
		if allowed[pp.svc] {
			continue
		}
		for ns, routes := range byNS {
			if ns != pp.svc.Namespace && ns != callerNS {
				continue // another namespace's consumer routes
			}
			for _, r := range routes {
				for _, rule := range r.rules(x.w) {
					if slices.ContainsFunc(rule.Backends, func(b Backend) bool { return direct[b.Service] }) {
						allowed[pp.svc] = true
					}
				}
			}
		}
	}
}

// Listener is one listener of a Gateway with the routes attached.
type Listener struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // HTTP, HTTPS, TLS or TCP
	// TLSMode is a TLS listener's: Passthrough or Terminate.
	TLSMode string `json:"tlsMode,omitempty"`
	// Hostname is the listener's ("" for any).
	Hostname string `json:"hostname,omitempty"`
	// Certificate names the Secret of an HTTPS listener or a TLS one that
	// terminates (a gateway machine reads it from its certificate
	// directory).
	Certificate mesh.MeshService `json:"certificate,omitzero"`
	// Hosts are the virtual hosts: per host name ("*" for any), the rules
	// of the routes attached that serve it, in precedence order. On a TLS
	// listener a host name is an SNI name; a TCP listener has one, "*".
	Hosts []Host `json:"hosts,omitempty"`
}

// Host is one host name a listener serves and its rules.
type Host struct {
	Hostname string `json:"hostname"`
	Rules    []Rule `json:"rules"`
}

// Info is a Gateway with the routes attached to its listeners.
type Info struct {
	Gateway        mesh.MeshService    `json:"gateway"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	Listeners      []Listener          `json:"listeners"`
	// Fingerprint identifies the content (equal for equal rendering).
	Fingerprint string `json:"-"`
}

// Services returns the distinct services the rules send or mirror to.
func (g Info) Services() []mesh.MeshService {
	var out []mesh.MeshService
	for _, l := range g.Listeners {
		for _, h := range l.Hosts {
			out = servicesOf(out, h.Rules)
		}
	}
	slices.SortFunc(out, mesh.MeshService.Compare)
	return slices.Compact(out)
}

// HostNames returns the precise host names the Gateway serves (listener
// and route host names, without wildcards), sorted: the names the DNS
// publisher publishes with the gateway machines' addresses.
func (g Info) HostNames() []string {
	var out []string
	for _, l := range g.Listeners {
		if l.Hostname != "" && !strings.HasPrefix(l.Hostname, "*") {
			out = append(out, l.Hostname)
		}
		for _, h := range l.Hosts {
			if !strings.HasPrefix(h.Hostname, "*") {
				out = append(out, h.Hostname)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Gateway returns the Gateway named gw with its attached routes.
func (x *Index) Gateway(gw mesh.MeshService) (Info, bool) {
	info, ok := x.infos()[gw]
	return info, ok
}

// Gateways returns every Gateway with its attached routes, by namespace
// and name.
func (x *Index) Gateways() []Info {
	var out []Info
	for _, gw := range x.gws {
		out = append(out, x.infos()[gw])
	}
	return out
}

// infos builds every Info once: one pass over the routes resolves their
// Gateway parents.
func (x *Index) infos() map[mesh.MeshService]Info {
	x.gatewaysOnce.Do(func() {
		x.gateways = map[mesh.MeshService]Info{}
		type listenerKey struct {
			gw       mesh.MeshService
			listener string
		}
		type lr struct {
			route Route
			hosts []string
		}
		byListener := map[listenerKey][]lr{}
		for _, r := range x.routes {
			for _, a := range ResolveParents(x.w, r) {
				if !a.Gateway {
					continue
				}
				g, _ := x.w.Gateway(a.Parent)
				for _, ln := range a.Listeners {
					lk := listenerKey{a.Parent, ln}
					l := g.Listeners[slices.IndexFunc(g.Listeners, func(l gwv1.Listener) bool { return string(l.Name) == ln })]
					if !slices.ContainsFunc(byListener[lk], func(o lr) bool { return o.route.Name == r.Name }) {
						byListener[lk] = append(byListener[lk], lr{r, intersectHosts(l.Hostname, r.hostnames())})
					}
				}
			}
		}
		for _, gw := range x.gws {
			g, ok := x.w.Gateway(gw)
			if !ok {
				continue
			}
			info := Info{Gateway: gw, ServiceAccount: mesh.ServiceAccount{Namespace: gw.Namespace, Name: gw.Name}}
			for _, l := range g.Listeners {
				gl := listenerInfo(gw, l)
				rules := map[string][]Rule{}
				for _, o := range byListener[listenerKey{gw, string(l.Name)}] {
					for _, h := range o.hosts {
						rules[h] = append(rules[h], o.route.rules(x.w)...)
					}
				}
				for h, rs := range rules {
					gl.Hosts = append(gl.Hosts, Host{Hostname: h, Rules: SortRules(rs)})
				}
				// Precise names before wildcards, longer wildcards first.
				slices.SortFunc(gl.Hosts, func(a, b Host) int {
					return cmp.Or(cmp.Compare(strings.Count(b.Hostname, "."), strings.Count(a.Hostname, ".")), strings.Compare(a.Hostname, b.Hostname))
				})
				info.Listeners = append(info.Listeners, gl)
			}
			slices.SortStableFunc(info.Listeners, func(a, b Listener) int { return cmp.Compare(a.Port, b.Port) })
			b, _ := json.Marshal(info)
			info.Fingerprint = string(b)
			x.gateways[gw] = info
		}
	})
	return x.gateways
}

// listenerInfo is a listener without its routes.
func listenerInfo(gw mesh.MeshService, l gwv1.Listener) Listener {
	gl := Listener{Name: string(l.Name), Port: int(l.Port), Protocol: string(l.Protocol)}
	if l.Hostname != nil {
		gl.Hostname = string(*l.Hostname)
	}
	if l.Protocol == gwv1.TLSProtocolType && l.TLS != nil {
		gl.TLSMode = string(*l.TLS.Mode)
	}
	if l.TLS != nil && len(l.TLS.CertificateRefs) > 0 {
		ref := l.TLS.CertificateRefs[0]
		gl.Certificate = mesh.MeshService{Namespace: gw.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil {
			gl.Certificate.Namespace = string(*ref.Namespace)
		}
	}
	return gl
}

// Attached returns, per Service port ("namespace/name:port"), the names
// of the routes attached to it by their namespace: what the index
// answers from, for comparing two indexes.
func (x *Index) Attached() map[string]map[string][]RouteName {
	out := map[string]map[string][]RouteName{}
	for pp, byNS := range x.byParent {
		m := map[string][]RouteName{}
		for ns, routes := range byNS {
			for _, r := range routes {
				m[ns] = append(m[ns], r.Name)
			}
		}
		out[fmt.Sprintf("%s:%d", pp.svc, pp.port)] = m
	}
	return out
}
