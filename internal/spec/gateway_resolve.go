package spec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// ControllerName is the controllerName of the route status osm-server
// reports.
const ControllerName = "osm-vm.io/mesh"

// route is what HTTPRoute and GRPCRoute have in common for resolution.
type route interface {
	Object
	parentRefs() []gwv1.ParentReference
	// backendRefs returns every backendRef and mirror backendRef with its
	// field path.
	backendRefs() []fieldRef
	// attachesTo reports whether the route can serve a port with this
	// appProtocol.
	attachesTo(appProtocol string) bool
	hostnames() []gwv1.Hostname
}

type fieldRef struct {
	field string
	ref   gwv1.BackendObjectReference
}

func (r *HTTPRoute) parentRefs() []gwv1.ParentReference { return r.Spec.ParentRefs }
func (r *GRPCRoute) parentRefs() []gwv1.ParentReference { return r.Spec.ParentRefs }

// HTTPRoutes serve HTTP and gRPC ports (gRPC is HTTP/2); GRPCRoutes gRPC
// ports only.
func (r *HTTPRoute) attachesTo(p string) bool { return p == "http" || p == "grpc" }
func (r *GRPCRoute) attachesTo(p string) bool { return p == "grpc" }

func mirrorRefs(field string, fs []gwv1.HTTPRouteFilter) []fieldRef {
	var out []fieldRef
	for i, f := range fs {
		if f.RequestMirror != nil {
			out = append(out, fieldRef{fmt.Sprintf("%s[%d].requestMirror.backendRef", field, i), f.RequestMirror.BackendRef})
		}
	}
	return out
}

func (r *HTTPRoute) backendRefs() []fieldRef {
	var out []fieldRef
	for i, rule := range r.Spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		out = append(out, mirrorRefs(f+".filters", rule.Filters)...)
		for j, b := range rule.BackendRefs {
			out = append(out, fieldRef{fmt.Sprintf("%s.backendRefs[%d]", f, j), b.BackendObjectReference})
		}
	}
	return out
}

func (r *GRPCRoute) backendRefs() []fieldRef {
	var out []fieldRef
	for i, rule := range r.Spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		out = append(out, mirrorRefs(f+".filters", gateway.GRPCFilters(rule.Filters))...)
		for j, b := range rule.BackendRefs {
			out = append(out, fieldRef{fmt.Sprintf("%s.backendRefs[%d]", f, j), b.BackendObjectReference})
		}
	}
	return out
}

// attachment is one parentRef resolved: the Service and its ports the
// route serves, or why it serves none.
type attachment struct {
	parent mesh.MeshService
	ports  []int
	// gateway is set when the parent is a Gateway; listeners then names
	// the listeners the route attaches to.
	gateway   bool
	listeners []string
	// reason and message explain Accepted=False ("" when accepted).
	reason, message string
}

// resolveParents resolves every parentRef of r against st.
func resolveParents(st *state, r route) []attachment {
	ns := r.Key().Namespace
	var out []attachment
	for _, p := range r.parentRefs() {
		a := attachment{parent: mesh.MeshService{Namespace: ns, Name: string(p.Name)}}
		if p.Namespace != nil {
			a.parent.Namespace = string(*p.Namespace)
		}
		if gateway.IsGatewayRef(p) {
			resolveGatewayParent(st, r, p, &a)
			out = append(out, a)
			continue
		}
		svc, ok := serviceOf(st.objects[serviceKey(a.parent)])
		switch {
		case p.Group == nil || p.Kind == nil || *p.Group != "" || *p.Kind != KindService:
			a.reason, a.message = string(gwv1.RouteReasonNoMatchingParent), "the parent is not a Service"
		case !ok:
			a.reason, a.message = string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("no Service %q in namespace %q", a.parent.Name, a.parent.Namespace)
		default:
			for _, port := range svc.Spec.Ports {
				if p.Port != nil && int(*p.Port) != port.Port || p.SectionName != nil && string(*p.SectionName) != port.Name {
					continue
				}
				if r.attachesTo(port.AppProtocol) {
					a.ports = append(a.ports, port.Port)
				} else if p.Port != nil || p.SectionName != nil {
					a.reason, a.message = string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("port %d of Service %s is %s: a %s attaches to %s ports", port.Port, a.parent, port.AppProtocol, r.Key().Kind, routeProtocols(r))
				}
			}
			if len(a.ports) == 0 && a.reason == "" {
				a.reason = string(gwv1.RouteReasonNoMatchingParent)
				switch {
				case p.Port != nil:
					a.message = fmt.Sprintf("Service %s has no port %d", a.parent, *p.Port)
				case p.SectionName != nil:
					a.message = fmt.Sprintf("Service %s has no port named %q", a.parent, *p.SectionName)
				default:
					a.message = fmt.Sprintf("Service %s has no %s port", a.parent, routeProtocols(r))
				}
			}
		}
		out = append(out, a)
	}
	return out
}

func routeProtocols(r route) string {
	if r.attachesTo("http") {
		return "http or grpc"
	}
	return "grpc"
}

// refProblem is a backendRef that does not resolve.
type refProblem struct {
	field, reason, message string
}

// resolveBackends checks every backendRef of r against st: the Service
// and its port exist, and a reference into another namespace is allowed
// by a ReferenceGrant there (or names a parent of the route: a consumer
// route may send calls on to the Service it is attached to).
func resolveBackends(st *state, r route) []refProblem {
	ns := r.Key().Namespace
	var out []refProblem
	for _, fr := range r.backendRefs() {
		b := fr.ref
		if b.Group == nil || b.Kind == nil || *b.Group != "" || *b.Kind != KindService {
			out = append(out, refProblem{fr.field, string(gwv1.RouteReasonInvalidKind), "a backendRef names a Service"})
			continue
		}
		target := mesh.MeshService{Namespace: ns, Name: string(b.Name)}
		if b.Namespace != nil {
			target.Namespace = string(*b.Namespace)
		}
		if target.Namespace != ns && !isParent(r, target) && !granted(st, r.Key(), target) {
			out = append(out, refProblem{fr.field, string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf(
				"Service %s is in another namespace and no ReferenceGrant in namespace %q allows %ss from namespace %q to refer to it: apply one (from: [{group: %s, kind: %s, namespace: %s}], to: [{group: \"\", kind: Service}])",
				target, target.Namespace, r.Key().Kind, ns, GroupGateway, r.Key().Kind, ns)})
			continue
		}
		svc, ok := serviceOf(st.objects[serviceKey(target)])
		if !ok {
			out = append(out, refProblem{fr.field, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("service %q not found in namespace %q: apply a Service named %q first or in the same batch%s",
				target.Name, target.Namespace, target.Name, didYouMean(target.Name, namesOfKind(st, KindService, target.Namespace)))})
			continue
		}
		if b.Port != nil && !slices.ContainsFunc(svc.Spec.Ports, func(p ServicePort) bool { return p.Port == int(*b.Port) }) {
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, fmt.Sprint(p.Port))
			}
			out = append(out, refProblem{fr.field + ".port", string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s has no port %d: want one of %s", target, *b.Port, strings.Join(ports, ", "))})
		}
	}
	return out
}

func isParent(r route, s mesh.MeshService) bool {
	for _, p := range r.parentRefs() {
		if gateway.IsGatewayRef(p) {
			continue
		}
		ns := r.Key().Namespace
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		if ns == s.Namespace && string(p.Name) == s.Name {
			return true
		}
	}
	return false
}

// granted reports whether a ReferenceGrant in target's namespace allows
// routes of from's kind in from's namespace to refer to target.
func granted(st *state, from Key, target mesh.MeshService) bool {
	for k, o := range st.objects {
		g, ok := o.(*ReferenceGrant)
		if !ok || k.Namespace != target.Namespace {
			continue
		}
		fromOK := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return string(f.Group) == GroupGateway && string(f.Kind) == from.Kind && string(f.Namespace) == from.Namespace
		})
		toOK := slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return string(t.Group) == "" && string(t.Kind) == KindService && (t.Name == nil || string(*t.Name) == target.Name)
		})
		if fromOK && toOK {
			return true
		}
	}
	return false
}

// gatewayReferences checks a document of the batch against the state it
// is applied into: a route's parents and backends resolve, and no Service
// is both the root of an SMI TrafficSplit and the parent of a route.
func gatewayReferences(v *validator, st *state, obj Object) {
	if svc, ok := serviceOf(obj); ok {
		k := svc.Key()
		if _, ok := gatewayOf(st, mesh.MeshService{Namespace: k.Namespace, Name: k.Name}); ok {
			v.errorf("metadata.name", "a Gateway %q is in namespace %q: its machines enroll as the service of its name, so the two would share an identity; give the Service another name", k.Name, k.Namespace)
		}
		if sa := svc.Spec.ServiceAccount; sa != "" && sa != k.Name {
			if _, ok := gatewayOf(st, mesh.MeshService{Namespace: k.Namespace, Name: sa}); ok {
				v.errorf("spec.serviceAccount", "a Gateway %q is in namespace %q: its machines hold the certificate of service account %q, so the Service's machines would share the gateway's identity; run the Service as another service account", sa, k.Namespace, sa)
			}
		}
	}
	switch o := obj.(type) {
	case route:
		for i, a := range resolveParents(st, o) {
			if a.reason != "" {
				v.errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "%s: the route would attach to nothing there%s", a.message, parentHint(st, a))
				continue
			}
			if a.gateway {
				continue
			}
			if k, ok := splitOf(st, a.parent); ok {
				v.errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "Service %s is the root of the SMI %s: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both; delete the TrafficSplit (its backends become this route's weighted backendRefs) or attach the route elsewhere", a.parent, k)
			}
		}
		grpcIgnored(v, st, o)
		if l4, ok := o.(l4Route); ok {
			l4References(v, st, l4)
		}
		for _, p := range resolveBackends(st, o) {
			if p.reason == string(gwv1.RouteReasonBackendNotFound) {
				// As in Kubernetes: the route stands, its status says
				// ResolvedRefs=False, and the backend gets no calls.
				v.warnf(p.field, "%s; until then the route's status reports ResolvedRefs=False and this backend's share of calls goes to the rule's other backends (a rule with none fails its calls with 500)", p.message)
				continue
			}
			v.errorf(p.field, "%s", p.message)
		}
	case *Gateway:
		if _, ok := serviceOf(st.objects[serviceKey(mesh.MeshService{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name})]); ok {
			v.errorf("metadata.name", "a Service %q is in namespace %q: a Gateway's machines enroll as the service of its name, so the two would share an identity; give the Gateway another name", o.Metadata.Name, o.Metadata.Namespace)
		}
		for _, k := range sortedObjectKeys(st.objects) {
			if svc, ok := serviceOf(st.objects[k]); ok && k.Namespace == o.Metadata.Namespace && svc.Metadata.Name != o.Metadata.Name && svc.Spec.ServiceAccount == o.Metadata.Name {
				v.errorf("metadata.name", "Service %s/%s runs as service account %q: a Gateway's machines hold the certificate of the account of its name, so the two would share an identity; give the Gateway another name", k.Namespace, k.Name, o.Metadata.Name)
			}
		}
	case *TrafficSplit:
		root := mesh.MeshService{Namespace: o.Metadata.Namespace, Name: o.Spec.Service}
		if k, ok := routeOf(st, root); ok {
			v.errorf("spec.service", "Service %s is the parent of %s: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both; delete the route or the TrafficSplit", root, k)
		}
	}
}

func parentHint(st *state, a attachment) string {
	if a.reason == string(gwv1.RouteReasonNoMatchingParent) && !strings.Contains(a.message, "port") {
		return didYouMean(a.parent.Name, namesOfKind(st, KindService, a.parent.Namespace))
	}
	return ""
}

// splitOf returns the TrafficSplit whose root is svc.
func splitOf(st *state, svc mesh.MeshService) (Key, bool) {
	for _, k := range sortedObjectKeys(st.objects) {
		if ts, ok := st.objects[k].(*TrafficSplit); ok && k.Namespace == svc.Namespace && ts.Spec.Service == svc.Name {
			return k, true
		}
	}
	return Key{}, false
}

// routeOf returns a route attached to svc.
func routeOf(st *state, svc mesh.MeshService) (Key, bool) {
	for _, k := range sortedObjectKeys(st.objects) {
		if r, ok := st.objects[k].(route); ok && isParent(r, svc) {
			return k, true
		}
	}
	return Key{}, false
}

// gatewayDeleteConflict refuses to delete a Service a route still sends
// calls to, or a ReferenceGrant a route relies on, unless the route goes
// in the same batch.
func gatewayDeleteConflict(st *state, gone map[Key]bool) error {
	after := st.clone()
	for k := range gone {
		delete(after.objects, k)
	}
	after.reindex()
	for _, k := range sortedObjectKeys(st.objects) {
		r, ok := st.objects[k].(route)
		if !ok || gone[k] {
			continue
		}
		for i, a := range resolveParents(after, r) {
			if a.reason != "" && resolveParents(st, r)[i].reason == "" {
				return fmt.Errorf("%w: %s is attached to it (spec.parentRefs[%d]: %s): delete or change the route first, or in the same batch", ErrConflict, k, i, a.message)
			}
		}
		before := map[string]bool{}
		for _, p := range resolveBackends(st, r) {
			before[p.field] = true
		}
		for _, p := range resolveBackends(after, r) {
			if !before[p.field] {
				return fmt.Errorf("%w: %s still refers to it (%s: %s): delete or change the route first, or in the same batch", ErrConflict, k, p.field, p.message)
			}
		}
	}
	return nil
}

// routeStatus is the status a controller would report for r: per
// parentRef, Accepted and ResolvedRefs.
func routeStatus(st *state, r route) *gwv1.RouteStatus {
	status := &gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{}}
	probs := resolveBackends(st, r)
	for i, a := range resolveParents(st, r) {
		ps := gwv1.RouteParentStatus{ParentRef: r.parentRefs()[i], ControllerName: ControllerName}
		accepted := metav1.Condition{Type: string(gwv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.RouteReasonAccepted),
			Message: fmt.Sprintf("serves calls to %s on port %s", a.parent, joinInts(a.ports))}
		if a.gateway {
			ps.ControllerName = GatewayControllerName
			accepted.Message = fmt.Sprintf("attached to listener %s of Gateway %s", strings.Join(a.listeners, ", "), a.parent)
		}
		if a.reason != "" {
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, a.reason, a.message
		} else if k, ok := splitOf(st, a.parent); ok && !a.gateway {
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("%s routes the calls to %s", k, a.parent)
		}
		resolved := metav1.Condition{Type: string(gwv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gwv1.RouteReasonResolvedRefs), Message: "every backendRef resolves"}
		if len(probs) > 0 {
			var msgs []string
			for _, p := range probs {
				msgs = append(msgs, p.field+": "+p.message)
			}
			resolved.Status, resolved.Reason, resolved.Message = metav1.ConditionFalse, probs[0].reason, strings.Join(msgs, "; ")
		}
		ps.Conditions = []metav1.Condition{accepted, resolved}
		status.Parents = append(status.Parents, ps)
	}
	return status
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// withRouteStatus fills the status of a copy for responses.
func withRouteStatus(st *state, o Object) {
	switch r := o.(type) {
	case *HTTPRoute:
		r.Status = routeStatus(st, r)
	case *GRPCRoute:
		r.Status = routeStatus(st, r)
	case *Gateway:
		r.Status = gatewayStatus(st, r)
	case *GatewayTCPRoute:
		r.Status = routeStatus(st, r)
	case *TLSRoute:
		r.Status = routeStatus(st, r)
	}
}

// GatewayBackend is one backendRef of a rule, resolved.
type GatewayBackend struct {
	Service mesh.MeshService `json:"service"`
	Port    int              `json:"port"`
	Weight  int              `json:"weight"`
	// Valid is false when the Service or its port no longer exists, or
	// the reference is not permitted: the backend's share of calls fails.
	Valid bool `json:"valid"`
	// Filters are the backendRef's own (header modifiers).
	Filters []gwv1.HTTPRouteFilter `json:"filters,omitempty"`
}

// GatewayRule is one match of one rule of a route, in the order matches
// are tried (see GatewayRoutes).
type GatewayRule struct {
	Route Key `json:"route"`
	// Rule is the rule's index, Name its name if it has one, Match the
	// match's index in the rule.
	Rule  int    `json:"rule"`
	Name  string `json:"name,omitempty"`
	Match int    `json:"match"`
	// HTTP or GRPC is the match (GRPC nil for a GRPCRoute rule without
	// matches: every call).
	HTTP *gwv1.HTTPRouteMatch `json:"http,omitempty"`
	GRPC *gwv1.GRPCRouteMatch `json:"grpc,omitempty"`
	// Filters are the rule's; GRPCRoute filters in their HTTPRoute form.
	Filters  []gwv1.HTTPRouteFilter  `json:"filters,omitempty"`
	Backends []GatewayBackend        `json:"backends,omitempty"`
	Timeouts *gwv1.HTTPRouteTimeouts `json:"timeouts,omitempty"`
	Retry    *gwv1.HTTPRouteRetry    `json:"retry,omitempty"`
}

// GatewayRoutes is how Gateway API routes route the calls from one
// namespace to one port of a Service.
type GatewayRoutes struct {
	Parent mesh.MeshService `json:"parent"`
	Port   int              `json:"port"`
	// Consumer is the callers' namespace when consumer routes (routes in
	// the callers' namespace attached to a Service in another) decide,
	// "" when the Service's own (producer) routes do.
	Consumer string `json:"consumer,omitempty"`
	// Kind is HTTPRoute or GRPCRoute: on a grpc port GRPCRoutes take
	// precedence over HTTPRoutes.
	Kind   string        `json:"kind"`
	Routes []Key         `json:"routes"`
	Rules  []GatewayRule `json:"rules"`
	// Fingerprint identifies the content (equal for equal routing).
	Fingerprint string `json:"-"`
}

// Services returns the distinct services the rules send to or mirror to,
// sorted.
func (g GatewayRoutes) Services() []mesh.MeshService {
	var out []mesh.MeshService
	for _, r := range g.Rules {
		for _, b := range r.Backends {
			out = append(out, b.Service)
		}
		for _, f := range r.Filters {
			if f.RequestMirror != nil {
				out = append(out, backendService(r.Route.Namespace, f.RequestMirror.BackendRef))
			}
		}
	}
	slices.SortFunc(out, mesh.MeshService.Compare)
	return slices.Compact(out)
}

func backendService(ns string, b gwv1.BackendObjectReference) mesh.MeshService {
	s := mesh.MeshService{Namespace: ns, Name: string(b.Name)}
	if b.Namespace != nil {
		s.Namespace = string(*b.Namespace)
	}
	return s
}

// gatewayIndex is built once per snapshot: the routes attached to each
// port of each Service, producer and consumer.
type gatewayIndex struct {
	// byParent maps a parent port to the routes attached, by the
	// namespace they are in.
	byParent map[parentPort]map[string][]Key
}

type parentPort struct {
	svc  mesh.MeshService
	port int
}

func newGatewayIndex(st *state, keys []Key) gatewayIndex {
	idx := gatewayIndex{byParent: map[parentPort]map[string][]Key{}}
	var routes []Key
	roots := map[mesh.MeshService]bool{}
	for _, k := range keys {
		switch o := st.objects[k].(type) {
		case route:
			routes = append(routes, k)
		case *TrafficSplit:
			roots[mesh.MeshService{Namespace: k.Namespace, Name: o.Spec.Service}] = true
		}
	}
	for _, k := range routes {
		for _, a := range resolveParents(st, st.objects[k].(route)) {
			if a.reason != "" || a.gateway || roots[a.parent] {
				continue // a split root: refused at apply, inert if it got here
			}
			for _, p := range a.ports {
				pp := parentPort{a.parent, p}
				if idx.byParent[pp] == nil {
					idx.byParent[pp] = map[string][]Key{}
				}
				if !slices.Contains(idx.byParent[pp][k.Namespace], k) {
					idx.byParent[pp][k.Namespace] = append(idx.byParent[pp][k.Namespace], k)
				}
			}
		}
	}
	return idx
}

// HasGatewayRoutes reports whether any route is attached to svc (for any
// caller).
func (s *Snapshot) HasGatewayRoutes(svc mesh.MeshService) bool {
	if len(s.gateway.byParent) == 0 {
		return false // every plan asks, of every upstream
	}
	info, ok := s.services[svc]
	if !ok {
		return false
	}
	for _, p := range info.Ports {
		if len(s.gateway.byParent[parentPort{svc, p.Port}]) > 0 {
			return true
		}
	}
	return false
}

// GatewayRoutes returns how routes route calls from callers in namespace
// callerNS to port of svc: the consumer routes of callerNS when it has
// some, else svc's producer routes; false when no route applies. Rules
// are ordered as the Gateway API's precedence says matches are tried:
// an Exact path before a prefix, longer prefixes first, then a method,
// more header matches, more query matches (gRPC: an exact service, then
// method, then more headers), then by route (namespace/name) and the
// order of rules and matches in it.
func (s *Snapshot) GatewayRoutes(svc mesh.MeshService, port int, callerNS string) (GatewayRoutes, bool) {
	byNS := s.gateway.byParent[parentPort{svc, port}]
	keys, consumer := byNS[callerNS], callerNS
	if callerNS == svc.Namespace || len(keys) == 0 {
		keys, consumer = byNS[svc.Namespace], ""
	}
	if len(keys) == 0 {
		return GatewayRoutes{}, false
	}
	g := GatewayRoutes{Parent: svc, Port: port, Consumer: consumer, Kind: KindHTTPRoute}
	if slices.ContainsFunc(keys, func(k Key) bool { return k.Kind == KindGRPCRoute }) {
		g.Kind = KindGRPCRoute
	}
	for _, k := range keys {
		if k.Kind != g.Kind {
			continue
		}
		g.Routes = append(g.Routes, k)
		g.Rules = append(g.Rules, s.rulesOf(k)...)
	}
	slices.SortStableFunc(g.Rules, compareRules)
	b, _ := json.Marshal(g)
	g.Fingerprint = string(b)
	return g, true
}

func (s *Snapshot) backendOf(r route, ns string, b gwv1.BackendRef, filters []gwv1.HTTPRouteFilter) GatewayBackend {
	gb := GatewayBackend{Service: backendService(ns, b.BackendObjectReference), Weight: int(*b.Weight), Filters: filters}
	if b.Port != nil {
		gb.Port = int(*b.Port)
	}
	info, ok := s.services[gb.Service]
	gb.Valid = ok && slices.ContainsFunc(info.Ports, func(p ServicePort) bool { return p.Port == gb.Port }) &&
		(gb.Service.Namespace == ns || isParent(r, gb.Service) || granted(s.st, r.Key(), gb.Service))
	return gb
}

func (s *Snapshot) rulesOf(k Key) []GatewayRule {
	var out []GatewayRule
	switch r := s.st.objects[k].(type) {
	case *HTTPRoute:
		for i, rule := range r.Spec.Rules {
			base := GatewayRule{Route: k, Rule: i, Filters: rule.Filters, Timeouts: rule.Timeouts, Retry: rule.Retry}
			if rule.Name != nil {
				base.Name = string(*rule.Name)
			}
			for _, b := range rule.BackendRefs {
				base.Backends = append(base.Backends, s.backendOf(r, k.Namespace, b.BackendRef, b.Filters))
			}
			for j := range rule.Matches {
				gr := base
				gr.Match, gr.HTTP = j, &rule.Matches[j]
				out = append(out, gr)
			}
		}
	case *GRPCRoute:
		for i, rule := range r.Spec.Rules {
			base := GatewayRule{Route: k, Rule: i, Filters: gateway.GRPCFilters(rule.Filters)}
			if rule.Name != nil {
				base.Name = string(*rule.Name)
			}
			for _, b := range rule.BackendRefs {
				base.Backends = append(base.Backends, s.backendOf(r, k.Namespace, b.BackendRef, gateway.GRPCFilters(b.Filters)))
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
	case l4Route:
		out = s.l4RulesOf(k, r)
	}
	return out
}

// compareRules orders rules by the Gateway API's match precedence.
func compareRules(a, b GatewayRule) int {
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
func precedence(r GatewayRule) int {
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
func rank(r GatewayRule) [4]int {
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

// gatewayUpstreams adds to allowed the parents of routes whose backends
// src may call (callers call the parent's VIP and the route picks).
func (s *Snapshot) gatewayUpstreams(src mesh.ServiceAccount, allowed map[mesh.MeshService]bool) {
	if len(s.gateway.byParent) == 0 {
		return
	}
	direct := maps.Clone(allowed)
	for pp, byNS := range s.gateway.byParent {
		if allowed[pp.svc] {
			continue
		}
		for ns, keys := range byNS {
			if ns != pp.svc.Namespace && ns != src.Namespace {
				continue // another namespace's consumer routes
			}
			for _, k := range keys {
				for _, r := range s.rulesOf(k) {
					if slices.ContainsFunc(r.Backends, func(b GatewayBackend) bool { return direct[b.Service] }) {
						allowed[pp.svc] = true
					}
				}
			}
		}
	}
}

// grpcIgnored warns of what proxyless gRPC clients calling a grpc port
// the route attaches to do not honour (Envoy proxies do).
func grpcIgnored(v *validator, st *state, r route) {
	grpcPort := false
	for _, a := range resolveParents(st, r) {
		svc, _ := serviceOf(st.objects[serviceKey(a.parent)])
		for _, p := range a.ports {
			grpcPort = grpcPort || svc != nil && slices.ContainsFunc(svc.Spec.Ports, func(sp ServicePort) bool { return sp.Port == p && sp.AppProtocol == "grpc" })
		}
	}
	if !grpcPort {
		return
	}
	say := func(field, what string) {
		v.warnf(field, "%s: proxyless gRPC clients of the route's grpc ports do not honour it (Envoy proxies do)", what)
	}
	filters := func(field string, fs []gwv1.HTTPRouteFilter) {
		for i, f := range fs {
			ff := fmt.Sprintf("%s[%d]", field, i)
			switch f.Type {
			case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier:
				say(ff, string(f.Type)+" is not applied")
			case gwv1.HTTPRouteFilterRequestMirror:
				say(ff, "RequestMirror mirrors nothing")
			case gwv1.HTTPRouteFilterURLRewrite:
				say(ff, "URLRewrite does not rewrite: the call goes to the backends unchanged")
			case gwv1.HTTPRouteFilterRequestRedirect:
				say(ff, "RequestRedirect fails the call (UNAVAILABLE) instead of redirecting")
			}
		}
	}
	switch o := r.(type) {
	case *HTTPRoute:
		for i, rule := range o.Spec.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			filters(f+".filters", rule.Filters)
			for j, b := range rule.BackendRefs {
				filters(fmt.Sprintf("%s.backendRefs[%d].filters", f, j), b.Filters)
			}
			for j, m := range rule.Matches {
				mf := fmt.Sprintf("%s.matches[%d]", f, j)
				if m.Method != nil && *m.Method != gwv1.HTTPMethodPost {
					say(mf+".method", fmt.Sprintf("method %s never matches a gRPC call (every one is a POST)", *m.Method))
				}
				if len(m.QueryParams) > 0 {
					say(mf+".queryParams", "a query match never matches a gRPC call (gRPC calls carry no query)")
				}
			}
			if rule.Retry != nil {
				say(f+".retry", "retry on HTTP status codes is not applied (gRPC clients retry by gRPC status)")
			}
		}
	case *GRPCRoute:
		for i, rule := range o.Spec.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			filters(f+".filters", gateway.GRPCFilters(rule.Filters))
			for j, b := range rule.BackendRefs {
				filters(fmt.Sprintf("%s.backendRefs[%d].filters", f, j), gateway.GRPCFilters(b.Filters))
			}
		}
	}
}
