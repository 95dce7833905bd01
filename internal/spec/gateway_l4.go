package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
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
	KindTLSRoute            = "TLSRoute"
	APIVersionGatewayAlpha2 = "gateway.networking.k8s.io/v1alpha2"
	maxTLSRouteHostnames    = 1024
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

func defaultL4Rules(rules []gwv1.TCPRouteRule) {
	for _, rule := range rules {
		for j := range rule.BackendRefs {
			b := &rule.BackendRefs[j]
			defaultBackendRef(&b.BackendObjectReference)
			if b.Weight == nil {
				b.Weight = ptr(int32(1))
			}
		}
	}
}

func (r *GatewayTCPRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	defaultParentRefs(r.Spec.ParentRefs)
	defaultL4Rules(r.l4Rules())
}

func (r *TLSRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	defaultParentRefs(r.Spec.ParentRefs)
	defaultL4Rules(r.l4Rules())
}

func (r *GatewayTCPRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
}

func (r *TLSRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
}

func (r *GatewayTCPRoute) validate(v *validator) {
	validateL4Route(v, r, r.Spec.UseDefaultGateways, "TCP")
}

func (r *TLSRoute) validate(v *validator) {
	validateL4Route(v, r, r.Spec.UseDefaultGateways, "TLS")
	hs := r.Spec.Hostnames
	if len(hs) == 0 || len(hs) > maxTLSRouteHostnames {
		v.errorf("spec.hostnames", "want 1 to %d host names (the SNI names the route serves), got %d", maxTLSRouteHostnames, len(hs))
	}
	for i, h := range hs {
		f := fmt.Sprintf("spec.hostnames[%d]", i)
		switch {
		case isIPName(string(h)):
			v.errorf(f, "%q: Hostnames cannot contain an IP (SNI carries names only, RFC 6066)", h)
		case strings.Contains(string(h), "*") && (!strings.HasPrefix(string(h), "*.") || !preciseHostPattern.MatchString(string(h)[2:])):
			v.errorf(f, "%q: Wildcards on hostnames must be the first label, and the rest of hostname must be valid based on RFC-1123 (such as *.example.com)", h)
		case !strings.Contains(string(h), "*") && !preciseHostPattern.MatchString(string(h)):
			v.errorf(f, "%q: Hostnames must be valid based on RFC-1123: want lower-case DNS labels (such as db.example.com)", h)
		case len(h) > 253:
			v.errorf(f, "%d characters, more than 253", len(h))
		}
	}
}

func isIPName(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// validateL4Route applies the CRD's rules TCPRoute and TLSRoute share:
// Gateway parents only, exactly one rule of 1 to 16 backendRefs.
func validateL4Route(v *validator, r l4Route, useDefault gwv1.GatewayDefaultScope, proto string) {
	kind := r.Key().Kind
	routeParents(v, r.parentRefs())
	for i, p := range r.parentRefs() {
		if !isGatewayRef(p) && string(*p.Group) == "" && string(*p.Kind) == KindService {
			v.errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "a %s attaches to a Gateway's %s listeners ({name: <gateway>, sectionName: <listener>}), not to a Service: the mesh's own TCP traffic is routed by SMI TrafficSplits", kind, proto)
		}
	}
	if useDefault != "" {
		v.errorf("spec.useDefaultGateways", "not supported: a route attaches to the Gateways its parentRefs name")
	}
	rules := r.l4Rules()
	if len(rules) != 1 {
		v.errorf("spec.rules", "want exactly 1 rule (the CRD's bounds), got %d: put every backend into one rule's backendRefs", len(rules))
	}
	names := map[string]int{}
	for i, rule := range rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		checkRuleName(v, f, rule.Name, names, i)
		if len(rule.BackendRefs) == 0 || len(rule.BackendRefs) > maxRuleBackends {
			v.errorf(f+".backendRefs", "want 1 to %d backendRefs, got %d", maxRuleBackends, len(rule.BackendRefs))
		}
		total := 0
		for j, b := range rule.BackendRefs {
			bf := fmt.Sprintf("%s.backendRefs[%d]", f, j)
			checkBackendRef(v, bf, b.BackendObjectReference)
			checkWeight(v, bf+".weight", *b.Weight)
			total += max(int(*b.Weight), 0)
		}
		if len(rule.BackendRefs) > 0 && total == 0 {
			v.warnf(f+".backendRefs", "weights sum to 0: every connection of this rule is refused (give a backend a positive weight)")
		}
	}
}

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

// routeKinds returns the route kinds a listener of protocol p admits.
func routeKinds(p gwv1.ProtocolType) []gwv1.Kind {
	switch p {
	case gwv1.TCPProtocolType:
		return []gwv1.Kind{KindTCPRoute}
	case gwv1.TLSProtocolType:
		return []gwv1.Kind{KindTLSRoute}
	}
	return []gwv1.Kind{KindHTTPRoute, KindGRPCRoute}
}

// checkL4Listener checks a TCP or TLS listener (Gateway.validate).
func checkL4Listener(v *validator, f string, l gwv1.Listener) {
	switch l.Protocol {
	case gwv1.TCPProtocolType:
		if l.TLS != nil {
			v.errorf(f+".tls", "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']: use protocol TLS")
		}
		if l.Hostname != nil && *l.Hostname != "" {
			v.errorf(f+".hostname", "hostname must not be specified for protocols ['TCP', 'UDP']: a TCP connection carries no host name (use protocol TLS to route by SNI)")
		}
	case gwv1.TLSProtocolType:
		t := l.TLS
		if t == nil {
			v.errorf(f+".tls", "tls mode must be set for protocol TLS: give tls: {mode: Passthrough} (or mode: Terminate with one certificateRef)")
			return
		}
		switch *t.Mode {
		case gwv1.TLSModePassthrough:
			if len(t.CertificateRefs) > 0 {
				v.errorf(f+".tls.certificateRefs", "a Passthrough listener holds no certificate (the backends terminate the clients' TLS): remove them")
			}
			if len(t.Options) > 0 {
				v.errorf(f+".tls.options", "not supported: remove them")
			}
		case gwv1.TLSModeTerminate:
			checkListenerTLS(v, f+".tls", t)
		default:
			v.errorf(f+".tls.mode", "unsupported mode %q: want Passthrough or Terminate", *t.Mode)
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

func kindList(ks []gwv1.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, " or ")
}
