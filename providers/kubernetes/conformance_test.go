package main

import (
	"context"
	"testing"

	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// fakeHarness runs the conformance suite in-process on client-go's fake
// clientset. The suite's mesh namespace "conformance" is the Kubernetes
// namespace "k8s-conformance", mapped by namespaceMap, with informers on
// all namespaces.
type fakeHarness struct{}

func (fakeHarness) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	fc := newFakeCluster()
	p := fc.start(ctx, t, `{"namespaceMap": {"k8s-conformance": "conformance"}}`)
	return p, kubeBackend{client: fc.client, k8sNamespace: func(string) string { return "k8s-conformance" }}
}

func TestConformanceFakeClientset(t *testing.T) {
	providertest.Run(t, fakeHarness{})
}
