package gateway

import (
	"fmt"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// RouteName names a route document: its kind, namespace and name (spec's
// Key has the same fields and converts to it).
type RouteName struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String returns "Kind namespace/name".
func (n RouteName) String() string { return n.Kind + " " + n.Namespace + "/" + n.Name }

// Route is a route document as resolution sees it: its name and its spec,
// exactly one of HTTP, GRPC, TCP and TLS. The pointers are the document's
// own: resolution only reads them.
type Route struct {
	Name RouteName
	HTTP *gwv1.HTTPRouteSpec
	GRPC *gwv1.GRPCRouteSpec
	TCP  *gwv1.TCPRouteSpec
	TLS  *gwv1.TLSRouteSpec
}

func (r Route) parentRefs() []gwv1.ParentReference {
	switch {
	case r.HTTP != nil:
		return r.HTTP.ParentRefs
	case r.GRPC != nil:
		return r.GRPC.ParentRefs
	case r.TCP != nil:
		return r.TCP.ParentRefs
	case r.TLS != nil:
		return r.TLS.ParentRefs
	}
	return nil
}

func (r Route) hostnames() []gwv1.Hostname {
	switch {
	case r.HTTP != nil:
		return r.HTTP.Hostnames
	case r.GRPC != nil:
		return r.GRPC.Hostnames
	case r.TLS != nil:
		return r.TLS.Hostnames
	}
	return nil
}

// attachesTo reports whether the route can serve a Service port with this
// appProtocol: HTTPRoutes serve HTTP and gRPC ports (gRPC is HTTP/2),
// GRPCRoutes gRPC ports only, layer-4 routes attach to Gateways only.
func (r Route) attachesTo(appProtocol string) bool {
	switch {
	case r.HTTP != nil:
		return appProtocol == "http" || appProtocol == "grpc"
	case r.GRPC != nil:
		return appProtocol == "grpc"
	}
	return false
}

func (r Route) protocols() string {
	if r.attachesTo("http") {
		return "http or grpc"
	}
	return "grpc"
}

// l4 reports whether the route is a TCPRoute or a TLSRoute.
func (r Route) l4() bool { return r.TCP != nil || r.TLS != nil }

// l4Rules returns a layer-4 route's rules (a TLSRoute's in the TCPRoute
// form, which has the same fields; the backendRefs are shared, not
// copied).
func (r Route) l4Rules() []gwv1.TCPRouteRule {
	switch {
	case r.TCP != nil:
		return r.TCP.Rules
	case r.TLS != nil:
		return TLSRules(r.TLS.Rules)
	}
	return nil
}

// TLSRules returns TLSRoute rules in the TCPRoute form.
func TLSRules(rules []gwv1.TLSRouteRule) []gwv1.TCPRouteRule {
	out := make([]gwv1.TCPRouteRule, len(rules))
	for i, rule := range rules {
		out[i] = gwv1.TCPRouteRule(rule)
	}
	return out
}

// fieldRef is a backendRef with its field path.
type fieldRef struct {
	field string
	ref   gwv1.BackendObjectReference
}

func mirrorRefs(field string, fs []gwv1.HTTPRouteFilter) []fieldRef {
	var out []fieldRef
	for i, f := range fs {
		if f.RequestMirror != nil {
			out = append(out, fieldRef{fmt.Sprintf("%s[%d].requestMirror.backendRef", field, i), f.RequestMirror.BackendRef})
		}
	}
	return out
}

// backendRefs returns every backendRef and mirror backendRef of the route
// with its field path.
func (r Route) backendRefs() []fieldRef {
	var out []fieldRef
	switch {
	case r.HTTP != nil:
		for i, rule := range r.HTTP.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			out = append(out, mirrorRefs(f+".filters", rule.Filters)...)
			for j, b := range rule.BackendRefs {
				out = append(out, fieldRef{fmt.Sprintf("%s.backendRefs[%d]", f, j), b.BackendObjectReference})
			}
		}
	case r.GRPC != nil:
		for i, rule := range r.GRPC.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			out = append(out, mirrorRefs(f+".filters", GRPCFilters(rule.Filters))...)
			for j, b := range rule.BackendRefs {
				out = append(out, fieldRef{fmt.Sprintf("%s.backendRefs[%d]", f, j), b.BackendObjectReference})
			}
		}
	default:
		for i, rule := range r.l4Rules() {
			for j, b := range rule.BackendRefs {
				out = append(out, fieldRef{fmt.Sprintf("spec.rules[%d].backendRefs[%d]", i, j), b.BackendObjectReference})
			}
		}
	}
	return out
}
