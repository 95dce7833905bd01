package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

const egressGatewayDocs = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookbuyer}
spec: {ports: [{port: 8080}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookthief, namespace: thieves}
spec: {ports: [{port: 8080}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: EgressGateway
metadata: {name: egress, namespace: edge}
spec: {}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}, {kind: ServiceAccount, name: bookthief, namespace: thieves}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}]
  gateway: {name: egress, namespace: edge}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github-too}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}, {kind: ServiceAccount, name: egress, namespace: edge}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}]
  gateway: {name: egress, namespace: edge}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: direct}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [httpbin.org]
  ports: [{number: 80, protocol: http}]
`

// TestEgressGatewaySnapshot: a source's route through a gateway names it
// (its port defaulted), the gateway's routes carry the union of the
// sources, and the gateway's own account gets no hosts block entries even
// where an Egress lists it.
func TestEgressGatewaySnapshot(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, egressGatewayDocs); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	gw := mesh.MeshService{Namespace: "edge", Name: "egress"}
	info, ok := snap.EgressGateway(gw)
	want := EgressGatewayInfo{Service: gw, ServiceAccount: mesh.ServiceAccount(gw), Port: DefaultEgressGatewayPort}
	if !ok || info != want {
		t.Fatalf("EgressGateway(%s) = %+v, %v; want %+v", gw, info, ok, want)
	}
	buyer := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	var got []string
	for _, r := range snap.Egress(buyer) {
		got = append(got, r.Host+" via "+r.Gateway.Service.String())
	}
	if diff := cmp.Diff([]string{"api.github.com via edge/egress", "httpbin.org via /"}, got); diff != "" {
		t.Errorf("Egress(bookbuyer) (-want +got):\n%s", diff)
	}
	routes := snap.EgressGatewayRoutes(gw)
	if len(routes) != 1 || routes[0].Host != "api.github.com" || routes[0].Number != 443 {
		t.Fatalf("EgressGatewayRoutes = %+v, want api.github.com:443 only", routes)
	}
	wantSources := []mesh.ServiceAccount{buyer, {Namespace: "edge", Name: "egress"}, {Namespace: "thieves", Name: "bookthief"}}
	if diff := cmp.Diff(wantSources, routes[0].Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	if hosts := snap.EgressHosts(mesh.ServiceAccount(gw)); len(hosts) != 0 {
		t.Errorf("the egress gateway's hosts block maps %v: it must resolve the real names", hosts)
	}
	if hosts := snap.EgressHosts(buyer); len(hosts) != 2 {
		t.Errorf("bookbuyer's hosts block: %v, want both hosts on their VIPs", hosts)
	}
}

// TestEgressGatewayApplyErrors: the references and names apply refuses.
func TestEgressGatewayApplyErrors(t *testing.T) {
	for name, c := range map[string]struct{ docs, want string }{
		"unknown gateway": {strings.Replace(egressGatewayDocs, "gateway: {name: egress, namespace: edge}\n---\napiVersion: osm-vm.io/v1alpha1\nkind: Egress\nmetadata: {name: github-too}", "gateway: {name: egres, namespace: edge}\n---\napiVersion: osm-vm.io/v1alpha1\nkind: Egress\nmetadata: {name: github-too}", 1),
			`spec.gateway.name: EgressGateway "egres" not found in namespace "edge": apply it first or in the same batch`},
		"gateway in the Egress's namespace": {strings.Replace(egressGatewayDocs, "gateway: {name: egress, namespace: edge}", "gateway: {name: egress}", 1),
			`EgressGateway "egress" not found in namespace "default"`},
		"one port, two ways out": {egressGatewayDocs + "---\napiVersion: osm-vm.io/v1alpha1\nkind: Egress\nmetadata: {name: github-direct}\nspec:\n  sources: [{kind: ServiceAccount, name: bookbuyer}]\n  hosts: [api.github.com]\n  ports: [{number: 443, protocol: tls}]\n",
			`port 443 goes out through EgressGateway edge/egress in Egress default/github, and from each source's own Envoy here`},
		"a Gateway's name": {egressGatewayDocs + "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: egress, namespace: edge}\nspec:\n  gatewayClassName: osm-vm\n  listeners: [{name: web, port: 80, protocol: HTTP}]\n",
			`metadata.name: EgressGateway edge/egress exists: a gateway's machines enroll as its namespace and name`},
		"bad gateway name": {strings.Replace(egressGatewayDocs, "gateway: {name: egress, namespace: edge}", "gateway: {name: Egress, namespace: edge}", 1),
			`spec.gateway.name: name "Egress"`},
		"port range": {strings.Replace(egressGatewayDocs, "spec: {}", "spec: {port: 70000}", 1), "spec.port: port 70000 is out of range"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			_, err := tryApplyYAML(t, s, c.docs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("apply = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestEgressGatewayDeleteInUse: an EgressGateway an Egress names is not
// deleted alone; with its Egresses it is.
func TestEgressGatewayDeleteInUse(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, egressGatewayDocs); err != nil {
		t.Fatal(err)
	}
	gk := Key{Kind: KindEgressGateway, Namespace: "edge", Name: "egress"}
	_, err := s.Delete(t.Context(), []Key{gk}, false)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "EgressGateway edge/egress is used by Egress default/github") {
		t.Fatalf("delete in use = %v, want a conflict naming the Egress", err)
	}
	keys := []Key{gk, {Kind: KindEgress, Namespace: "default", Name: "github"}, {Kind: KindEgress, Namespace: "default", Name: "github-too"}}
	if _, err := s.Delete(t.Context(), keys, false); err != nil {
		t.Fatalf("delete with its Egresses: %v", err)
	}
}

// TestEgressGatewayRefusesItsIdentityToServices: a Service named like an
// EgressGateway, or running as its account, is refused in either order.
func TestEgressGatewayRefusesItsIdentityToServices(t *testing.T) {
	const gw = "apiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress}\nspec: {}\n"
	for name, svc := range map[string]string{
		"same name":            "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: egress}\nspec: {ports: [{port: 80}]}\n",
		"same service account": "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web}\nspec: {serviceAccount: egress, ports: [{port: 80}]}\n",
	} {
		for _, order := range [][]string{{gw, svc}, {svc, gw}} {
			t.Run(name, func(t *testing.T) {
				s := newTestSpec(t, store.NewMemory())
				if _, err := tryApplyYAML(t, s, order[0]); err != nil {
					t.Fatal(err)
				}
				_, err := tryApplyYAML(t, s, order[1])
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "EgressGateway") {
					t.Errorf("apply = %v, want it refused, naming the EgressGateway", err)
				}
			})
		}
	}
}
