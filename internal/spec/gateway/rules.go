package gateway

import (
	"cmp"
	"slices"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Backend is one backendRef of a rule, resolved.
type Backend struct {
	Service mesh.MeshService `json:"service"`
	Port    int              `json:"port"`
	Weight  int              `json:"weight"`
	// Valid is false when the Service or its port no longer exists, or
	// the reference is not permitted: the backend's share of calls fails.
	Valid bool `json:"valid"`
	// Filters are the backendRef's own (header modifiers).
	Filters []gwv1.HTTPRouteFilter `json:"filters,omitempty"`
}

// Rule is one match of one rule of a route, in the order matches are
// tried (see Routes).
type Rule struct {
	Route RouteName `json:"route"`
	// Rule is the rule's index, Name its name if it has one, Match the
	// match's index in the rule.
	Rule  int    `json:"rule"`
	Name  string `json:"name,omitempty"`
	Match int    `json:"match"`
	// HTTP or GRPC is the match (GRPC nil for a GRPCRoute rule without
	// matches: every call; both nil for a TCPRoute or TLSRoute rule: every
	// connection).
	HTTP *gwv1.HTTPRouteMatch `json:"http,omitempty"`
	GRPC *gwv1.GRPCRouteMatch `json:"grpc,omitempty"`
	// Filters are the rule's; GRPCRoute filters in their HTTPRoute form.
	Filters  []gwv1.HTTPRouteFilter  `json:"filters,omitempty"`
	Backends []Backend               `json:"backends,omitempty"`
	Timeouts *gwv1.HTTPRouteTimeouts `json:"timeouts,omitempty"`
	Retry    *gwv1.HTTPRouteRetry    `json:"retry,omitempty"`
}

// rules returns r's rules, one per match, with each backend resolved
// against w. A backend is valid when its Service and port exist and the
// reference is permitted; a layer-4 route's, when the port is also a tcp
// port.
func (r Route) rules(w World) []Rule {
	ns := r.Name.Namespace
	backend := func(b gwv1.BackendRef, filters []gwv1.HTTPRouteFilter) Backend {
		gb := Backend{Service: BackendService(ns, b.BackendObjectReference), Weight: int(*b.Weight), Filters: filters}
		if b.Port != nil {
			gb.Port = int(*b.Port)
		}
		ports, ok := w.ServicePorts(gb.Service)
		i := slices.IndexFunc(ports, func(p Port) bool { return p.Port == gb.Port })
		gb.Valid = ok && i >= 0 && (!r.l4() || ports[i].AppProtocol == "tcp") &&
			(gb.Service.Namespace == ns || isParent(r, gb.Service) || granted(w, r.Name, gb.Service))
		return gb
	}
	var out []Rule
	switch {
	case r.HTTP != nil:
		for i, rule := range r.HTTP.Rules {
			base := Rule{Route: r.Name, Rule: i, Filters: rule.Filters, Timeouts: rule.Timeouts, Retry: rule.Retry}
			if rule.Name != nil {
				base.Name = string(*rule.Name)
			}
			for _, b := range rule.BackendRefs {
				base.Backends = append(base.Backends, backend(b.BackendRef, b.Filters))
			}
			for j := range rule.Matches {
				gr := base
				gr.Match, gr.HTTP = j, &rule.Matches[j]
				out = append(out, gr)
			}
		}
	case r.GRPC != nil:
		for i, rule := range r.GRPC.Rules {
			base := Rule{Route: r.Name, Rule: i, Filters: GRPCFilters(rule.Filters)}
			if rule.Name != nil {
				base.Name = string(*rule.Name)
			}
			for _, b := range rule.BackendRefs {
				base.Backends = append(base.Backends, backend(b.BackendRef, GRPCFilters(b.Filters)))
			}
			if len(rule.Matches) == 0 {
				out = append(out, base)
			}
			for j := range rule.Matches {
				gr := base
				gr.Match, gr.GRPC = j, &rule.Matches[j]
				out = append(out, gr)
			}
		}
	default:
		// The one rule of a layer-4 route has no match: every connection
		// the listener and host name give it.
		for i, rule := range r.l4Rules() {
			gr := Rule{Route: r.Name, Rule: i}
			if rule.Name != nil {
				gr.Name = string(*rule.Name)
			}
			for _, b := range rule.BackendRefs {
				gr.Backends = append(gr.Backends, backend(b, nil))
			}
			out = append(out, gr)
		}
	}
	return out
}

// SortRules returns rules in the Gateway API's precedence order (as
// Routes orders them).
func SortRules(rules []Rule) []Rule {
	out := slices.Clone(rules)
	slices.SortStableFunc(out, compareRules)
	return out
}

// compareRules orders rules by the Gateway API's match precedence.
func compareRules(a, b Rule) int {
	if c := cmp.Compare(precedence(b), precedence(a)); c != 0 {
		return c
	}
	for i := range 4 {
		if c := cmp.Compare(rank(b)[i], rank(a)[i]); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.Route.Namespace+"/"+a.Route.Name, b.Route.Namespace+"/"+b.Route.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Rule, b.Rule); c != 0 {
		return c
	}
	return cmp.Compare(a.Match, b.Match)
}

// precedence: an Exact path (or exact gRPC service) first, then the rest.
func precedence(r Rule) int {
	switch {
	case r.HTTP != nil && *r.HTTP.Path.Type == gwv1.PathMatchExact:
		return 2
	case r.HTTP != nil && *r.HTTP.Path.Type == gwv1.PathMatchPathPrefix:
		return 1
	case r.GRPC != nil && r.GRPC.Method != nil && *r.GRPC.Method.Type == gwv1.GRPCMethodMatchExact:
		return 1
	}
	return 0
}

// rank: path (or service) length, method, headers, query parameters.
func rank(r Rule) [4]int {
	switch {
	case r.HTTP != nil:
		m := r.HTTP
		out := [4]int{len(*m.Path.Value), 0, len(m.Headers), len(m.QueryParams)}
		if *m.Path.Type == gwv1.PathMatchRegularExpression {
			out[0] = 0
		}
		if m.Method != nil {
			out[1] = 1
		}
		return out
	case r.GRPC != nil:
		m := r.GRPC
		out := [4]int{0, 0, len(m.Headers), 0}
		if m.Method != nil && m.Method.Service != nil {
			out[0] = len(*m.Method.Service)
		}
		if m.Method != nil && m.Method.Method != nil {
			out[1] = len(*m.Method.Method)
		}
		return out
	}
	return [4]int{}
}

// Routes is how Gateway API routes route the calls from one namespace to
// one port of a Service.
type Routes struct {
	Parent mesh.MeshService `json:"parent"`
	Port   int              `json:"port"`
	// Consumer is the callers' namespace when consumer routes (routes in
	// the callers' namespace attached to a Service in another) decide,
	// "" when the Service's own (producer) routes do.
	Consumer string `json:"consumer,omitempty"`
	// Kind is HTTPRoute or GRPCRoute: on a grpc port GRPCRoutes take
	// precedence over HTTPRoutes.
	Kind   string      `json:"kind"`
	Routes []RouteName `json:"routes"`
	Rules  []Rule      `json:"rules"`
	// Fingerprint identifies the content (equal for equal routing).
	Fingerprint string `json:"-"`
}

// Services returns the distinct services the rules send to or mirror to,
// sorted.
func (g Routes) Services() []mesh.MeshService {
	out := servicesOf(nil, g.Rules)
	slices.SortFunc(out, mesh.MeshService.Compare)
	return slices.Compact(out)
}

// servicesOf appends the services rules send or mirror to.
func servicesOf(out []mesh.MeshService, rules []Rule) []mesh.MeshService {
	for _, r := range rules {
		for _, b := range r.Backends {
			out = append(out, b.Service)
		}
		for _, f := range r.Filters {
			if f.RequestMirror != nil {
				out = append(out, BackendService(r.Route.Namespace, f.RequestMirror.BackendRef))
			}
		}
	}
	return out
}
