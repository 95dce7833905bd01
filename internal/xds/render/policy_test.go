package render

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

func names[T interface{ GetName() string }](s []T) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.GetName())
	}
	return out
}

func TestBookthiefGetsNothingOfBookstoreInSMIMode(t *testing.T) {
	eps := bookstoreEndpoints(t)
	m := meshOf(bookstoreSpec(t, false).Snapshot(), eps)
	thief := renderAll(t, m, Proxy{Service: svc("bookthief"), Address: netip.MustParseAddr("127.0.10.2")})
	for _, part := range [][]byte{goldenJSON(t, resources{Listeners: thief.Listeners, Routes: thief.Routes, Clusters: thief.Clusters, Endpoints: thief.Endpoints})} {
		if strings.Contains(string(part), "bookstore") {
			t.Errorf("bookthief's resources mention bookstore:\n%s", part)
		}
	}
	deps, err := Dependencies(m, Proxy{Service: svc("bookthief"), Address: netip.MustParseAddr("127.0.10.2")})
	if err != nil || len(deps) != 0 {
		t.Errorf("Dependencies(bookthief) = %v, %v; want none", deps, err)
	}
	for _, s := range []string{"bookstore", "bookstore-v1", "bookstore-v2", "bookwarehouse"} {
		r := renderAll(t, m, Proxy{Service: svc(s), Address: netip.MustParseAddr("10.0.0.1")})
		if b := goldenJSON(t, r); strings.Contains(string(b), "sa/bookthief") {
			t.Errorf("%s's resources allow bookthief's identity", s)
		}
	}

	// Permissive mode lets bookthief in.
	pm := meshOf(bookstoreSpec(t, true).Snapshot(), eps)
	cs, err := Clusters(pm, Proxy{Service: svc("bookthief"), Address: netip.MustParseAddr("127.0.10.2")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names(cs), "default/bookstore-v1") {
		t.Errorf("permissive: bookthief's clusters %v lack default/bookstore-v1", names(cs))
	}
}

func TestDependencies(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	for _, tc := range []struct {
		service string
		want    []mesh.MeshService
	}{
		{"bookbuyer", []mesh.MeshService{svc("bookstore-v1"), svc("bookstore-v2")}},
		{"bookstore-v1", []mesh.MeshService{svc("bookwarehouse")}},
		{"bookwarehouse", nil},
	} {
		got, err := Dependencies(m, Proxy{Service: svc(tc.service), Address: netip.MustParseAddr("10.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, tc.want); diff != "" {
			t.Errorf("Dependencies(%s) (-got +want):\n%s", tc.service, diff)
		}
	}
}

const policyYAML = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 8080}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db}
spec: {ports: [{port: 3306, appProtocol: tcp}, {port: 9104, targetPort: 19104}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: api}
spec: {ports: [{port: 80, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: api-v1}
spec: {serviceAccount: api, ports: [{port: 80, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: api-v2}
spec: {ports: [{port: 80, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: api-v3}
spec: {serviceAccount: api, ports: [{port: 80, appProtocol: grpc}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: mysql}
spec: {matches: {name: mysql, ports: [3306]}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: web-to-db}
spec:
  destination: {kind: ServiceAccount, name: db}
  sources: [{kind: ServiceAccount, name: web}]
  rules: [{kind: TCPRoute, name: mysql}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: api-routes}
spec:
  matches:
    - {name: read, pathRegex: "/api/.*", methods: [GET, POST], headers: {X-User: "a.*"}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: web-to-api}
spec:
  destination: {kind: ServiceAccount, name: api}
  sources: [{kind: ServiceAccount, name: web}]
  rules: [{kind: HTTPRouteGroup, name: api-routes}]
---
apiVersion: split.smi-spec.io/v1alpha4
kind: TrafficSplit
metadata: {name: api-split}
spec:
  service: api
  backends: [{service: api-v1, weight: 90}, {service: api-v2, weight: 10}, {service: api-v3, weight: 0}]
  matches: [{kind: HTTPRouteGroup, name: api-routes}]
`

func policyMesh(t *testing.T) Mesh {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, policyYAML)
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i, name := range []string{"web", "db", "api", "api-v1", "api-v2", "api-v3"} {
		ip := netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
		// The same address reported by two providers appears once in EDS.
		eps[svc(name)] = []mesh.Endpoint{{IP: ip, Port: 80, Provider: "a"}, {IP: ip, Port: 80, Provider: "b"}}
	}
	return meshOf(s.Snapshot(), eps)
}

func typed[T any](t *testing.T, r *rendered, name string) T {
	t.Helper()
	for _, m := range r.typed {
		if x, ok := m.(T); ok && r.names[m] == name {
			return x
		}
	}
	var zero T
	t.Fatalf("no %T named %q in %v", zero, name, r.all)
	return zero
}

// rendered indexes the typed configs inside a proxy's listeners by filter name.
type rendered struct {
	typed []any
	names map[any]string
	all   []string
}

func unpackFilters(t *testing.T, ls []*listenerv3.Listener) *rendered {
	t.Helper()
	r := &rendered{names: map[any]string{}}
	for _, l := range ls {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				m, err := f.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				key := l.GetName() + " " + f.GetName()
				r.typed, r.names[m], r.all = append(r.typed, m), key, append(r.all, key)
				if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok {
					for _, hf := range hcm.GetHttpFilters() {
						hm, err := hf.GetTypedConfig().UnmarshalNew()
						if err != nil {
							t.Fatal(err)
						}
						key := l.GetName() + " " + hf.GetName()
						r.typed, r.names[hm], r.all = append(r.typed, hm), key, append(r.all, key)
					}
				}
			}
		}
	}
	return r
}

func principalsOf(rules *rbacv3.RBAC) map[string][]string {
	out := map[string][]string{}
	for name, p := range rules.GetPolicies() {
		for _, pr := range p.GetPrincipals() {
			pn := pr.GetAuthenticated().GetPrincipalName()
			out[name] = append(out[name], pn.GetExact()+pn.GetPrefix())
		}
	}
	return out
}

func TestPolicySemantics(t *testing.T) {
	m := policyMesh(t)
	web := Proxy{Service: svc("web"), Address: netip.MustParseAddr("10.0.1.1")}
	db := Proxy{Service: svc("db"), Address: netip.MustParseAddr("10.0.1.2")}
	for _, p := range []Proxy{web, db} {
		if err := Validate(Envoy, renderAll(t, m, p).all()...); err != nil {
			t.Errorf("Validate(%s): %v", p.Service, err)
		}
	}

	t.Run("split backends the caller may not reach are left out", func(t *testing.T) {
		rs, err := Routes(m, web)
		if err != nil {
			t.Fatal(err)
		}
		const name = "outbound|default/api|80|to=default/api-v1"
		if !slices.Contains(names(rs), name) {
			t.Fatalf("routes %v lack %s", names(rs), name)
		}
		var rc *routev3.RouteConfiguration
		for _, r := range rs {
			if r.GetName() == name {
				rc = r
			}
		}
		routes := rc.GetVirtualHosts()[0].GetRoutes()
		if len(routes) != 2 {
			t.Fatalf("got %d routes, want the split match and the fallback to the root: %v", len(routes), routes)
		}
		split := routes[0]
		if got, want := split.GetMatch().GetSafeRegex().GetRegex(), "/api/.*"; got != want {
			t.Errorf("split route path regex = %q, want %q", got, want)
		}
		var hdrs []string
		for _, h := range split.GetMatch().GetHeaders() {
			hdrs = append(hdrs, h.GetName()+"="+h.GetSafeRegexMatch().GetRegex())
		}
		if diff := cmp.Diff(hdrs, []string{":method=GET|POST", "x-user=a.*"}); diff != "" {
			t.Errorf("split route headers (-got +want):\n%s", diff)
		}
		ws := split.GetRoute().GetWeightedClusters().GetClusters()
		if len(ws) != 1 || ws[0].GetName() != "default/api-v1" || ws[0].GetWeight().GetValue() != 90 {
			t.Errorf("weighted clusters = %v, want only default/api-v1 at 90 (api-v2 not allowed, api-v3 weight 0)", ws)
		}
		if got := routes[1].GetRoute().GetCluster(); got != "default/api" {
			t.Errorf("fallback route cluster = %q, want default/api", got)
		}
		if split.GetRoute().GetTimeout() == nil || split.GetRoute().GetTimeout().AsDuration() != 0 {
			t.Errorf("gRPC route timeout = %v, want 0 (disabled)", split.GetRoute().GetTimeout())
		}
		cs, err := Clusters(m, web)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(names(cs), []string{"default/api", "default/api-v1", "default/api-v3", "default/db", "local|default/web|8080"}); diff != "" {
			// api-v3 runs as api, so web may call it by its own VIP.
			t.Errorf("web's clusters (-got +want):\n%s", diff)
		}
	})

	t.Run("tcp ports get the network RBAC and tcp_proxy", func(t *testing.T) {
		ls, err := Listeners(m, db)
		if err != nil {
			t.Fatal(err)
		}
		r := unpackFilters(t, ls)
		netRBAC := typed[*rbacnetv3.RBAC](t, r, "inbound|default/db|3306 envoy.filters.network.rbac")
		if diff := cmp.Diff(principalsOf(netRBAC.GetRules()), map[string][]string{"default/web-to-db": {"spiffe://osm.local/ns/default/sa/web"}}); diff != "" {
			t.Errorf("db:3306 principals (-got +want):\n%s", diff)
		}
		tp := typed[*tcpproxyv3.TcpProxy](t, r, "inbound|default/db|3306 envoy.filters.network.tcp_proxy")
		if got, want := tp.GetCluster(), "local|default/db|3306"; got != want {
			t.Errorf("tcp_proxy cluster = %q, want %q", got, want)
		}
		// The TCPRoute allows only 3306: the HTTP port denies everyone.
		httpRBAC := typed[*rbachttpv3.RBAC](t, r, "inbound|default/db|9104 envoy.filters.http.rbac")
		if n := len(httpRBAC.GetRules().GetPolicies()); n != 0 || httpRBAC.GetRules().GetAction() != rbacv3.RBAC_ALLOW {
			t.Errorf("db:9104 RBAC = %v, want ALLOW with no policies (deny all)", httpRBAC.GetRules())
		}
		cs, err := Clusters(m, db)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.GetName() == "local|default/db|9104" {
				if got := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 19104 {
					t.Errorf("local cluster port = %d, want targetPort 19104", got)
				}
			}
		}
	})

	t.Run("endpoint reported by two providers appears once", func(t *testing.T) {
		cla, err := ClusterLoadAssignment(m, svc("api-v1"))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(cla.GetEndpoints()[0].GetLbEndpoints()); n != 1 {
			t.Errorf("got %d endpoints, want 1", n)
		}
	})

	t.Run("permissive allows any identity of the trust domain", func(t *testing.T) {
		pm := meshOf(bookstoreSpec(t, true).Snapshot(), bookstoreEndpoints(t))
		ls, err := Listeners(pm, Proxy{Service: svc("bookstore-v1"), Address: netip.MustParseAddr("10.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		r := unpackFilters(t, ls)
		rb := typed[*rbachttpv3.RBAC](t, r, "inbound|default/bookstore-v1|14001 envoy.filters.http.rbac")
		if diff := cmp.Diff(principalsOf(rb.GetRules()), map[string][]string{"permissive": {"spiffe://osm.local/"}}); diff != "" {
			t.Errorf("permissive principals (-got +want):\n%s", diff)
		}
	})
}

func TestRenderErrors(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	for _, tc := range []struct {
		name string
		m    Mesh
		p    Proxy
		want string
	}{
		{"unknown service", m, Proxy{Service: svc("bookstor"), Address: netip.MustParseAddr("10.0.0.1")}, `no Service "bookstor"`},
		{"no address", m, Proxy{Service: svc("bookbuyer")}, "no address"},
		{"no trust domain", meshIn(m.Spec(), nil, ""), Proxy{Service: svc("bookbuyer"), Address: netip.MustParseAddr("10.0.0.1")}, "empty trust domain"},
		{"no snapshot", meshIn(nil, nil, trustDomain), Proxy{Service: svc("bookbuyer"), Address: netip.MustParseAddr("10.0.0.1")}, "no mesh specification"},
		{"bad flavor", m, Proxy{Service: svc("bookbuyer"), Flavor: 7, Address: netip.MustParseAddr("10.0.0.1")}, "unknown flavor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Listeners(tc.m, tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Listeners error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Secrets(nil, testKeyPEM, testRootPEM); err == nil || !strings.Contains(err.Error(), "empty service certificate chain") {
		t.Errorf("Secrets without a chain: error = %v", err)
	}
	if _, err := ClusterLoadAssignment(Mesh{}, svc("x")); err == nil {
		t.Error("ClusterLoadAssignment without an endpoint source: no error")
	}
}
