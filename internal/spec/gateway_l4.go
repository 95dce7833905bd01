package spec

import (
	"fmt"
	"slices"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// The Gateway API's layer-4 routes, attached to a Gateway's TCP and TLS
// listeners: TCPRoute (a TCP listener forwards each connection to the
// rule's backendRefs, weighted) and TLSRoute (a TLS listener picks the
// route by the client's SNI; in Passthrough mode the client's TLS goes
// through to the backend unterminated, in Terminate mode the gateway
// terminates it with the listener's certificate). Either way the gateway
// carries the connection to the backend's Envoy over the mesh's mTLS, as
// its service account, so the backend's port must be a tcp one (its
// inbound listener forwards the bytes to the application, which then sees
// the client's own TLS in Passthrough mode).
//
// The Gateway API's TCPRoute shares its kind with SMI's TCPRoute
// (specs.smi-spec.io): the apiVersion tells them apart, as it tells an
// osm-vm Service from a Kubernetes one, and one namespace/name holds one
// of them.
const (
	KindTLSRoute            = gateway.KindTLSRoute
	APIVersionGatewayAlpha2 = "gateway.networking.k8s.io/v1alpha2"
)

// gatewayL4Kinds are added to kinds (types.go), after gatewayKinds.
var gatewayL4Kinds = []kindInfo{
	{KindTLSRoute, APIVersionGateway, "tlsroutes", true, func() Object { return &TLSRoute{} }},
}

// gatewayL4Forms are the apiVersions the Gateway API serves them in.
var gatewayL4Forms = []form{
	{APIVersionGateway, KindTCPRoute, func() Object { return &GatewayTCPRoute{} }},
	{APIVersionGatewayAlpha2, KindTCPRoute, func() Object { return &GatewayTCPRoute{} }},
	{APIVersionGatewayAlpha2, KindTLSRoute, func() Object { return &TLSRoute{} }},
}

// GatewayTCPRoute is the Gateway API's TCPRoute
// (gateway.networking.k8s.io/v1 or v1alpha2): it attaches to a Gateway's
// TCP listeners and forwards their connections to its backendRefs.
type GatewayTCPRoute struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta    `json:"metadata"`
	Spec     gwv1.TCPRouteSpec `json:"spec"`
	Status   *gwv1.RouteStatus `json:"status,omitempty"`
	dropped  []string
}

// TLSRoute (gateway.networking.k8s.io/v1 or v1alpha2) attaches to a
// Gateway's TLS listeners and forwards the connections whose SNI matches
// its hostnames to its backendRefs.
type TLSRoute struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta    `json:"metadata"`
	Spec     gwv1.TLSRouteSpec `json:"spec"`
	Status   *gwv1.RouteStatus `json:"status,omitempty"`
	dropped  []string
}

func (r *GatewayTCPRoute) Key() Key            { return keyOf(r.TypeMeta, r.Metadata.ObjectMeta) }
func (r *GatewayTCPRoute) meta() *ObjectMeta   { return &r.Metadata.ObjectMeta }
func (r *GatewayTCPRoute) typeMeta() *TypeMeta { return &r.TypeMeta }
func (r *TLSRoute) Key() Key                   { return keyOf(r.TypeMeta, r.Metadata.ObjectMeta) }
func (r *TLSRoute) meta() *ObjectMeta          { return &r.Metadata.ObjectMeta }
func (r *TLSRoute) typeMeta() *TypeMeta        { return &r.TypeMeta }

func (r *GatewayTCPRoute) parentRefs() []gwv1.ParentReference { return r.Spec.ParentRefs }
func (r *TLSRoute) parentRefs() []gwv1.ParentReference        { return r.Spec.ParentRefs }
func (r *GatewayTCPRoute) hostnames() []gwv1.Hostname         { return nil }
func (r *TLSRoute) hostnames() []gwv1.Hostname                { return r.Spec.Hostnames }

// Layer-4 routes attach to Gateways only (validate refuses Service
// parents).
func (r *GatewayTCPRoute) attachesTo(string) bool { return false }
func (r *TLSRoute) attachesTo(string) bool        { return false }

func l4BackendRefs(rules []gwv1.TCPRouteRule) []fieldRef {
	var out []fieldRef
	for i, rule := range rules {
		for j, b := range rule.BackendRefs {
			out = append(out, fieldRef{fmt.Sprintf("spec.rules[%d].backendRefs[%d]", i, j), b.BackendObjectReference})
		}
	}
	return out
}

// l4Rules returns the route's rules (a TLSRoute's in the TCPRoute form,
// which has the same fields; the backendRefs are shared, not copied).
func (r *GatewayTCPRoute) l4Rules() []gwv1.TCPRouteRule { return r.Spec.Rules }

func (r *TLSRoute) l4Rules() []gwv1.TCPRouteRule {
	out := make([]gwv1.TCPRouteRule, len(r.Spec.Rules))
	for i, rule := range r.Spec.Rules {
		out[i] = gwv1.TCPRouteRule(rule)
	}
	return out
}

func (r *GatewayTCPRoute) backendRefs() []fieldRef { return l4BackendRefs(r.l4Rules()) }
func (r *TLSRoute) backendRefs() []fieldRef        { return l4BackendRefs(r.l4Rules()) }

// l4Route is what TCPRoute and TLSRoute share.
type l4Route interface {
	route
	l4Rules() []gwv1.TCPRouteRule
}

func (r *GatewayTCPRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultL4Route(r.Spec.ParentRefs, r.l4Rules())
}

func (r *TLSRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultL4Route(r.Spec.ParentRefs, r.l4Rules())
}

func (r *GatewayTCPRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
}

func (r *TLSRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
}

func (r *GatewayTCPRoute) validate(v *validator) { gateway.ValidateTCPRoute(v, &r.Spec) }
func (r *TLSRoute) validate(v *validator)        { gateway.ValidateTLSRoute(v, &r.Spec) }

// l4References checks a layer-4 route's backends against st (apply):
// the gateway carries raw connections, so each backend port must be a tcp
// port (an http or grpc port's inbound listener speaks HTTP).
func l4References(v *validator, st *state, r l4Route) {
	ns := r.Key().Namespace
	for _, fr := range r.backendRefs() {
		b := fr.ref
		if b.Port == nil {
			continue
		}
		svc, ok := serviceOf(st.objects[serviceKey(backendService(ns, b))])
		if !ok {
			continue // resolveBackends says so
		}
		for _, p := range svc.Spec.Ports {
			if p.Port == int(*b.Port) && p.AppProtocol != "tcp" {
				v.errorf(fr.field+".port", "port %d of Service %s is %s: a %s carries raw connections, which that port's inbound listener does not accept; name a port with appProtocol: tcp", p.Port, backendService(ns, b), p.AppProtocol, r.Key().Kind)
			}
		}
	}
}

// tcpPort reports whether port of svc exists and is a tcp port.
func (s *Snapshot) tcpPort(svc mesh.MeshService, port int) bool {
	info, ok := s.services[svc]
	return ok && slices.ContainsFunc(info.Ports, func(p ServicePort) bool { return p.Port == port && p.AppProtocol == "tcp" })
}

// l4RulesOf returns the one rule of a layer-4 route as a GatewayRule
// (no match: every connection the listener and host name give it). A
// backend is valid when it resolves and its port is a tcp port.
func (s *Snapshot) l4RulesOf(k Key, r l4Route) []GatewayRule {
	var out []GatewayRule
	for i, rule := range r.l4Rules() {
		gr := GatewayRule{Route: k, Rule: i}
		if rule.Name != nil {
			gr.Name = string(*rule.Name)
		}
		for _, b := range rule.BackendRefs {
			gb := s.backendOf(r, k.Namespace, b, nil)
			gb.Valid = gb.Valid && s.tcpPort(gb.Service, gb.Port)
			gr.Backends = append(gr.Backends, gb)
		}
		out = append(out, gr)
	}
	return out
}
