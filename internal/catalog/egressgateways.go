package catalog

import (
	"maps"
	"slices"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// EgressGatewayProvider is the name under which the model lists each
// EgressGateway's machines in the catalog.
const EgressGatewayProvider = "egress-gateways"

// publishEgressGateways keeps the catalog's endpoints of every
// EgressGateway's service current: each address a proxy of the gateway's
// service is connected from, on the EgressGateway's port. The machines
// installed with `osm-agent install --gateway egress` so become
// reachable for the sources as soon as they connect, with no provider
// listing them; a provider that lists them too adds nothing twice (the
// catalog merges by address and port). Called with updateMu held.
func (m *Model) publishEgressGateways(sp *spec.Snapshot) {
	if sp != m.egressSpec {
		m.egressSpec, m.egressList = sp, sp.EgressGateways() // a scan of the specification: once per snapshot
	}
	want := map[mesh.MeshService][]mesh.Endpoint{}
	for _, gw := range m.egressList {
		var eps []mesh.Endpoint
		for addr := range m.connected[gw.Service] {
			eps = append(eps, mesh.Endpoint{IP: addr, Port: uint16(gw.Port)})
		}
		slices.SortFunc(eps, mesh.Endpoint.Compare)
		want[gw.Service] = eps
	}
	if len(want) == 0 && len(m.egressGWs) == 0 {
		return
	}
	if maps.EqualFunc(want, m.egressGWs, func(a, b []mesh.Endpoint) bool {
		return slices.EqualFunc(a, b, func(x, y mesh.Endpoint) bool { return x.AddrPort() == y.AddrPort() })
	}) {
		return
	}
	m.egressGWs = want
	m.cat.ReplaceProvider(EgressGatewayProvider, want)
}
