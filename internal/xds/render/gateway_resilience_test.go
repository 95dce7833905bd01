package render

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// TestGatewayProxyResilienceGolden renders the gateway proxies of
// testdata/gateway-proxy.yaml with gateway-proxy-resilience.yaml's
// policies: each route carries the route policy of the Service it calls
// (request and idle timeouts, retry, fault) as a mesh caller's would, the
// route's own timeouts winning; a Retry naming the web gateway's account
// is its retry; a rule sending to two Services whose policies differ gets
// none of the parts they differ on.
func TestGatewayProxyResilienceGolden(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-proxy.yaml")+"\n---\n"+readFile(t, "testdata", "gateway-proxy-resilience.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i, n := range []string{"echo-v1", "echo-v2", "grpc-echo"} {
		eps[svc(n)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), Port: 80, Provider: "static"}}
	}
	m := meshOf(s.Snapshot(), eps)
	routes := map[string]map[string]*routev3.Route{}
	// The HTTP filters of each filter chain: the fault filter where the
	// chain's routes inject faults.
	wantFilters := map[string][]string{
		"gateway|default/web|80":          {faultFilter, routerFilter},
		"gateway|default/web|8080":        {faultFilter, routerFilter},
		"gateway|default/secure|443 shop": {faultFilter, routerFilter},
		"gateway|default/secure|443 api":  {routerFilter},
	}
	for _, gw := range []string{"web", "secure"} {
		r := renderAll(t, m, Proxy{Service: svc(gw), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
		if err := Validate(Gateway, r.all()...); err != nil {
			t.Errorf("%s: Validate: %v", gw, err)
		}
		for _, x := range r.Listeners {
			l := x.(*listenerv3.Listener)
			for _, fc := range l.GetFilterChains() {
				key := strings.TrimSpace(l.GetName() + " " + fc.GetName())
				var got []string
				for _, hf := range unpackAs[*hcmv3.HttpConnectionManager](t, fc.GetFilters()[0].GetTypedConfig()).GetHttpFilters() {
					got = append(got, hf.GetName())
				}
				want, ok := wantFilters[key]
				if !ok {
					t.Errorf("unexpected filter chain %q", key)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: HTTP filters %v, want %v", key, got, want)
				}
				delete(wantFilters, key)
			}
		}
		checkGolden(t, "gateway-proxy-resilience-"+gw, goldenJSON(t, r))
		routes[gw] = map[string]*routev3.Route{}
		for _, x := range r.Routes {
			for _, vh := range x.(*routev3.RouteConfiguration).GetVirtualHosts() {
				for _, rt := range vh.GetRoutes() {
					routes[gw][vh.GetName()+" "+rt.GetName()] = rt
				}
			}
		}
	}
	if len(wantFilters) > 0 {
		t.Errorf("filter chains not rendered: %v", wantFilters)
	}
	route := func(gw, name string) *routev3.RouteAction {
		t.Helper()
		rt, ok := routes[gw][name]
		if !ok {
			t.Fatalf("%s: no route %q among %v", gw, name, routes[gw])
		}
		return rt.GetRoute()
	}
	for _, tc := range []struct {
		gw, route string
		timeout   time.Duration // 0: none written
		retries   uint32        // 0: no retry policy
		fault     bool
	}{
		// echo-v1's policy; the Retry naming web's account wins for web.
		{"web", "* default/any/rule0/match0", 10 * time.Second, 5, true},
		{"secure", "shop.example.com default/shop/rule1/match0", 10 * time.Second, 3, true},
		// /cart: only echo-v1 is reachable from secure; from web, echo-v1
		// and echo-v2 (defaults), which differ on every part written.
		{"secure", "shop.example.com default/shop/rule0/match0", 10 * time.Second, 3, true},
		{"web", "shop.example.com default/shop/rule0/match0", 0, 0, false},
		// The route's own timeout wins; the retry is still the policy's.
		{"web", "slow.example.com default/slow/rule0/match0", 30 * time.Second, 5, true},
		// gRPC: grpc-echo's 3s, MeshConfig's default retry.
		{"secure", "*.api.example.com default/api/rule0/match0", 3 * time.Second, 2, false},
	} {
		a := route(tc.gw, tc.route)
		if got := a.GetTimeout().AsDuration(); got != tc.timeout {
			t.Errorf("%s %s: timeout %v, want %v", tc.gw, tc.route, got, tc.timeout)
		}
		if got := a.GetRetryPolicy().GetNumRetries().GetValue(); got != tc.retries {
			t.Errorf("%s %s: retries %d, want %d", tc.gw, tc.route, got, tc.retries)
		}
		if got := routes[tc.gw][tc.route].GetTypedPerFilterConfig()[faultFilter] != nil; got != tc.fault {
			t.Errorf("%s %s: fault %v, want %v", tc.gw, tc.route, got, tc.fault)
		}
	}
}

// TestGatewayInputsFollowRoutePolicies: a route policy on a Service the
// gateway's rules call changes the gateway proxy's Inputs (so the
// publisher renders its routes again); one on a Service no rule of the
// gateway calls does not.
func TestGatewayInputsFollowRoutePolicies(t *testing.T) {
	base := readFile(t, "testdata", "gateway-proxy.yaml")
	inputs := func(extra string) Inputs {
		t.Helper()
		s, err := newSpecFromYAML(t, base+extra)
		if err != nil {
			t.Fatal(err)
		}
		in, err := InputsOf(meshOf(s.Snapshot(), nil), Proxy{Service: svc("web"), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	policy := func(service string) string {
		return "\n---\napiVersion: osm-vm.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: p}\nspec: {targetRefs: [{group: \"\", kind: Service, name: " + service + "}], timeouts: {request: 3s}}\n"
	}
	without := inputs("")
	if got := inputs(policy("echo-v1")); got.Equal(without) {
		t.Error("a request timeout on echo-v1, which web's rules call: the gateway's Inputs did not change")
	}
	if got := inputs(policy("grpc-echo")); !got.Equal(without) {
		t.Error("a request timeout on grpc-echo, which no rule of web calls: the gateway's Inputs changed")
	}
}
