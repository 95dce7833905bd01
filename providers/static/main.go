// Command osm-provider-static is the osm-vm endpoints provider for
// machines listed in a YAML file (on-premises hosts, labs, anything without
// an API to ask). osm-server starts it as a plugin; see docs/plugins/static.md.
package main

import "github.com/osm-vm/osm-vm/provider"

func main() {
	log := provider.Logger().With("provider", "static")
	provider.Serve(provider.NewPlugin(log, newStaticDriver(log)))
}
