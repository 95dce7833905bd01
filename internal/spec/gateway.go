package spec

import (
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// Gateway API (gateway.networking.k8s.io) kinds, in the mesh profile
// (GAMMA): HTTPRoute and GRPCRoute attach to Services through parentRefs
// (group "", kind Service) and route the calls to that Service's ports;
// ReferenceGrant allows backendRefs into another namespace. The documents
// use the upstream Go types (sigs.k8s.io/gateway-api/apis/v1) for their
// spec, so the fields are the upstream ones; they are validated by the
// rules of the upstream CRDs (their OpenAPI bounds and CEL rules), and
// every field the mesh does not implement is refused at apply, not
// ignored. Those field rules and the CRDs' defaults are package gateway's;
// the documents here call them, and resolve routes against the rest of
// the specification.
const (
	APIVersionGateway     = "gateway.networking.k8s.io/v1"
	APIVersionGatewayBeta = "gateway.networking.k8s.io/v1beta1"
	GroupGateway          = gateway.Group
	KindHTTPRoute         = gateway.KindHTTPRoute
	KindGRPCRoute         = gateway.KindGRPCRoute
	KindReferenceGrant    = gateway.KindReferenceGrant
	kindGateway           = gateway.KindGateway
)

// gatewayKinds are added to kinds (types.go), after the SMI kinds.
var gatewayKinds = []kindInfo{
	{KindGateway, APIVersionGateway, "gateways", true, func() Object { return &Gateway{} }},
	{KindReferenceGrant, APIVersionGatewayBeta, "referencegrants", true, func() Object { return &ReferenceGrant{} }},
	{KindHTTPRoute, APIVersionGateway, "httproutes", true, func() Object { return &HTTPRoute{} }},
	{KindGRPCRoute, APIVersionGateway, "grpcroutes", true, func() Object { return &GRPCRoute{} }},
}

// gatewayForms are the further apiVersions the Gateway API serves them in.
var gatewayForms = []form{
	{APIVersionGatewayBeta, KindHTTPRoute, func() Object { return &HTTPRoute{} }},
	{APIVersionGateway, KindReferenceGrant, func() Object { return &ReferenceGrant{} }},
	{APIVersionGatewayBeta, KindGateway, func() Object { return &Gateway{} }},
}

// HTTPRoute (gateway.networking.k8s.io/v1) routes HTTP calls to a
// Service's ports.
type HTTPRoute struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta     `json:"metadata"`
	Spec     gwv1.HTTPRouteSpec `json:"spec"`
	// Status is filled in responses (see RouteStatus) and ignored on apply.
	Status  *gwv1.RouteStatus `json:"status,omitempty"`
	dropped []string
}

// GRPCRoute (gateway.networking.k8s.io/v1) routes gRPC calls to a
// Service's ports.
type GRPCRoute struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta     `json:"metadata"`
	Spec     gwv1.GRPCRouteSpec `json:"spec"`
	Status   *gwv1.RouteStatus  `json:"status,omitempty"`
	dropped  []string
}

// ReferenceGrant (gateway.networking.k8s.io/v1beta1, or v1) in a namespace
// lets routes in other namespaces refer to its Services.
type ReferenceGrant struct {
	TypeMeta `json:",inline"`
	Metadata KubeObjectMeta          `json:"metadata"`
	Spec     gwv1.ReferenceGrantSpec `json:"spec"`
	dropped  []string
}

func (r *HTTPRoute) Key() Key                 { return keyOf(r.TypeMeta, r.Metadata.ObjectMeta) }
func (r *HTTPRoute) meta() *ObjectMeta        { return &r.Metadata.ObjectMeta }
func (r *HTTPRoute) typeMeta() *TypeMeta      { return &r.TypeMeta }
func (r *GRPCRoute) Key() Key                 { return keyOf(r.TypeMeta, r.Metadata.ObjectMeta) }
func (r *GRPCRoute) meta() *ObjectMeta        { return &r.Metadata.ObjectMeta }
func (r *GRPCRoute) typeMeta() *TypeMeta      { return &r.TypeMeta }
func (g *ReferenceGrant) Key() Key            { return keyOf(g.TypeMeta, g.Metadata.ObjectMeta) }
func (g *ReferenceGrant) meta() *ObjectMeta   { return &g.Metadata.ObjectMeta }
func (g *ReferenceGrant) typeMeta() *TypeMeta { return &g.TypeMeta }

// dropServerFields empties what the API server fills and returns its
// field paths.
func dropServerFields(m *KubeObjectMeta) []string {
	var out []string
	for _, f := range []struct {
		name string
		v    any
	}{
		{"generateName", m.GenerateName}, {"uid", m.UID}, {"resourceVersion", m.ResourceVersion},
		{"generation", m.Generation}, {"creationTimestamp", m.CreationTimestamp}, {"deletionTimestamp", m.DeletionTimestamp},
		{"deletionGracePeriodSeconds", m.DeletionGracePeriodSeconds}, {"ownerReferences", m.OwnerReferences},
		{"finalizers", m.Finalizers}, {"managedFields", m.ManagedFields}, {"selfLink", m.SelfLink},
	} {
		if f.v != nil {
			out = append(out, "metadata."+f.name)
		}
	}
	*m = KubeObjectMeta{ObjectMeta: m.ObjectMeta}
	return out
}

func ignoredWarning(v *validator, fields []string) {
	if len(fields) > 0 {
		v.warnf("", "ignored (no meaning here): %s", strings.Join(fields, ", "))
	}
}

// validateWarnings adds the warnings validate finds (parsing keeps only
// its errors).
func validateWarnings(v *validator, o Object) {
	sub := &validator{doc: v.doc}
	o.validate(sub)
	v.warnings = append(v.warnings, sub.warnings...)
}

func (r *HTTPRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
	if len(r.Spec.Hostnames) > 0 && !gateway.HasGatewayParent(r.Spec.ParentRefs) {
		v.warnf("spec.hostnames", "ignored: a route attached to a Service applies to every call to it, whatever the host name (GAMMA)")
	}
}

func (r *GRPCRoute) applyWarnings(v *validator) {
	ignoredWarning(v, r.dropped)
	validateWarnings(v, r)
	if len(r.Spec.Hostnames) > 0 && !gateway.HasGatewayParent(r.Spec.ParentRefs) {
		v.warnf("spec.hostnames", "ignored: a route attached to a Service applies to every call to it, whatever the host name (GAMMA)")
	}
}

func (g *ReferenceGrant) applyWarnings(v *validator) {
	ignoredWarning(v, g.dropped)
	validateWarnings(v, g)
}

func ptr[T any](v T) *T { return &v }
func (r *HTTPRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultHTTPRoute(&r.Spec)
}

func (r *GRPCRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultGRPCRoute(&r.Spec)
}

func (g *ReferenceGrant) setDefaults() { g.dropped = dropServerFields(&g.Metadata) }

func (r *HTTPRoute) validate(v *validator)      { gateway.ValidateHTTPRoute(v, &r.Spec) }
func (r *GRPCRoute) validate(v *validator)      { gateway.ValidateGRPCRoute(v, &r.Spec) }
func (g *ReferenceGrant) validate(v *validator) { gateway.ValidateReferenceGrant(v, &g.Spec) }
