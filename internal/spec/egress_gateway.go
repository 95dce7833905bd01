package spec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// KindEgressGateway (osm-vm.io/v1alpha1) declares an egress gateway: a
// mesh identity whose machines (osm-agent install --gateway egress
// --service <ns>/<name>) carry to the outside the Egress traffic whose
// spec.gateway names it. Its machines enroll as the service <ns>/<name>
// and hold the service account of that name; the sources' Envoys reach
// them as an EDS cluster of that service (the gateway machines are its
// endpoints, listed in a provider like any service's machines, on
// spec.port), over mTLS, with the external host and port in the SNI
// (EgressGatewaySNI).
const KindEgressGateway = "EgressGateway"

// DefaultEgressGatewayPort is the port an egress gateway's machines
// accept the sources' mTLS on when its spec.port is left out.
const DefaultEgressGatewayPort = 15444

// EgressGateway (osm-vm.io/v1alpha1) is an egress gateway identity.
type EgressGateway struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     EgressGatewaySpec `json:"spec"`
}

// EgressGatewaySpec is the spec of an EgressGateway.
type EgressGatewaySpec struct {
	// Port is where the gateway machines' Envoy accepts the sources'
	// mTLS (on their advertise address); DefaultEgressGatewayPort when
	// left out. A provider lists the machines with this port.
	Port int `json:"port,omitempty"`
}

// EgressGatewayRef names an EgressGateway from an Egress.
type EgressGatewayRef struct {
	// Name is the EgressGateway's name.
	Name string `json:"name"`
	// Namespace is its namespace; the Egress's when left out.
	Namespace string `json:"namespace,omitempty"`
}

func (g *EgressGateway) Key() Key            { return keyOf(g.TypeMeta, g.Metadata) }
func (g *EgressGateway) meta() *ObjectMeta   { return &g.Metadata }
func (g *EgressGateway) typeMeta() *TypeMeta { return &g.TypeMeta }
func (g *EgressGateway) setDefaults() {
	if g.Spec.Port == 0 {
		g.Spec.Port = DefaultEgressGatewayPort
	}
}

func (g *EgressGateway) validate(v *validator) {
	checkPort(v, "spec.port", g.Spec.Port)
}

// EgressGatewayInfo is an egress gateway as rendering needs it; the zero
// value is "no gateway".
type EgressGatewayInfo struct {
	// Service is what its machines enroll as (the EgressGateway's
	// namespace and name), and the name of their endpoints.
	Service mesh.MeshService `json:"service"`
	// ServiceAccount is what its machines' certificates name.
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	// Port is where its machines accept the sources' mTLS.
	Port int `json:"port"`
}

// IsZero reports whether g names no gateway.
func (g EgressGatewayInfo) IsZero() bool { return g == EgressGatewayInfo{} }

// EgressGatewaySNI is the server name a source's Envoy sends to an egress
// gateway for the external host and port (the port the application
// calls): the gateway picks its filter chain by it.
func EgressGatewaySNI(host string, port int) string {
	return fmt.Sprintf("%d.%s", port, host)
}

// EgressGateway returns the EgressGateway whose machines enroll as svc.
func (s *Snapshot) EgressGateway(svc mesh.MeshService) (EgressGatewayInfo, bool) {
	g, ok := s.st.objects[Key{Kind: KindEgressGateway, Namespace: svc.Namespace, Name: svc.Name}].(*EgressGateway)
	if !ok {
		return EgressGatewayInfo{}, false
	}
	return egressGatewayInfo(g), true
}

// EgressGateways returns every EgressGateway, ordered by namespace and
// name.
func (s *Snapshot) EgressGateways() []EgressGatewayInfo {
	var out []EgressGatewayInfo
	for _, k := range s.keys {
		if k.Kind == KindEgressGateway {
			if g, ok := s.st.objects[k].(*EgressGateway); ok {
				out = append(out, egressGatewayInfo(g))
			}
		}
	}
	return out
}

func egressGatewayInfo(g *EgressGateway) EgressGatewayInfo {
	svc := mesh.MeshService{Namespace: g.Metadata.Namespace, Name: g.Metadata.Name}
	return EgressGatewayInfo{Service: svc, ServiceAccount: mesh.ServiceAccount(svc), Port: g.Spec.Port}
}

// egressGatewayOf returns the EgressGateway e's spec.gateway names, if
// any exists.
func egressGatewayOf(st *state, e *Egress) (EgressGatewayInfo, bool) {
	ref := e.Spec.Gateway
	if ref == nil {
		return EgressGatewayInfo{}, false
	}
	g, ok := st.objects[Key{Kind: KindEgressGateway, Namespace: ref.Namespace, Name: ref.Name}].(*EgressGateway)
	if !ok {
		return EgressGatewayInfo{}, false
	}
	return egressGatewayInfo(g), true
}

// EgressGatewayRoute is one external host and port an egress gateway
// forwards to, with the service accounts allowed through it.
type EgressGatewayRoute struct {
	Host string `json:"host"`
	EgressPort
	// Sources are the accounts the Egresses through the gateway list for
	// this host and port, sorted.
	Sources []mesh.ServiceAccount `json:"sources"`
}

// EgressGatewayRoutes returns what the egress gateway gw forwards: every
// host and port of the Egresses whose spec.gateway names it, with their
// sources, ordered by host and port. Where Egresses give one host's port
// different meanings (apply refuses that), the first by namespace and
// name wins.
func (s *Snapshot) EgressGatewayRoutes(gw mesh.MeshService) []EgressGatewayRoute {
	type hp struct {
		host string
		port int
	}
	routes := map[hp]*EgressGatewayRoute{}
	for _, k := range s.keysOf(KindEgress) {
		e, ok := s.st.objects[k].(*Egress)
		if !ok {
			continue
		}
		if g, ok := egressGatewayOf(s.st, e); !ok || g.Service != gw {
			continue
		}
		for _, h := range e.Spec.Hosts {
			if !egressHostAllowed(s.config, h) {
				continue // apply refuses it; a store written otherwise
			}
			for _, p := range e.Spec.Ports {
				r := routes[hp{h, p.Number}]
				if r == nil {
					r = &EgressGatewayRoute{Host: h, EgressPort: p}
					routes[hp{h, p.Number}] = r
				} else if r.EgressPort != p {
					continue
				}
				for _, src := range e.Spec.Sources {
					r.Sources = append(r.Sources, mesh.ServiceAccount{Namespace: src.Namespace, Name: src.Name})
				}
			}
		}
	}
	out := make([]EgressGatewayRoute, 0, len(routes))
	for _, r := range routes {
		slices.SortFunc(r.Sources, func(a, b mesh.ServiceAccount) int { return mesh.MeshService(a).Compare(mesh.MeshService(b)) })
		r.Sources = slices.Compact(r.Sources)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b EgressGatewayRoute) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Number, b.Number))
	})
	return out
}

// isEgressGateway reports whether sa is an egress gateway's account.
func (s *Snapshot) isEgressGateway(sa mesh.ServiceAccount) bool {
	_, ok := s.st.objects[Key{Kind: KindEgressGateway, Namespace: sa.Namespace, Name: sa.Name}]
	return ok
}

// checkEgressGatewayRef validates an Egress's spec.gateway against the
// state: the EgressGateway must exist.
func checkEgressGatewayRef(v *validator, st *state, e *Egress) {
	ref := e.Spec.Gateway
	if ref == nil {
		return
	}
	if _, ok := egressGatewayOf(st, e); !ok {
		v.errorf("spec.gateway.name", "EgressGateway %q not found in namespace %q: apply it first or in the same batch (kind: EgressGateway, apiVersion: %s), or remove spec.gateway to send the traffic from each source's own Envoy%s", ref.Name, ref.Namespace, APIVersionOSM, didYouMean(ref.Name, namesOfKind(st, KindEgressGateway, ref.Namespace)))
	}
}

// checkGatewayNames refuses an EgressGateway and a Gateway of one
// namespace and name (their machines would enroll as the same service),
// and an EgressGateway and a Service of its namespace named like it or
// running as its service account (the Service's machines would hold the
// certificate the sources accept as the gateway's).
func checkGatewayNames(v *validator, st *state, obj Object) {
	switch o := obj.(type) {
	case *EgressGateway:
		other := Key{Kind: KindGateway, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name}
		if _, ok := st.objects[other]; ok {
			v.errorf("metadata.name", "%s exists: a gateway's machines enroll as its namespace and name, so a Gateway and an EgressGateway need different names", other)
		}
		for _, k := range sortedObjectKeys(st.objects) {
			if svc, ok := serviceOf(st.objects[k]); ok && k.Namespace == o.Metadata.Namespace {
				checkEgressGatewayService(v, "metadata.name", svc, o.Metadata.Name, "")
			}
		}
	case *Gateway:
		other := Key{Kind: KindEgressGateway, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name}
		if _, ok := st.objects[other]; ok {
			v.errorf("metadata.name", "%s exists: a gateway's machines enroll as its namespace and name, so a Gateway and an EgressGateway need different names", other)
		}
	default:
		svc, ok := serviceOf(obj)
		if !ok {
			return
		}
		for _, name := range namesOfKind(st, KindEgressGateway, svc.Metadata.Namespace) {
			checkEgressGatewayService(v, "", svc, name, "EgressGateway "+svc.Metadata.Namespace+"/"+name+": ")
		}
	}
}

// checkEgressGatewayService refuses svc beside the EgressGateway gw of
// its namespace when it shares gw's name or service account.
func checkEgressGatewayService(v *validator, field string, svc *Service, gw, prefix string) {
	switch {
	case svc.Metadata.Name == gw:
		v.errorf(cmp.Or(field, "metadata.name"), "%sService %s/%s has the EgressGateway's name: its machines would enroll as the same service; rename one", prefix, svc.Metadata.Namespace, svc.Metadata.Name)
	case svc.Spec.ServiceAccount == gw:
		v.errorf(cmp.Or(field, "spec.serviceAccount"), "%sService %s/%s runs as service account %q, the EgressGateway's: its machines would hold the identity the sources trust as the gateway; use another service account", prefix, svc.Metadata.Namespace, svc.Metadata.Name, gw)
	}
}

// egressGatewayDeleteConflict refuses to delete an EgressGateway that an
// Egress not deleted in the same batch still names.
func egressGatewayDeleteConflict(st *state, gone map[Key]bool) error {
	for _, k := range sortedObjectKeys(st.objects) {
		e, ok := st.objects[k].(*Egress)
		if !ok || gone[k] || e.Spec.Gateway == nil {
			continue
		}
		gk := Key{Kind: KindEgressGateway, Namespace: e.Spec.Gateway.Namespace, Name: e.Spec.Gateway.Name}
		if gone[gk] {
			return fmt.Errorf("%w: %s is used by %s (spec.gateway): delete or change the Egress first, or in the same batch", ErrConflict, gk, k)
		}
	}
	return nil
}
