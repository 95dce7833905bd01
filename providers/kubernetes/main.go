// Command osm-provider-kubernetes is the osm-vm endpoints provider for
// Kubernetes: it resolves mesh services to the ready pod addresses of a
// cluster's Services, watching EndpointSlices and Services with client-go
// informers, so pods and VMs can serve and call the same mesh services.
// osm-server starts it as a plugin; run one instance per cluster.
//
// This is the only package in osm-vm that imports k8s.io/client-go. It
// imports nothing of osm-vm but the provider SDK.
package main

import (
	"k8s.io/klog/v2"

	"github.com/osm-vm/osm-vm/provider"
)

func main() {
	log := provider.Logger().With("provider", "kubernetes")
	// client-go logs through klog; send it to the same JSON stderr the host
	// parses.
	klog.SetSlogLogger(log)
	provider.Serve(newProvider(log, newClientset))
}
