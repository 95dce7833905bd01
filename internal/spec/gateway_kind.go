package spec

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

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
