package spec

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

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

func (r *GatewayTCPRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultL4Route(r.Spec.ParentRefs, r.Spec.Rules)
}

func (r *TLSRoute) setDefaults() {
	r.Status = nil
	r.dropped = dropServerFields(&r.Metadata)
	gateway.DefaultL4Route(r.Spec.ParentRefs, gateway.TLSRules(r.Spec.Rules))
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
