package spec

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// KindEgress is the project's own egress policy, modelled on OSM's
// policy.openservicemesh.io Egress: which service accounts may reach which
// external host names, on which ports and protocols.
const KindEgress = "Egress"

// Egress protocols.
const (
	EgressHTTP = "http" // HTTP, routed by Host (optionally by matches); TLS originated when originateTLS
	EgressTCP  = "tcp"  // any TCP; TLS originated when originateTLS
	EgressTLS  = "tls"  // TLS from the application, passed through by SNI
)

var egressProtocols = []string{EgressHTTP, EgressTCP, EgressTLS}

// egressVIPNamespace keys an external host's virtual IP among the
// Services' VIPs (state.vips): no namespace can have this name, so the
// two never collide, and one allocator hands out both from one range.
const egressVIPNamespace = "~egress"

func egressVIPKey(host string) mesh.MeshService {
	return mesh.MeshService{Namespace: egressVIPNamespace, Name: host}
}

// vipHolderName names what holds a VIP in messages: "ns/name" for a
// service, "external host api.example.com" for an Egress host.
func vipHolderName(k mesh.MeshService) string {
	if k.Namespace == egressVIPNamespace {
		return "external host " + k.Name
	}
	return k.String()
}

// Egress (osm-vm.io/v1alpha1) allows sources to reach external hosts.
type Egress struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     EgressSpec `json:"spec"`
}

// EgressSpec is the spec of an Egress.
type EgressSpec struct {
	// Sources are the service accounts allowed out; namespace defaults
	// to the Egress's.
	Sources []IdentityBindingSubject `json:"sources"`
	// Hosts are external DNS names (lower case, fully qualified).
	Hosts []string `json:"hosts"`
	// Ports are the ports the sources call, with their protocols.
	Ports []EgressPort `json:"ports"`
	// Matches restrict HTTP ports to the requests of these
	// HTTPRouteGroups (in the Egress's namespace); all requests when empty.
	Matches []TypedLocalObjectReference `json:"matches,omitempty"`
	// Gateway, when set, sends the traffic through the machines of this
	// EgressGateway instead of out of each source's own Envoy.
	Gateway *EgressGatewayRef `json:"gateway,omitempty"`
}

// EgressPort is one port of an Egress.
type EgressPort struct {
	// Number is the port the application calls (on the host's virtual IP).
	Number int `json:"number"`
	// Protocol is http, tcp or tls.
	Protocol string `json:"protocol"`
	// TargetPort is the host's port Envoy connects to; defaults to
	// Number (443 is usual with originateTLS).
	TargetPort int `json:"targetPort,omitempty"`
	// OriginateTLS makes Envoy speak TLS to the host (checking its
	// certificate against the system's roots and the host name) while the
	// application speaks plain http or tcp.
	OriginateTLS bool `json:"originateTLS,omitempty"`
}

func (e *Egress) Key() Key            { return keyOf(e.TypeMeta, e.Metadata) }
func (e *Egress) meta() *ObjectMeta   { return &e.Metadata }
func (e *Egress) typeMeta() *TypeMeta { return &e.TypeMeta }
func (e *Egress) setDefaults() {
	if e.Spec.Gateway != nil && e.Spec.Gateway.Namespace == "" {
		e.Spec.Gateway.Namespace = e.Metadata.Namespace
	}
	for i := range e.Spec.Sources {
		if e.Spec.Sources[i].Namespace == "" {
			e.Spec.Sources[i].Namespace = e.Metadata.Namespace
		}
	}
	for i := range e.Spec.Ports {
		if e.Spec.Ports[i].TargetPort == 0 {
			e.Spec.Ports[i].TargetPort = e.Spec.Ports[i].Number
		}
	}
}

func (e *Egress) validate(v *validator) {
	if len(e.Spec.Sources) == 0 {
		v.errorf("spec.sources", "no sources: add at least one {kind: ServiceAccount, name: ...}")
	}
	for i, s := range e.Spec.Sources {
		f := fmt.Sprintf("spec.sources[%d]", i)
		validateSubject(v, f, s)
		if s.Port != nil {
			v.errorf(f+".port", "an Egress source has no port: remove it and list the ports in spec.ports")
		}
	}
	if len(e.Spec.Hosts) == 0 {
		v.errorf("spec.hosts", "no hosts: add at least one external host name, such as api.example.com")
	}
	seenHost := map[string]int{}
	for i, h := range e.Spec.Hosts {
		f := fmt.Sprintf("spec.hosts[%d]", i)
		if checkEgressHostLiteral(v, f, h) {
			continue
		}
		if err := checkHostname(h); err != nil {
			v.errorf(f, "%v", err)
		} else if j, ok := seenHost[h]; ok {
			v.errorf(f, "duplicate host %q (also spec.hosts[%d]): list each host once", h, j)
		} else {
			seenHost[h] = i
		}
	}
	if len(e.Spec.Ports) == 0 {
		v.errorf("spec.ports", "no ports: add at least one {number: 443, protocol: tls}")
	}
	seenPort := map[int]int{}
	hasHTTP := false
	for i, p := range e.Spec.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		checkPort(v, f+".number", p.Number)
		if p.TargetPort != p.Number {
			checkPort(v, f+".targetPort", p.TargetPort)
		}
		if j, ok := seenPort[p.Number]; ok {
			v.errorf(f+".number", "duplicate port %d (also spec.ports[%d]): give each port once", p.Number, j)
		} else {
			seenPort[p.Number] = i
		}
		switch {
		case p.Protocol == "https":
			v.errorf(f+".protocol", "protocol \"https\" is ambiguous here: use tls (the application speaks TLS, passed through by SNI) or http with originateTLS: true (Envoy speaks TLS to the host)")
		case !slices.Contains(egressProtocols, p.Protocol):
			v.errorf(f+".protocol", "unsupported protocol %q: want http, tcp or tls%s", p.Protocol, didYouMean(p.Protocol, egressProtocols))
		case p.Protocol == EgressTLS && p.OriginateTLS:
			v.errorf(f+".originateTLS", "a tls port carries the application's own TLS: remove originateTLS, or use http or tcp to have Envoy originate TLS")
		}
		hasHTTP = hasHTTP || p.Protocol == EgressHTTP
	}
	if len(e.Spec.Matches) > 0 && !hasHTTP {
		v.errorf("spec.matches", "matches restrict HTTP requests, but no port has protocol http: remove them or add an http port")
	}
	if g := e.Spec.Gateway; g != nil {
		if err := mesh.ValidateLabel("name", g.Name); err != nil {
			v.errorf("spec.gateway.name", "%v: name an EgressGateway", err)
		}
		if err := mesh.ValidateLabel("namespace", g.Namespace); err != nil {
			v.errorf("spec.gateway.namespace", "%v", err)
		}
	}
	for i, m := range e.Spec.Matches {
		f := fmt.Sprintf("spec.matches[%d]", i)
		if m.Kind != KindHTTPRouteGroup {
			v.errorf(f+".kind", "unsupported kind %q: want HTTPRouteGroup", m.Kind)
		}
		if err := mesh.ValidateLabel("name", m.Name); err != nil {
			v.errorf(f+".name", "%v", err)
		}
	}
}

// checkEgress validates e against the state it is applied into: a host's
// port must mean the same in every Egress (one listener serves it, out of
// the same gateway or of none), its EgressGateway must exist, an internal
// host must be allowed by the MeshConfig, and missing
// HTTPRouteGroups and service accounts are warnings.
func checkEgress(v *validator, st *state, e *Egress) {
	checkEgressGatewayRef(v, st, e)
	checkEgressInternal(v, st.meshConfig(), e)
	for _, k := range sortedObjectKeys(st.objects) {
		o, ok := st.objects[k].(*Egress)
		if !ok || k == e.Key() {
			continue
		}
		for i, h := range e.Spec.Hosts {
			if !slices.Contains(o.Spec.Hosts, h) {
				continue
			}
			for j, p := range e.Spec.Ports {
				for _, q := range o.Spec.Ports {
					if q.Number == p.Number && q != p {
						v.errorf(fmt.Sprintf("spec.ports[%d]", j), "host %q (spec.hosts[%d]) port %d is %s in %s: one host's port has one meaning; use the same protocol, targetPort and originateTLS, or another port", h, i, p.Number, describePort(q), k)
					} else if q.Number == p.Number && gatewayName(o) != gatewayName(e) {
						v.errorf(fmt.Sprintf("spec.ports[%d]", j), "host %q (spec.hosts[%d]) port %d goes out %s in %s, and %s here: one host's port leaves one way; use the same spec.gateway, or another port", h, i, p.Number, gatewayName(o), k, gatewayName(e))
					}
				}
			}
		}
	}
	accounts := map[IdentityBindingSubject]bool{}
	for _, o := range st.objects {
		if s, ok := o.(*Service); ok {
			accounts[IdentityBindingSubject{Kind: serviceAccountKindSMI, Namespace: s.Metadata.Namespace, Name: s.Spec.ServiceAccount}] = true
		}
	}
	for i, src := range e.Spec.Sources {
		if !accounts[IdentityBindingSubject{Kind: src.Kind, Namespace: src.Namespace, Name: src.Name}] {
			v.warnf(fmt.Sprintf("spec.sources[%d]", i), "no Service runs as service account %q in namespace %q yet", src.Name, src.Namespace)
		}
	}
	ns := e.Metadata.Namespace
	for i, m := range e.Spec.Matches {
		if _, ok := st.objects[Key{Kind: m.Kind, Namespace: ns, Name: m.Name}]; !ok {
			v.warnf(fmt.Sprintf("spec.matches[%d]", i), "%s %q not found in namespace %q yet: the http ports allow no request until it exists%s", m.Kind, m.Name, ns, didYouMean(m.Name, namesOfKind(st, m.Kind, ns)))
		}
	}
}

// gatewayName says how e's traffic leaves, for messages.
func gatewayName(e *Egress) string {
	if g := e.Spec.Gateway; g != nil {
		return "through EgressGateway " + g.Namespace + "/" + g.Name
	}
	return "from each source's own Envoy"
}

func describePort(p EgressPort) string {
	s := fmt.Sprintf("%s to port %d", p.Protocol, p.TargetPort)
	if p.OriginateTLS {
		s += " with originateTLS"
	}
	return s
}

// egressHosts returns every host some Egress names, sorted.
func egressHosts(st *state) []string {
	var out []string
	for _, o := range st.objects {
		if e, ok := o.(*Egress); ok {
			out = append(out, e.Spec.Hosts...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EgressRoute is one external host and port a source may call.
type EgressRoute struct {
	Host string     `json:"host"`
	VIP  netip.Addr `json:"vip"`
	EgressPort
	// Matches restrict an http port to these requests when RestrictedBy
	// is not empty (none, when the groups they name do not exist yet).
	Matches []HTTPRouteMatch `json:"matches,omitempty"`
	// RestrictedBy names the Egresses whose matches Matches holds; empty
	// when all requests are allowed.
	RestrictedBy []Key `json:"restrictedBy,omitempty"`
	// Gateway is the egress gateway the source sends the traffic
	// through; zero when its own Envoy connects to the host.
	Gateway EgressGatewayInfo `json:"gateway,omitzero"`
}

// Egress returns the external hosts and ports src may call, ordered by
// host and port: the union of every Egress listing src. Where Egresses
// give one host's port different meanings (apply refuses that; a store
// written otherwise), the first by namespace and name wins. An http port
// allows all requests if any such Egress has no matches, else the union
// of their matches.
func (s *Snapshot) Egress(src mesh.ServiceAccount) []EgressRoute {
	type hp struct {
		host string
		port int
	}
	routes := map[hp]*EgressRoute{}
	all := map[hp]bool{}
	for _, k := range s.keysOf(KindEgress) {
		e, ok := s.st.objects[k].(*Egress)
		if !ok || !slices.ContainsFunc(e.Spec.Sources, func(b IdentityBindingSubject) bool {
			return b.Namespace == src.Namespace && b.Name == src.Name
		}) {
			continue
		}
		gw, viaGateway := egressGatewayOf(s.st, e)
		if e.Spec.Gateway != nil && !viaGateway {
			continue // its EgressGateway is gone: no way out (apply refuses this)
		}
		var matches []HTTPRouteMatch
		for _, m := range e.Spec.Matches {
			if g, ok := s.st.objects[Key{Kind: KindHTTPRouteGroup, Namespace: k.Namespace, Name: m.Name}].(*HTTPRouteGroup); ok {
				for _, hm := range g.Spec.Matches {
					matches = append(matches, HTTPRouteMatch{Group: g.Metadata.Name, Name: hm.Name, PathRegex: hm.PathRegex, Methods: hm.Methods, Headers: hm.Headers})
				}
			}
		}
		for _, h := range e.Spec.Hosts {
			vip, ok := s.st.vips[egressVIPKey(h)]
			if !ok || !egressHostAllowed(s.config, h) {
				continue
			}
			for _, p := range e.Spec.Ports {
				key := hp{h, p.Number}
				r := routes[key]
				if r == nil {
					r = &EgressRoute{Host: h, VIP: vip, EgressPort: p, Gateway: gw}
					routes[key] = r
				} else if r.EgressPort != p || r.Gateway != gw {
					continue
				}
				if p.Protocol != EgressHTTP {
					continue
				}
				if len(e.Spec.Matches) == 0 {
					all[key] = true
					continue
				}
				r.Matches = append(r.Matches, matches...)
				r.RestrictedBy = append(r.RestrictedBy, k)
			}
		}
	}
	out := make([]EgressRoute, 0, len(routes))
	for k, r := range routes {
		if all[k] {
			r.Matches, r.RestrictedBy = nil, nil
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b EgressRoute) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Number, b.Number))
	})
	return out
}

// EgressHost is an external host name and its virtual IP.
type EgressHost struct {
	Host string
	VIP  netip.Addr
}

// EgressHosts returns the external hosts src may call with their virtual
// IPs (for the agent's hosts block), sorted by host. An egress gateway's
// account gets none: its machines resolve the real names.
func (s *Snapshot) EgressHosts(src mesh.ServiceAccount) []EgressHost {
	if s.isEgressGateway(src) {
		return nil
	}
	var out []EgressHost
	for _, r := range s.Egress(src) {
		if len(out) == 0 || out[len(out)-1].Host != r.Host {
			out = append(out, EgressHost{Host: r.Host, VIP: r.VIP})
		}
	}
	return out
}
