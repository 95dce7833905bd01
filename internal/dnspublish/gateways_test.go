package dnspublish

import (
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

// gatewayDoc is a Gateway default/name serving host.
func gatewayDoc(name, host string) string {
	return "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: " + name + "}\n" +
		"spec:\n  gatewayClassName: osm-vm\n  listeners:\n  - {name: web, port: 80, protocol: HTTP, hostname: " + host + "}\n"
}

// apply applies the YAML documents y to sp.
func apply(t *testing.T, sp *spec.Spec, y string) {
	t.Helper()
	docs, err := spec.Parse([]byte(y), "gateways.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(t.Context(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// signalled says whether ch holds a signal, taking it.
func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestGatewaySourceSignalsGatewayMachinesOnly: a gateway machine's coming
// and going signals the DNS publisher; any other proxy's does not (it
// changes no name), yet it is counted, so a Gateway added for a service
// already connected publishes its machines.
func TestGatewaySourceSignalsGatewayMachinesOnly(t *testing.T) {
	sp, err := spec.New(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	apply(t, sp, gatewayDoc("ingress", "shop.example.com"))
	model := catalog.NewModel(catalog.New(), sp, "cluster.local", 0)
	g := NewGatewaySource(model)
	ch, cancel := presenceSignal{g}.Subscribe()
	defer cancel()

	ingress := mesh.MeshService{Namespace: "default", Name: "ingress"}
	edge := mesh.MeshService{Namespace: "default", Name: "edge"}
	a1, a2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")

	g.ProxyConnected(edge, a2)
	if signalled(ch) {
		t.Error("a proxy of default/edge, not a Gateway, signalled the publisher")
	}
	g.ProxyConnected(ingress, a1)
	if !signalled(ch) {
		t.Error("a machine of Gateway default/ingress connected without a signal")
	}
	g.ProxyConnected(ingress, a1) // a second proxy of the same machine
	if signalled(ch) {
		t.Error("a second proxy of a connected gateway machine signalled; its address was published already")
	}
	if got, want := g.Names(), map[string][]netip.Addr{"shop.example.com": {a1}}; !maps.EqualFunc(got, want, slices.Equal[[]netip.Addr]) {
		t.Errorf("names %v; want %v", got, want)
	}

	// default/edge becomes a Gateway: its machine, connected before, is
	// published (the view signals it).
	apply(t, sp, gatewayDoc("edge", "edge.example.com"))
	model.Update()
	if got, want := g.Names(), map[string][]netip.Addr{"shop.example.com": {a1}, "edge.example.com": {a2}}; !maps.EqualFunc(got, want, slices.Equal[[]netip.Addr]) {
		t.Errorf("names after default/edge became a Gateway %v; want %v", got, want)
	}
	g.ProxyDisconnected(edge, a2)
	if !signalled(ch) {
		t.Error("the machine of Gateway default/edge left without a signal")
	}
	g.ProxyDisconnected(ingress, a1)
	if signalled(ch) {
		t.Error("one of two proxies of a gateway machine left and signalled; the machine is still there")
	}
	g.ProxyDisconnected(ingress, a1)
	if !signalled(ch) {
		t.Error("the last proxy of Gateway default/ingress's machine left without a signal")
	}
	if got := g.Names(); len(got) != 0 {
		t.Errorf("names with no gateway machine connected: %v; want none", got)
	}
}
