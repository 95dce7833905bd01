// Command osm-provider-azure is the osm-vm endpoints provider for Azure:
// it resolves mesh services to the primary private IPs of running VM Scale
// Set instances (Uniform and Flexible) and VMs tagged with the service,
// polling Azure Resource Manager. osm-server starts it as a plugin; run
// one instance per subscription. See docs/plugins/azure.md.
//
// This is the only package in osm-vm that imports the Azure SDK. It
// imports nothing of osm-vm but the provider SDK. Built with
// -tags azurefake it also has a test mode (config key testFixture) served
// by the SDK's fake servers; production builds refuse that key.
package main

import "github.com/osm-vm/osm-vm/provider"

func main() {
	log := provider.Logger().With("provider", "azure")
	provider.Serve(newProvider(log, connectARM, buildFixtureOpener()))
}
