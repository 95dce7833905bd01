package spec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// The Gateway kind (gateway.networking.k8s.io/v1): an ingress gateway.
// Its machines enroll with the Gateway's namespace and name as their
// service (osm-agent install --gateway ingress --service <ns>/<name>) and
// call the mesh as the service account of that name in that namespace,
// so TrafficTargets from it decide what it may reach. There is no
// GatewayClass kind: every Gateway names the one class osm-vm implements,
// GatewayClassName, whose controller is GatewayControllerName.
const (
	KindGateway = kindGateway
	// GatewayClassName is the gatewayClassName every Gateway names.
	GatewayClassName = gateway.ClassName
	// GatewayControllerName is the controller of that class (Gateway
	// status and the route status of Gateway parents).
	GatewayControllerName = gateway.ControllerName
	// GatewayCertDir is where a gateway machine keeps the certificates
	// its HTTPS listeners' certificateRefs name, unless its agent says
	// another directory: a reference to Secret <name> in namespace <ns>
	// is the PEM files <GatewayCertDir>/<ns>/<name>/tls.crt and tls.key
	// (Envoy reloads them when they change).
	GatewayCertDir = meshapi.DefaultGatewayCertDir
)

// Gateway (gateway.networking.k8s.io/v1) is an ingress gateway: listeners
// on its machines' addresses, to which HTTPRoutes and GRPCRoutes attach.
type Gateway struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta   `json:"metadata"`
	Spec     gwv1.GatewaySpec `json:"spec"`
	// Status is filled in responses and ignored on apply.
	Status  *gwv1.GatewayStatus `json:"status,omitempty"`
	dropped []string
}

func (g *Gateway) Key() Key            { return keyOf(g.TypeMeta, g.Metadata.ObjectMeta) }
func (g *Gateway) meta() *ObjectMeta   { return &g.Metadata.ObjectMeta }
func (g *Gateway) typeMeta() *TypeMeta { return &g.TypeMeta }

func (g *Gateway) applyWarnings(v *validator) {
	ignoredWarning(v, g.dropped)
	validateWarnings(v, g)
}

func (g *Gateway) setDefaults() {
	g.Status = nil
	g.dropped = dropServerFields(&g.Metadata)
	gateway.DefaultGateway(&g.Spec)
}

func (g *Gateway) validate(v *validator) { gateway.ValidateGateway(v, &g.Spec) }

// routeHostnames returns a route's hostnames.
func (r *HTTPRoute) hostnames() []gwv1.Hostname { return r.Spec.Hostnames }
func (r *GRPCRoute) hostnames() []gwv1.Hostname { return r.Spec.Hostnames }

// hostMatches reports whether the precise or wildcard name a covers b
// (a "*.example.com" covers "x.example.com" and "y.x.example.com").
func hostMatches(a, b string) bool {
	if a == b {
		return true
	}
	if rest, ok := strings.CutPrefix(a, "*"); ok {
		return strings.HasSuffix(b, rest) && len(b) > len(rest)
	}
	return false
}

// intersectHosts returns the host names a route serves on a listener:
// the Gateway API's intersection of the listener's hostname and the
// route's hostnames ("*" for any); none when they do not intersect.
func intersectHosts(listener *gwv1.Hostname, route []gwv1.Hostname) []string {
	if len(route) == 0 {
		if listener == nil {
			return []string{"*"}
		}
		return []string{string(*listener)}
	}
	var out []string
	for _, h := range route {
		switch {
		case listener == nil:
			out = append(out, string(h))
		case hostMatches(string(*listener), string(h)):
			out = append(out, string(h))
		case hostMatches(string(h), string(*listener)):
			out = append(out, string(*listener))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// gatewayOf returns the Gateway named ns/name.
func gatewayOf(st *state, gw mesh.MeshService) (*Gateway, bool) {
	g, ok := st.objects[Key{Kind: KindGateway, Namespace: gw.Namespace, Name: gw.Name}].(*Gateway)
	return g, ok
}

// listenerAllows reports whether l admits a route of kind in namespace ns
// of a Gateway in gwNS, and why not.
func listenerAllows(l gwv1.Listener, gwNS string, r route) (bool, string, string) {
	k := r.Key()
	switch *l.AllowedRoutes.Namespaces.From {
	case gwv1.NamespacesFromNone:
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits no routes (allowedRoutes.namespaces.from: None)", l.Name)
	case gwv1.NamespacesFromSame:
		if k.Namespace != gwNS {
			return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits routes of namespace %q only (allowedRoutes.namespaces.from: Same; set All to admit others)", l.Name, gwNS)
		}
	}
	if !slices.Contains(gateway.RouteKinds(l.Protocol), gwv1.Kind(k.Kind)) {
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s is %s: it admits %s", l.Name, l.Protocol, gateway.KindList(gateway.RouteKinds(l.Protocol)))
	}
	if len(l.AllowedRoutes.Kinds) > 0 && !slices.ContainsFunc(l.AllowedRoutes.Kinds, func(rk gwv1.RouteGroupKind) bool { return string(rk.Kind) == k.Kind }) {
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits no %s (allowedRoutes.kinds)", l.Name, k.Kind)
	}
	return true, "", ""
}

// resolveGatewayParent attaches r to the listeners of the Gateway p names
// (sectionName, port, allowedRoutes, hostnames), or says why it attaches
// to none.
func resolveGatewayParent(st *state, r route, p gwv1.ParentReference, a *attachment) {
	a.gateway = true
	g, ok := gatewayOf(st, a.parent)
	if !ok {
		a.reason, a.message = string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("no Gateway %q in namespace %q", a.parent.Name, a.parent.Namespace)
		return
	}
	reason, msg := string(gwv1.RouteReasonNoMatchingParent), ""
	for _, l := range g.Spec.Listeners {
		if p.SectionName != nil && *p.SectionName != l.Name || p.Port != nil && *p.Port != l.Port {
			continue
		}
		if ok, why, m := listenerAllows(l, g.Metadata.Namespace, r); !ok {
			reason, msg = why, m
			continue
		}
		if len(intersectHosts(l.Hostname, r.hostnames())) == 0 {
			reason, msg = string(gwv1.RouteReasonNoMatchingListenerHostname), fmt.Sprintf("no hostname of the route matches listener %s's hostname %s", l.Name, *l.Hostname)
			continue
		}
		a.listeners = append(a.listeners, string(l.Name))
	}
	if len(a.listeners) > 0 {
		return
	}
	if msg == "" {
		switch {
		case p.SectionName != nil:
			msg = fmt.Sprintf("Gateway %s has no listener named %q", a.parent, *p.SectionName)
		case p.Port != nil:
			msg = fmt.Sprintf("Gateway %s has no listener on port %d", a.parent, *p.Port)
		default:
			msg = fmt.Sprintf("Gateway %s has no listener", a.parent)
		}
	}
	a.reason, a.message = reason, msg
}

// gatewayStatus is the status a controller would report for g: Accepted
// and Programmed, and each listener's attached routes.
func gatewayStatus(st *state, g *Gateway) *gwv1.GatewayStatus {
	gw := mesh.MeshService{Namespace: g.Metadata.Namespace, Name: g.Metadata.Name}
	attached := map[string]int32{}
	for _, k := range sortedObjectKeys(st.objects) {
		r, ok := st.objects[k].(route)
		if !ok {
			continue
		}
		for _, a := range resolveParents(st, r) {
			if a.gateway && a.parent == gw {
				for _, l := range a.listeners {
					attached[l]++
				}
			}
		}
	}
	status := &gwv1.GatewayStatus{Conditions: []metav1.Condition{
		{Type: string(gwv1.GatewayConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.GatewayReasonAccepted),
			Message: fmt.Sprintf("accepted by %s; its machines enroll as service %s (osm-agent install --gateway ingress)", GatewayControllerName, gw)},
		{Type: string(gwv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gwv1.GatewayReasonProgrammed),
			Message: "rendered for every connected gateway machine"},
	}}
	for _, l := range g.Spec.Listeners {
		kinds := l.AllowedRoutes.Kinds
		if len(kinds) == 0 {
			for _, k := range gateway.RouteKinds(l.Protocol) {
				kinds = append(kinds, gwv1.RouteGroupKind{Group: ptr(gwv1.Group(GroupGateway)), Kind: k})
			}
		}
		status.Listeners = append(status.Listeners, gwv1.ListenerStatus{Name: l.Name, SupportedKinds: kinds, AttachedRoutes: attached[string(l.Name)],
			Conditions: []metav1.Condition{
				{Type: string(gwv1.ListenerConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonAccepted), Message: "accepted"},
				{Type: string(gwv1.ListenerConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonProgrammed), Message: "programmed"},
				{Type: string(gwv1.ListenerConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonResolvedRefs), Message: "resolved"},
			}})
	}
	return status
}

// GatewayListener is one listener of a Gateway with the routes attached.
type GatewayListener struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // HTTP, HTTPS, TLS or TCP
	// TLSMode is a TLS listener's: Passthrough or Terminate.
	TLSMode string `json:"tlsMode,omitempty"`
	// Hostname is the listener's ("" for any).
	Hostname string `json:"hostname,omitempty"`
	// Certificate names the Secret of an HTTPS listener or a TLS one that
	// terminates (see
	// GatewayCertDir).
	Certificate mesh.MeshService `json:"certificate,omitzero"`
	// Hosts are the virtual hosts: per host name ("*" for any), the rules
	// of the routes attached that serve it, in precedence order. On a TLS
	// listener a host name is an SNI name; a TCP listener has one, "*".
	Hosts []GatewayHost `json:"hosts,omitempty"`
}

// GatewayHost is one host name a listener serves and its rules.
type GatewayHost struct {
	Hostname string        `json:"hostname"`
	Rules    []GatewayRule `json:"rules"`
}

// GatewayInfo is a Gateway with the routes attached to its listeners.
type GatewayInfo struct {
	Gateway        mesh.MeshService    `json:"gateway"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	Listeners      []GatewayListener   `json:"listeners"`
	// Fingerprint identifies the content (equal for equal rendering).
	Fingerprint string `json:"-"`
}

// Services returns the distinct services the rules send or mirror to.
func (g GatewayInfo) Services() []mesh.MeshService {
	var out []mesh.MeshService
	for _, l := range g.Listeners {
		for _, h := range l.Hosts {
			out = append(out, GatewayRoutes{Rules: h.Rules}.Services()...)
		}
	}
	slices.SortFunc(out, mesh.MeshService.Compare)
	return slices.Compact(out)
}

// HostNames returns the precise host names the Gateway serves (listener
// and route host names, without wildcards), sorted: the names the DNS
// publisher publishes with the gateway machines' addresses.
func (g GatewayInfo) HostNames() []string {
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
func (s *Snapshot) Gateway(gw mesh.MeshService) (GatewayInfo, bool) {
	info, ok := s.gatewayInfos()[gw]
	return info, ok
}

// Gateways returns every Gateway with its attached routes, by namespace
// and name.
func (s *Snapshot) Gateways() []GatewayInfo {
	var out []GatewayInfo
	for _, k := range s.keys {
		if k.Kind == KindGateway {
			out = append(out, s.gatewayInfos()[mesh.MeshService{Namespace: k.Namespace, Name: k.Name}])
		}
	}
	return out
}

// gatewayInfos builds every GatewayInfo once per snapshot: one pass over
// the routes resolves their Gateway parents.
func (s *Snapshot) gatewayInfos() map[mesh.MeshService]GatewayInfo {
	s.gatewaysOnce.Do(func() {
		s.gateways = map[mesh.MeshService]GatewayInfo{}
		type listenerKey struct {
			gw       mesh.MeshService
			listener string
		}
		type lr struct {
			route Key
			hosts []string
		}
		byListener := map[listenerKey][]lr{}
		for _, k := range s.keys {
			r, ok := s.st.objects[k].(route)
			if !ok {
				continue
			}
			for _, a := range resolveParents(s.st, r) {
				if !a.gateway {
					continue
				}
				g, _ := gatewayOf(s.st, a.parent)
				for _, ln := range a.listeners {
					lk := listenerKey{a.parent, ln}
					l := g.Spec.Listeners[slices.IndexFunc(g.Spec.Listeners, func(l gwv1.Listener) bool { return string(l.Name) == ln })]
					if !slices.ContainsFunc(byListener[lk], func(x lr) bool { return x.route == k }) {
						byListener[lk] = append(byListener[lk], lr{k, intersectHosts(l.Hostname, r.hostnames())})
					}
				}
			}
		}
		for _, k := range s.keys {
			g, ok := s.st.objects[k].(*Gateway)
			if !ok {
				continue
			}
			gw := mesh.MeshService{Namespace: k.Namespace, Name: k.Name}
			info := GatewayInfo{Gateway: gw, ServiceAccount: mesh.ServiceAccount{Namespace: gw.Namespace, Name: gw.Name}}
			for _, l := range g.Spec.Listeners {
				gl := listenerInfo(gw, l)
				rules := map[string][]GatewayRule{}
				for _, x := range byListener[listenerKey{gw, string(l.Name)}] {
					for _, h := range x.hosts {
						rules[h] = append(rules[h], s.rulesOf(x.route)...)
					}
				}
				for h, rs := range rules {
					gl.Hosts = append(gl.Hosts, GatewayHost{Hostname: h, Rules: SortRules(rs)})
				}
				// Precise names before wildcards, longer wildcards first.
				slices.SortFunc(gl.Hosts, func(a, b GatewayHost) int {
					return cmp.Or(cmp.Compare(strings.Count(b.Hostname, "."), strings.Count(a.Hostname, ".")), strings.Compare(a.Hostname, b.Hostname))
				})
				info.Listeners = append(info.Listeners, gl)
			}
			slices.SortStableFunc(info.Listeners, func(a, b GatewayListener) int { return cmp.Compare(a.Port, b.Port) })
			b, _ := json.Marshal(info)
			info.Fingerprint = string(b)
			s.gateways[gw] = info
		}
	})
	return s.gateways
}

// listenerInfo is a listener without its routes.
func listenerInfo(gw mesh.MeshService, l gwv1.Listener) GatewayListener {
	gl := GatewayListener{Name: string(l.Name), Port: int(l.Port), Protocol: string(l.Protocol)}
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

// SortRules returns rules in the Gateway API's precedence order (as
// GatewayRoutes orders them).
func SortRules(rules []GatewayRule) []GatewayRule {
	out := slices.Clone(rules)
	slices.SortStableFunc(out, compareRules)
	return out
}
