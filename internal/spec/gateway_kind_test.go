package spec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// gwIngress is a Gateway with an HTTP and an HTTPS listener.
const gwIngress = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress}
spec:
  gatewayClassName: osm-vm
  listeners:
  - {name: web, port: 80, protocol: HTTP}
  - name: shop
    port: 443
    protocol: HTTPS
    hostname: shop.example.com
    tls: {certificateRefs: [{name: shop-cert}]}
`

func gatewayDoc(listeners string) string {
	return "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  gatewayClassName: osm-vm\n  listeners:\n" + listeners
}

func TestGatewayInvalid(t *testing.T) {
	tests := []struct {
		name, in string
		want     string
	}{
		{"class", strings.Replace(gatewayDoc("  - {name: a, port: 80, protocol: HTTP}\n"), "osm-vm", "istio", 1), `spec.gatewayClassName: "istio" is not a class osm-vm implements: set gatewayClassName: osm-vm`},
		{"no listeners", strings.Replace(gatewayDoc(""), "listeners:", "listeners: []", 1), "spec.listeners: want 1 to 64 listeners, got 0"},
		{"duplicate name", gatewayDoc("  - {name: a, port: 80, protocol: HTTP}\n  - {name: a, port: 81, protocol: HTTP}\n"), "Listener name must be unique within the Gateway"},
		{"duplicate port and host", gatewayDoc("  - {name: a, port: 80, protocol: HTTP}\n  - {name: b, port: 80, protocol: HTTP}\n"), "Combination of port, protocol and hostname must be unique for each listener"},
		{"two protocols on a port", gatewayDoc("  - {name: a, port: 80, protocol: HTTP}\n  - {name: b, port: 80, protocol: HTTPS, hostname: a.example.com, tls: {certificateRefs: [{name: c}]}}\n"), "port 80 is HTTP in another listener"},
		{"port", gatewayDoc("  - {name: a, port: 0, protocol: HTTP}\n"), "port 0 is out of range"},
		{"hostname", gatewayDoc("  - {name: a, port: 80, protocol: HTTP, hostname: \"Shop.example.com\"}\n"), `"Shop.example.com": Hostname value must only contain valid characters`},
		{"UDP", gatewayDoc("  - {name: a, port: 53, protocol: UDP}\n"), "protocol UDP is not supported: it takes UDPRoutes, which osm-vm does not implement"},
		{"unknown protocol", gatewayDoc("  - {name: a, port: 80, protocol: HTTP2}\n"), `unsupported protocol "HTTP2": want HTTP, HTTPS, TLS or TCP`},
		{"HTTP with tls", gatewayDoc("  - {name: a, port: 80, protocol: HTTP, tls: {certificateRefs: [{name: c}]}}\n"), "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"},
		{"HTTPS without tls", gatewayDoc("  - {name: a, port: 443, protocol: HTTPS}\n"), "an HTTPS listener needs tls"},
		{"passthrough", gatewayDoc("  - {name: a, port: 443, protocol: HTTPS, tls: {mode: Passthrough, certificateRefs: [{name: c}]}}\n"), "tls mode must be Terminate for protocol HTTPS (mode Passthrough"},
		{"no certificate", gatewayDoc("  - {name: a, port: 443, protocol: HTTPS, tls: {}}\n"), "certificateRefs or options must be specified when mode is Terminate"},
		{"two certificates", gatewayDoc("  - {name: a, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: c}, {name: d}]}}\n"), "2 certificateRefs: osm-vm wants exactly one"},
		{"certificate kind", gatewayDoc("  - {name: a, port: 443, protocol: HTTPS, tls: {certificateRefs: [{kind: ConfigMap, name: c}]}}\n"), `kind ConfigMap (group "") is not supported: refer to a Secret`},
		{"selector", gatewayDoc("  - {name: a, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector}}}\n"), "Selector is not supported"},
		{"route kind", gatewayDoc("  - {name: a, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: TCPRoute}]}}\n"), "kind TCPRoute (group \"gateway.networking.k8s.io\") cannot attach to an HTTP listener"},
		{"addresses", gatewayDoc("  - {name: a, port: 80, protocol: HTTP}\n") + "  addresses: [{value: 192.0.2.1}]\n", "spec.addresses: not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { parseFails(t, tc.in, tc.want) })
	}
}

// parseFails checks that Parse refuses in with an error containing want.
func parseFails(t *testing.T, in, want string) {
	t.Helper()
	_, err := Parse([]byte(in), "")
	if err == nil {
		t.Fatal("Parse succeeded, want an error")
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error:\n%v\nwant it to contain:\n%s", err, want)
	}
}

func gwRoute(name, ns, parent, hostnames string) string {
	return "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  parentRefs: [" + parent + "]\n" + hostnames +
		"  rules: [{backendRefs: [{name: echo-v1, namespace: default, port: 80}]}]\n"
}

// TestGatewayAttachment checks which listeners a route attaches to:
// sectionName, port, hostnames, allowedRoutes namespaces.
func TestGatewayAttachment(t *testing.T) {
	tests := []struct {
		name, route string
		want        []string // listeners; nil: refused with wantErr
		wantErr     string
	}{
		{"every listener", gwRoute("r", "default", "{name: ingress}", ""), []string{"web", "shop"}, ""},
		{"sectionName", gwRoute("r", "default", "{name: ingress, sectionName: shop}", ""), []string{"shop"}, ""},
		{"port", gwRoute("r", "default", "{name: ingress, port: 80}", ""), []string{"web"}, ""},
		{"hostnames intersect", gwRoute("r", "default", "{name: ingress}", "  hostnames: [\"*.example.com\"]\n"), []string{"web", "shop"}, ""},
		{"hostnames miss the https listener", gwRoute("r", "default", "{name: ingress}", "  hostnames: [api.example.org]\n"), []string{"web"}, ""},
		{"no listener's hostname", gwRoute("r", "default", "{name: ingress, sectionName: shop}", "  hostnames: [api.example.org]\n"), nil, "no hostname of the route matches listener shop's hostname shop.example.com"},
		{"no such listener", gwRoute("r", "default", "{name: ingress, sectionName: nope}", ""), nil, `Gateway default/ingress has no listener named "nope"`},
		{"no such gateway", gwRoute("r", "default", "{name: egress}", ""), nil, `no Gateway "egress" in namespace "default"`},
		{"other namespace", gwRoute("r", "other", "{name: ingress, namespace: default}", ""), nil, `listener shop admits routes of namespace "default" only`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			applyYAML(t, s, gwServices)
			applyYAML(t, s, gwIngress)
			docs, err := Parse([]byte(tc.route), "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Apply(t.Context(), docs, ApplyOptions{})
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Apply: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			k := docs[0].Object.Key()
			o, _ := s.Snapshot().Object(k)
			ps := o.(*HTTPRoute).Status.Parents[0]
			if ps.ControllerName != GatewayControllerName || ps.Conditions[0].Status != "True" {
				t.Errorf("status = %+v", ps)
			}
			gw, _ := s.Snapshot().Object(Key{Kind: KindGateway, Namespace: "default", Name: "ingress"})
			var got []string
			for _, l := range gw.(*Gateway).Status.Listeners {
				if l.AttachedRoutes > 0 {
					got = append(got, string(l.Name))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("listeners with routes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGatewayInfo checks what rendering reads: per listener, the virtual
// hosts and their rules, and the host names DNS publishing reads.
func TestGatewayInfo(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	applyYAML(t, s, gwIngress)
	applyYAML(t, s, gwRoute("a", "default", "{name: ingress}", "  hostnames: [\"*.example.com\", www.example.org]\n"))
	applyYAML(t, s, gwRoute("b", "default", "{name: ingress, sectionName: web}", ""))
	g, ok := s.Snapshot().Gateway(mesh.MeshService{Namespace: "default", Name: "ingress"})
	if !ok {
		t.Fatal("no gateway")
	}
	type host struct {
		Listener, Host string
		Routes         []string
	}
	var got []host
	for _, l := range g.Listeners {
		for _, h := range l.Hosts {
			var rs []string
			for _, r := range h.Rules {
				rs = append(rs, r.Route.Name)
			}
			got = append(got, host{l.Name, h.Hostname, rs})
		}
	}
	want := []host{
		{"web", "*.example.com", []string{"a"}}, {"web", "www.example.org", []string{"a"}}, {"web", "*", []string{"b"}},
		{"shop", "shop.example.com", []string{"a"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"shop.example.com", "www.example.org"}, g.HostNames()); diff != "" {
		t.Errorf("HostNames (-want +got):\n%s", diff)
	}
	if g.Listeners[1].Certificate != (mesh.MeshService{Namespace: "default", Name: "shop-cert"}) {
		t.Errorf("certificate = %v", g.Listeners[1].Certificate)
	}
	// A Gateway with routes attached is not deleted alone.
	docs, _ := Parse([]byte(gwIngress), "")
	if _, err := s.Delete(t.Context(), []Key{docs[0].Object.Key()}, false); err == nil || !strings.Contains(err.Error(), "HTTPRoute default/a is attached to it") {
		t.Errorf("Delete: %v, want a conflict naming the route", err)
	}
}

// TestGatewayAndServiceNames: a Gateway's machines enroll as the service
// of its name, so a Gateway and a Service of one name are refused either
// way round.
func TestGatewayAndServiceNames(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	docs, _ := Parse([]byte(strings.Replace(gwIngress, "name: ingress", "name: echo", 1)), "")
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), `a Service "echo" is in namespace "default"`) {
		t.Errorf("Gateway named like a Service: %v", err)
	}
	applyYAML(t, s, gwIngress)
	docs, _ = Parse([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: ingress}\nspec: {ports: [{port: 80}]}\n"), "")
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), `a Gateway "ingress" is in namespace "default"`) {
		t.Errorf("Service named like a Gateway: %v", err)
	}
	docs, _ = Parse([]byte("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: other}\nspec: {serviceAccount: ingress, ports: [{port: 80}]}\n"), "")
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), `spec.serviceAccount: a Gateway "ingress" is in namespace "default"`) {
		t.Errorf("Service running as a Gateway's account: %v", err)
	}
	applyYAML(t, s, "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: other}\nspec: {serviceAccount: edge, ports: [{port: 80}]}\n")
	docs, _ = Parse([]byte(strings.Replace(gwIngress, "name: ingress", "name: edge", 1)), "")
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), `Service default/other runs as service account "edge"`) {
		t.Errorf("Gateway named like a Service's account: %v", err)
	}
}
