// Command osm-provider-consul is the osm-vm endpoints provider for
// Consul's catalog: machines already registered in Consul, with their
// health checks, join the mesh without being registered again. It follows
// the catalog with blocking queries (one on the service list, one per
// service on its health endpoint) and reports each healthy instance as an
// endpoint. osm-server starts it as a plugin; run one instance per Consul
// datacenter (or Enterprise namespace). See docs/plugins/consul.md.
//
// This is the only provider that imports github.com/hashicorp/consul/api.
// It imports nothing of osm-vm but the provider SDK.
package main

import "github.com/osm-vm/osm-vm/provider"

func main() {
	log := provider.Logger().With("provider", "consul")
	provider.Serve(newProvider(log))
}
