package catalog

import (
	"context"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

func applyYAML(t *testing.T, sp *spec.Spec, doc string) {
	t.Helper()
	docs, err := spec.Parse([]byte(doc), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(context.Background(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func addrPortsOf(eps []mesh.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.AddrPort().String())
	}
	return out
}

// TestModelEgressGatewayMachines: an EgressGateway's endpoints are the
// addresses its machines are connected from, on its port, with no
// provider listing them; they follow connections, the gateway's port and
// its deletion.
func TestModelEgressGatewayMachines(t *testing.T) {
	gw := mesh.MeshService{Namespace: "default", Name: "egress"}
	other := mesh.MeshService{Namespace: "default", Name: "web"}
	ip1, ip2 := netip.MustParseAddr("10.0.5.10"), netip.MustParseAddr("10.0.5.11")
	cat := New()
	sp := specWith(t, true)
	m := NewModel(cat, sp, "td", 0)

	applyYAML(t, sp, "apiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress, namespace: default}\nspec: {}\n")
	m.Update()
	if eps := m.View().Endpoints(gw); len(eps) != 0 {
		t.Fatalf("endpoints of the gateway with no machine connected = %v, want none", addrPortsOf(eps))
	}

	m.ProxyConnected(gw, ip1)
	m.ProxyConnected(gw, ip2)
	m.ProxyConnected(other, netip.MustParseAddr("10.0.0.9"))
	m.Update()
	if got, want := addrPortsOf(m.View().Endpoints(gw)), []string{"10.0.5.10:15444", "10.0.5.11:15444"}; !cmp.Equal(got, want) {
		t.Errorf("endpoints of the gateway with two machines connected = %v, want %v", got, want)
	}
	if eps := m.View().Endpoints(other); len(eps) != 0 {
		t.Errorf("a service that is no EgressGateway got endpoints from its connections: %v", addrPortsOf(eps))
	}

	m.ProxyDisconnected(gw, ip2)
	m.Update()
	if got, want := addrPortsOf(m.View().Endpoints(gw)), []string{"10.0.5.10:15444"}; !cmp.Equal(got, want) {
		t.Errorf("endpoints after a machine left = %v, want %v", got, want)
	}

	// A provider listing the machine too: listed by both (EDS sends each
	// address and port once).
	cat.SetEndpoints("static", gw, []mesh.Endpoint{{IP: ip1, Port: 15444}})
	m.Update()
	var providers []string
	for _, e := range m.View().Endpoints(gw) {
		providers = append(providers, e.AddrPort().String()+"@"+e.Provider)
	}
	if want := []string{"10.0.5.10:15444@egress-gateways", "10.0.5.10:15444@static"}; !cmp.Equal(providers, want) {
		t.Errorf("endpoints with a provider listing the machine too = %v, want %v", providers, want)
	}
	cat.DeleteService("static", gw)

	applyYAML(t, sp, "apiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress, namespace: default}\nspec: {port: 16000}\n")
	m.Update()
	if got, want := addrPortsOf(m.View().Endpoints(gw)), []string{"10.0.5.10:16000"}; !cmp.Equal(got, want) {
		t.Errorf("endpoints after the port changed = %v, want %v", got, want)
	}

	if _, err := sp.Delete(context.Background(), []spec.Key{{Kind: spec.KindEgressGateway, Namespace: "default", Name: "egress"}}, false); err != nil {
		t.Fatal(err)
	}
	m.Update()
	if eps := m.View().Endpoints(gw); len(eps) != 0 {
		t.Errorf("endpoints after the EgressGateway was deleted = %v, want none", addrPortsOf(eps))
	}
}
