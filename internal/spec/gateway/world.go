package gateway

import (
	"iter"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Port is one port of a Service, as routes attach to it and send to it.
type Port struct {
	Name        string
	Port        int
	AppProtocol string
}

// World is the rest of the specification routes resolve against: the
// Services, Gateways, ReferenceGrants and TrafficSplits, and the routes
// themselves. spec implements it over its documents.
type World interface {
	// ServicePorts returns the ports of Service svc; false when there is
	// no such Service.
	ServicePorts(svc mesh.MeshService) ([]Port, bool)
	// ServiceHint returns ` (did you mean "x"?)` for the Service of svc's
	// namespace whose name is closest to svc's, or "".
	ServiceHint(svc mesh.MeshService) string
	// Gateway returns the spec of Gateway gw.
	Gateway(gw mesh.MeshService) (*gwv1.GatewaySpec, bool)
	// ReferenceGrants returns the ReferenceGrants of namespace ns.
	ReferenceGrants(ns string) iter.Seq[*gwv1.ReferenceGrantSpec]
	// SplitOf names the SMI TrafficSplit whose root is svc, if one is.
	SplitOf(svc mesh.MeshService) (string, bool)
	// Routes returns every route, by kind, namespace and name.
	Routes() iter.Seq[Route]
}
