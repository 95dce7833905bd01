package render

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	localratelimithttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	localratelimitnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/local_ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

// rateLimitYAML is a permissive mesh of three services with the same
// ports (HTTP, gRPC, TCP): two with different inbound rate limits and one
// without, so that a shape shared across limits would show.
const rateLimitYAML = `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec: {traffic: {permissive: true}}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: shop}
spec: {ports: [{port: 80, appProtocol: http}, {port: 81, appProtocol: grpc}, {port: 5432, appProtocol: tcp}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: cart}
spec: {ports: [{port: 80, appProtocol: http}, {port: 81, appProtocol: grpc}, {port: 5432, appProtocol: tcp}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: free}
spec: {ports: [{port: 80, appProtocol: http}, {port: 81, appProtocol: grpc}, {port: 5432, appProtocol: tcp}]}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: shop}
spec:
  host: shop
  rateLimit:
    local:
      tcp: {connections: 100, unit: minute, burst: 10}
      http: {requests: 50, unit: second, burst: 10, responseStatusCode: 503, responseHeadersToAdd: [{name: retry-after, value: "1"}]}
  httpRoutes:
    - path: /books/.*
      rateLimit: {local: {requests: 5, unit: second}}
    - path: /orders
      rateLimit: {local: {requests: 1, unit: hour, responseStatusCode: 429}}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: cart}
spec:
  host: cart.default.svc.cluster.local
  rateLimit:
    local:
      tcp: {connections: 7, unit: second}
`

func rateLimitMesh(t *testing.T) Mesh {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, rateLimitYAML)
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i, name := range []string{"shop", "cart", "free"} {
		eps[svc(name)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 0, 3, byte(i + 1)}), Port: 80}}
	}
	return meshOf(s.Snapshot(), eps)
}

// TestInboundRateLimits: the Service's own Envoy enforces its
// UpstreamTrafficSetting's local rate limits as OSM rendered them: the
// connection bucket on every inbound chain (before the HCM, or after the
// network RBAC filter), the HTTP filter (without a bucket) after RBAC in
// the HCM of a port with request limits, the Service's bucket on the
// inbound virtual host and each httpRoutes entry's on a route of its own
// before the catch-all; a Service without limits gets none of it, nor do
// proxyless gRPC servers.
func TestInboundRateLimits(t *testing.T) {
	m := rateLimitMesh(t)
	addr := netip.MustParseAddr("10.0.3.1")
	shop := renderAll(t, m, Proxy{Service: svc("shop"), Flavor: Envoy, Address: addr})
	if err := Validate(Envoy, shop.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	filterNames := func(l *listenerv3.Listener) []string {
		var out []string
		for _, f := range l.GetFilterChains()[0].GetFilters() {
			out = append(out, f.GetName())
			if f.GetName() == hcmFilter {
				hcm := unpackAs[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				for _, hf := range hcm.GetHttpFilters() {
					out = append(out, "  "+hf.GetName())
				}
			}
		}
		return out
	}
	listeners := map[string]*listenerv3.Listener{}
	for _, x := range shop.Listeners {
		l := x.(*listenerv3.Listener)
		listeners[l.GetName()] = l
	}
	for _, tc := range []struct {
		port int
		want []string
	}{
		{80, []string{networkRateLimitFilter, hcmFilter, "  " + httpRBACFilter, "  " + httpRateLimitFilter, "  " + routerFilter}},
		{81, []string{networkRateLimitFilter, hcmFilter, "  " + httpRBACFilter, "  " + httpRateLimitFilter, "  " + routerFilter}},
		{5432, []string{networkRBACFilter, networkRateLimitFilter, tcpProxyFilter}},
	} {
		name := InboundName(svc("shop"), tc.port)
		l, ok := listeners[name]
		if !ok {
			t.Fatalf("no listener %s", name)
		}
		if diff := cmp.Diff(tc.want, filterNames(l)); diff != "" {
			t.Errorf("%s filters (-want +got):\n%s", name, diff)
		}
		for _, f := range l.GetFilterChains()[0].GetFilters() {
			switch f.GetName() {
			case networkRateLimitFilter:
				rl := unpackAs[*localratelimitnetv3.LocalRateLimit](t, f.GetTypedConfig())
				tb := rl.GetTokenBucket()
				if rl.GetStatPrefix() != name || tb.GetMaxTokens() != 110 || tb.GetTokensPerFill().GetValue() != 100 || tb.GetFillInterval().AsDuration() != time.Minute {
					t.Errorf("%s: connection limit %v, want 110 tokens, 100 a minute", name, rl)
				}
			case hcmFilter:
				hcm := unpackAs[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
				rl := unpackAs[*localratelimithttpv3.LocalRateLimit](t, hcm.GetHttpFilters()[1].GetTypedConfig())
				if !proto.Equal(rl, &localratelimithttpv3.LocalRateLimit{StatPrefix: name}) {
					t.Errorf("%s: HCM rate limit filter %v, want only its stat prefix (the buckets are the routes')", name, rl)
				}
			}
		}
	}

	rc := routeNamed(t, shop.Routes, InboundName(svc("shop"), 80))
	vh := rc.GetVirtualHosts()[0]
	host := unpackAs[*localratelimithttpv3.LocalRateLimit](t, vh.GetTypedPerFilterConfig()[httpRateLimitFilter])
	if tb := host.GetTokenBucket(); tb.GetMaxTokens() != 60 || tb.GetTokensPerFill().GetValue() != 50 || tb.GetFillInterval().AsDuration() != time.Second ||
		host.GetStatus().GetCode() != 503 || len(host.GetResponseHeadersToAdd()) != 1 || host.GetResponseHeadersToAdd()[0].GetHeader().GetKey() != "retry-after" ||
		host.GetFilterEnabled().GetDefaultValue().GetNumerator() != 100 || host.GetFilterEnforced().GetDefaultValue().GetNumerator() != 100 {
		t.Errorf("virtual host rate limit %v, want 60 tokens, 50 a second, 503 with retry-after, enabled and enforced", host)
	}
	var paths []string
	for _, r := range vh.GetRoutes() {
		p := r.GetMatch().GetPrefix()
		if re := r.GetMatch().GetSafeRegex(); re != nil {
			p = re.GetRegex()
		}
		paths = append(paths, p)
		if r.GetRoute().GetCluster() != LocalClusterName(svc("shop"), 80) {
			t.Errorf("route %q goes to %q, want the local cluster", p, r.GetRoute().GetCluster())
		}
	}
	if diff := cmp.Diff([]string{"/books/.*", "/orders", "/"}, paths); diff != "" {
		t.Errorf("inbound routes (-want +got):\n%s", diff)
	}
	books := unpackAs[*localratelimithttpv3.LocalRateLimit](t, vh.GetRoutes()[0].GetTypedPerFilterConfig()[httpRateLimitFilter])
	if tb := books.GetTokenBucket(); tb.GetMaxTokens() != 5 || tb.GetTokensPerFill().GetValue() != 5 || books.GetStatus() != nil {
		t.Errorf("/books/.* rate limit %v, want 5 tokens, 5 a second, Envoy's 429", books)
	}
	orders := unpackAs[*localratelimithttpv3.LocalRateLimit](t, vh.GetRoutes()[1].GetTypedPerFilterConfig()[httpRateLimitFilter])
	if tb := orders.GetTokenBucket(); tb.GetMaxTokens() != 1 || tb.GetTokensPerFill() != nil || tb.GetFillInterval().AsDuration() != time.Hour || orders.GetStatus() != nil {
		t.Errorf("/orders rate limit %v, want 1 token an hour (tokens_per_fill left at Envoy's 1), Envoy's 429 (not written)", orders)
	}
	if len(vh.GetRoutes()[2].GetTypedPerFilterConfig()) != 0 {
		t.Errorf("the catch-all route has its own config %v: the virtual host's must apply", vh.GetRoutes()[2].GetTypedPerFilterConfig())
	}
	// The gRPC port's routes keep their disabled route timeout.
	for _, r := range routeNamed(t, shop.Routes, InboundName(svc("shop"), 81)).GetVirtualHosts()[0].GetRoutes() {
		if r.GetRoute().GetTimeout() == nil || r.GetRoute().GetTimeout().AsDuration() != 0 {
			t.Errorf("gRPC port route %v: want timeout 0", r)
		}
	}

	// cart limits connections only: no HTTP filter, no route config.
	cart := renderAll(t, m, Proxy{Service: svc("cart"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.3.2")})
	for _, x := range cart.Listeners {
		l := x.(*listenerv3.Listener)
		if !strings.HasPrefix(l.GetName(), "inbound|") {
			continue
		}
		if got := filterNames(l); !slices.Contains(got, networkRateLimitFilter) || slices.Contains(got, "  "+httpRateLimitFilter) {
			t.Errorf("cart %s filters %v: want the connection limit only", l.GetName(), got)
		}
	}
	for _, x := range cart.Routes {
		if rc := x.(*routev3.RouteConfiguration); strings.HasPrefix(rc.GetName(), "inbound|") && (len(rc.GetVirtualHosts()[0].GetTypedPerFilterConfig()) > 0 || len(rc.GetVirtualHosts()[0].GetRoutes()) != 1) {
			t.Errorf("cart %s: %v, want one route and no rate limit", rc.GetName(), rc)
		}
	}

	// free has none, and gRPC servers never do.
	for _, p := range []Proxy{
		{Service: svc("free"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.3.3")},
		{Service: svc("shop"), Flavor: GRPC, Address: addr},
	} {
		r := renderAll(t, m, p)
		if err := Validate(p.Flavor, r.all()...); err != nil {
			t.Errorf("%s %s: Validate: %v", p.Flavor, p.Service, err)
		}
		for _, x := range append(r.Listeners, r.Routes...) {
			if b, _ := proto.Marshal(x); strings.Contains(string(b), "local_ratelimit") || strings.Contains(string(b), "LocalRateLimit") {
				t.Errorf("%s %s: %s has a rate limit", p.Flavor, p.Service, labelOf(x))
			}
		}
	}
}

// TestInboundRateLimitChangesOnlyItsService: a rate limit on one Service
// changes that Service's Envoy Inputs, not its callers' nor its gRPC
// servers' (which render none).
func TestInboundRateLimitChangesOnlyItsService(t *testing.T) {
	eps := bookstoreEndpoints(t)
	before := meshOf(bookstoreSpec(t, false).Snapshot(), eps)
	s := bookstoreSpec(t, false)
	applyYAML(t, s, `apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: bookwarehouse, namespace: default}
spec:
  host: bookwarehouse
  rateLimit: {local: {http: {requests: 10, unit: second}}}
`)
	after := meshOf(s.Snapshot(), eps)
	for _, tc := range []struct {
		service string
		flavor  Flavor
		changed bool
	}{
		{"bookwarehouse", Envoy, true},
		{"bookwarehouse", GRPC, false},
		{"bookstore-v1", Envoy, false}, // a caller: its clusters do not change
		{"bookbuyer", Envoy, false},
	} {
		if got := inputsChanged(t, before, after, tc.service, tc.flavor); got != tc.changed {
			t.Errorf("%s %s: inputs changed = %v, want %v", tc.flavor, tc.service, got, tc.changed)
		}
	}
}

// TestValidateRateLimits: validation refuses a local rate limit for gRPC,
// and a bucket that is not enabled and enforced for every request.
func TestValidateRateLimits(t *testing.T) {
	m := rateLimitMesh(t)
	r := renderAll(t, m, Proxy{Service: svc("shop"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.3.1")})
	rc := proto.Clone(routeNamed(t, r.Routes, InboundName(svc("shop"), 80))).(*routev3.RouteConfiguration)
	cfg := unpackAs[*localratelimithttpv3.LocalRateLimit](t, rc.GetVirtualHosts()[0].GetTypedPerFilterConfig()[httpRateLimitFilter])
	cfg.FilterEnforced = nil
	rc.VirtualHosts[0].TypedPerFilterConfig[httpRateLimitFilter] = mustAny(cfg)
	if err := NewValidator(Envoy).ValidateSet(nil, nil, rc); err == nil || !strings.Contains(err.Error(), "filter_enforced") {
		t.Errorf("a bucket not enforced: Validate = %v, want an error naming filter_enforced", err)
	}
	for _, x := range r.Listeners {
		l := x.(*listenerv3.Listener)
		if l.GetName() != InboundName(svc("shop"), 5432) {
			continue
		}
		err := NewValidator(GRPC).ValidateSet(nil, nil, l)
		if err == nil || !strings.Contains(err.Error(), "gRPC does not support local rate limiting") {
			t.Errorf("a rate limit for gRPC: Validate = %v, want it refused", err)
		}
	}
}

func routeNamed(t *testing.T, rs []proto.Message, name string) *routev3.RouteConfiguration {
	t.Helper()
	for _, x := range rs {
		if rc := x.(*routev3.RouteConfiguration); rc.GetName() == name {
			return rc
		}
	}
	t.Fatalf("no route configuration %s", name)
	return nil
}

// unpackAs unpacks a, which must hold a T.
func unpackAs[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
	}
	x, ok := m.(T)
	if !ok {
		t.Fatalf("%s holds %T", a.GetTypeUrl(), m)
	}
	return x
}
