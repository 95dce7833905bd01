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

	// step is a proxy of svc at addr coming or going, and whether the
	// publisher is to be signalled.
	type step struct {
		what   string
		svc    mesh.MeshService
		addr   netip.Addr
		come   bool
		signal bool
	}
	run := func(steps ...step) {
		t.Helper()
		for _, s := range steps {
			if s.come {
				g.ProxyConnected(s.svc, s.addr)
			} else {
				g.ProxyDisconnected(s.svc, s.addr)
			}
			if got := signalled(ch); got != s.signal {
				t.Errorf("%s: signalled %t; want %t", s.what, got, s.signal)
			}
		}
	}
	names := func(when string, want map[string][]netip.Addr) {
		t.Helper()
		if got := g.Names(); !maps.EqualFunc(got, want, slices.Equal[[]netip.Addr]) {
			t.Errorf("names %s: %v; want %v", when, got, want)
		}
	}

	run(step{"a proxy of default/edge, not a Gateway, connects", edge, a2, true, false},
		step{"a machine of Gateway default/ingress connects", ingress, a1, true, true},
		step{"a second proxy of that machine connects (its address is published already)", ingress, a1, true, false})
	names("with default/ingress's machine", map[string][]netip.Addr{"shop.example.com": {a1}})

	// default/edge becomes a Gateway: its machine, connected before, is
	// published (the view signals it).
	apply(t, sp, gatewayDoc("edge", "edge.example.com"))
	model.Update()
	names("after default/edge became a Gateway", map[string][]netip.Addr{"shop.example.com": {a1}, "edge.example.com": {a2}})
	run(step{"the machine of Gateway default/edge leaves", edge, a2, false, true},
		step{"one of two proxies of default/ingress's machine leaves (the machine is still there)", ingress, a1, false, false},
		step{"the last proxy of default/ingress's machine leaves", ingress, a1, false, true})
	names("with no gateway machine connected", map[string][]netip.Addr{})
}
