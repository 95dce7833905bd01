package main

import (
	"context"
	"errors"
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
	return p, fakeBackend{kubeBackend{client: fc.client, k8sNamespace: func(string) string { return "k8s-conformance" }}, fc}
}

// fakeBackend can also make the fake API server refuse every call.
type fakeBackend struct {
	kubeBackend
	fc *fakeCluster
}

func (b fakeBackend) Break(context.Context) error {
	b.fc.fail(errors.New("dial tcp 10.96.0.1:443: connect: connection refused"))
	return nil
}

func (b fakeBackend) Repair(context.Context) error {
	b.fc.fail(nil)
	return nil
}

func TestConformanceFakeClientset(t *testing.T) {
	providertest.Run(t, fakeHarness{})
}
