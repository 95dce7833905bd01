package spec

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/store"
)

// gwL4 is a Gateway with an HTTP, a TCP, a TLS passthrough and a TLS
// terminating listener.
const gwL4 = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  gatewayClassName: osm-vm
  listeners:
  - {name: web, port: 80, protocol: HTTP}
  - {name: db, port: 5432, protocol: TCP}
  - {name: pass, port: 8443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
  - {name: term, port: 9443, protocol: TLS, hostname: secure.example.com, tls: {mode: Terminate, certificateRefs: [{name: secure-cert}]}}
`

const gwTCPStore = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: store}
spec: {ports: [{port: 5432, appProtocol: tcp}]}
`

func tcpRoute(apiVersion, name, parent, backends string) string {
	return "apiVersion: " + apiVersion + "\nkind: TCPRoute\nmetadata: {name: " + name + "}\nspec:\n  parentRefs: [" + parent + "]\n  rules: [{backendRefs: [" + backends + "]}]\n"
}

func tlsRoute(name, parent, hostnames, backends string) string {
	return "apiVersion: gateway.networking.k8s.io/v1\nkind: TLSRoute\nmetadata: {name: " + name + "}\nspec:\n  parentRefs: [" + parent + "]\n  hostnames: [" + hostnames + "]\n  rules: [{backendRefs: [" + backends + "]}]\n"
}

func TestGatewayL4Invalid(t *testing.T) {
	tests := []struct {
		name, in string
		want     string
	}{
		{"TCP with hostname", gatewayDoc("  - {name: a, port: 5432, protocol: TCP, hostname: db.example.com}\n"), "hostname must not be specified for protocols ['TCP', 'UDP']"},
		{"TCP with tls", gatewayDoc("  - {name: a, port: 5432, protocol: TCP, tls: {mode: Passthrough}}\n"), "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"},
		{"TLS without tls", gatewayDoc("  - {name: a, port: 8443, protocol: TLS}\n"), "tls mode must be set for protocol TLS"},
		{"passthrough with a certificate", gatewayDoc("  - {name: a, port: 8443, protocol: TLS, tls: {mode: Passthrough, certificateRefs: [{name: c}]}}\n"), "a Passthrough listener holds no certificate"},
		{"terminate without a certificate", gatewayDoc("  - {name: a, port: 8443, protocol: TLS, tls: {mode: Terminate}}\n"), "certificateRefs or options must be specified when mode is Terminate"},
		{"TLS mode", gatewayDoc("  - {name: a, port: 8443, protocol: TLS, tls: {mode: Reencrypt}}\n"), `unsupported mode "Reencrypt": want Passthrough or Terminate`},
		{"HTTPRoute kind on TCP", gatewayDoc("  - {name: a, port: 5432, protocol: TCP, allowedRoutes: {kinds: [{kind: HTTPRoute}]}}\n"), "kind HTTPRoute (group \"gateway.networking.k8s.io\") cannot attach to an TCP listener: want TCPRoute"},
		{"TCPRoute on a Service", tcpRoute("gateway.networking.k8s.io/v1", "r", "{group: \"\", kind: Service, name: echo}", "{name: echo, port: 9090}"), "a TCPRoute attaches to a Gateway's TCP listeners"},
		{"TCPRoute two rules", strings.Replace(tcpRoute("gateway.networking.k8s.io/v1", "r", "{name: edge}", "{name: echo, port: 9090}"), "rules: [", "rules: [{backendRefs: [{name: echo, port: 9090}]}, ", 1), "want exactly 1 rule"},
		{"TCPRoute no backend", tcpRoute("gateway.networking.k8s.io/v1", "r", "{name: edge}", ""), "want 1 to 16 backendRefs, got 0"},
		{"TCPRoute backend port", tcpRoute("gateway.networking.k8s.io/v1alpha2", "r", "{name: edge}", "{name: echo}"), "Must have port for Service reference"},
		{"TCPRoute apiVersion", tcpRoute("gateway.networking.k8s.io/v1beta1", "r", "{name: edge}", "{name: echo, port: 9090}"), `TCPRoute needs apiVersion "specs.smi-spec.io/v1alpha4" or "gateway.networking.k8s.io/v1" or "gateway.networking.k8s.io/v1alpha2"`},
		{"TLSRoute without hostnames", tlsRoute("r", "{name: edge}", "", "{name: echo, port: 9090}"), "spec.hostnames: want 1 to 1024 host names"},
		{"TLSRoute IP", tlsRoute("r", "{name: edge}", "192.0.2.1", "{name: echo, port: 9090}"), "Hostnames cannot contain an IP"},
		{"TLSRoute wildcard", tlsRoute("r", "{name: edge}", "\"a.*.example.com\"", "{name: echo, port: 9090}"), "Wildcards on hostnames must be the first label"},
		{"TLSRoute name", tlsRoute("r", "{name: edge}", "Db.example.com", "{name: echo, port: 9090}"), "Hostnames must be valid based on RFC-1123"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { parseFails(t, tc.in, tc.want) })
	}
}

// TestGatewayL4Attachment checks which listeners TCPRoutes and TLSRoutes
// attach to (by protocol, sectionName, SNI host names), their status, and
// what rendering reads.
func TestGatewayL4Attachment(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	applyYAML(t, s, gwL4)
	applyYAML(t, s, gwTCPStore)
	applyYAML(t, s, tcpRoute("gateway.networking.k8s.io/v1alpha2", "db", "{name: edge}", "{name: echo, port: 9090, weight: 3}, {name: store, port: 5432, weight: 1}"))
	applyYAML(t, s, tlsRoute("pass", "{name: edge}", "db.example.com, db.example.org", "{name: echo, port: 9090}"))
	applyYAML(t, s, tlsRoute("term", "{name: edge, sectionName: term}", "\"*.example.com\"", "{name: echo, port: 9090}"))
	// An HTTPRoute naming the Gateway alone attaches to its HTTP listener
	// only.
	applyYAML(t, s, gwRoute("h", "default", "{name: edge}", ""))
	g, ok := s.Snapshot().Gateway(mesh.MeshService{Namespace: "default", Name: "edge"})
	if !ok {
		t.Fatal("no gateway")
	}
	type host struct {
		Listener, Protocol, Mode, Host string
		Routes                         []string
	}
	var got []host
	for _, l := range g.Listeners {
		for _, h := range l.Hosts {
			var rs []string
			for _, r := range h.Rules {
				rs = append(rs, r.Route.Kind+" "+r.Route.Name)
			}
			got = append(got, host{l.Name, l.Protocol, l.TLSMode, h.Hostname, rs})
		}
	}
	want := []host{
		{"web", "HTTP", "", "*", []string{"HTTPRoute h"}},
		{"db", "TCP", "", "*", []string{"TCPRoute db"}},
		{"pass", "TLS", "Passthrough", "db.example.com", []string{"TLSRoute pass"}},
		{"term", "TLS", "Terminate", "secure.example.com", []string{"TLSRoute term"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	db := g.Listeners[slices.IndexFunc(g.Listeners, func(l gateway.Listener) bool { return l.Name == "db" })].Hosts[0].Rules[0]
	wantDB := []gateway.Backend{{Service: mesh.MeshService{Namespace: "default", Name: "echo"}, Port: 9090, Weight: 3, Valid: true},
		{Service: mesh.MeshService{Namespace: "default", Name: "store"}, Port: 5432, Weight: 1, Valid: true}}
	if diff := cmp.Diff(wantDB, db.Backends); diff != "" {
		t.Errorf("db backends (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"db.example.com", "secure.example.com"}, g.HostNames()); diff != "" {
		t.Errorf("HostNames (-want +got):\n%s", diff)
	}
	gw, _ := s.Snapshot().Object(Key{Kind: KindGateway, Namespace: "default", Name: "edge"})
	for _, l := range gw.(*Gateway).Status.Listeners {
		var kinds []string
		for _, k := range l.SupportedKinds {
			kinds = append(kinds, string(k.Kind))
		}
		wantKinds := map[gwv1.SectionName]string{"web": "HTTPRoute GRPCRoute", "db": "TCPRoute", "pass": "TLSRoute", "term": "TLSRoute"}[l.Name]
		if strings.Join(kinds, " ") != wantKinds || l.AttachedRoutes != 1 {
			t.Errorf("listener %s: kinds %v, %d routes", l.Name, kinds, l.AttachedRoutes)
		}
	}
	o, _ := s.Snapshot().Object(Key{Kind: KindTCPRoute, Namespace: "default", Name: "db"})
	ps := o.(*GatewayTCPRoute).Status.Parents[0]
	if ps.Conditions[0].Status != "True" || !strings.Contains(ps.Conditions[0].Message, "attached to listener db of Gateway default/edge") {
		t.Errorf("TCPRoute status = %+v", ps.Conditions)
	}
}

// TestGatewayL4Apply checks what apply refuses or warns of: a backend
// port that is not tcp, and a TrafficTarget rule naming the Gateway API's
// TCPRoute where SMI's is meant (the two share the kind).
func TestGatewayL4Apply(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	applyYAML(t, s, gwL4)
	docs := mustParse(t, tcpRoute("gateway.networking.k8s.io/v1", "db", "{name: edge}", "{name: echo-v1, port: 80}"))
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "port 80 of Service default/echo-v1 is http: a TCPRoute carries raw connections") {
		t.Errorf("TCPRoute to an http port: %v", err)
	}
	docs = mustParse(t, tlsRoute("r", "{name: edge, sectionName: web}", "db.example.com", "{name: echo, port: 9090}"))
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "listener web is HTTP: it admits HTTPRoute or GRPCRoute") {
		t.Errorf("TLSRoute on an HTTP listener: %v", err)
	}
	docs = mustParse(t, tlsRoute("r", "{name: edge, sectionName: pass}", "db.example.org", "{name: echo, port: 9090}"))
	if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "no hostname of the route matches listener pass's hostname *.example.com") {
		t.Errorf("TLSRoute outside the listener's hostname: %v", err)
	}
	applyYAML(t, s, tcpRoute("gateway.networking.k8s.io/v1", "db", "{name: edge}", "{name: echo, port: 9090}"))
	res := applyYAML(t, s, `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: edge-to-echo}
spec:
  destination: {kind: ServiceAccount, name: echo}
  sources: [{kind: ServiceAccount, name: edge}]
  rules: [{kind: TCPRoute, name: db}]
`)
	if w := strings.Join(res.Results[0].Warnings, "\n"); !strings.Contains(w, `TCPRoute "db" is the Gateway API's (gateway.networking.k8s.io/v1), not SMI's`) {
		t.Errorf("warnings = %s", w)
	}
	// get tcproutes lists both forms of the kind.
	applyYAML(t, s, "apiVersion: specs.smi-spec.io/v1alpha4\nkind: TCPRoute\nmetadata: {name: smi}\nspec: {matches: {ports: [9090]}}\n")
	var got []string
	for _, o := range s.Snapshot().Objects(KindTCPRoute) {
		got = append(got, o.Key().Name+" "+o.(interface{ typeMeta() *TypeMeta }).typeMeta().APIVersion)
	}
	if diff := cmp.Diff([]string{"db gateway.networking.k8s.io/v1", "smi specs.smi-spec.io/v1alpha4"}, got); diff != "" {
		t.Errorf("TCPRoutes (-want +got):\n%s", diff)
	}
}
