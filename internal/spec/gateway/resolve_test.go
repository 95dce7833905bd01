package gateway

import (
	"iter"
	"slices"
	"strings"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// mapWorld is a World held in maps, as a test writes it.
type mapWorld struct {
	services map[mesh.MeshService][]Port
	gateways map[mesh.MeshService]*gwv1.GatewaySpec
	grants   map[string][]*gwv1.ReferenceGrantSpec
	splits   map[mesh.MeshService]string
	routes   []Route
}

func (w mapWorld) ServicePorts(s mesh.MeshService) ([]Port, bool) {
	p, ok := w.services[s]
	return p, ok
}
func (w mapWorld) ServiceHint(mesh.MeshService) string { return "" }
func (w mapWorld) Gateway(g mesh.MeshService) (*gwv1.GatewaySpec, bool) {
	s, ok := w.gateways[g]
	return s, ok
}
func (w mapWorld) ReferenceGrants(ns string) iter.Seq[*gwv1.ReferenceGrantSpec] {
	return slices.Values(w.grants[ns])
}
func (w mapWorld) SplitOf(s mesh.MeshService) (string, bool) { k, ok := w.splits[s]; return k, ok }
func (w mapWorld) Routes() iter.Seq[Route]                   { return slices.Values(w.routes) }

func svcRef(ns, name string, port int) gwv1.ParentReference {
	p := gwv1.ParentReference{Group: ptr(gwv1.Group("")), Kind: ptr(gwv1.Kind(kindService)), Name: gwv1.ObjectName(name)}
	if ns != "" {
		p.Namespace = ptr(gwv1.Namespace(ns))
	}
	if port != 0 {
		p.Port = ptr(gwv1.PortNumber(port))
	}
	return p
}

func backend(ns, name string, port int) gwv1.HTTPBackendRef {
	b := gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{Weight: ptr(int32(1)), BackendObjectReference: gwv1.BackendObjectReference{
		Group: ptr(gwv1.Group("")), Kind: ptr(gwv1.Kind(kindService)), Name: gwv1.ObjectName(name), Port: ptr(gwv1.PortNumber(port))}}}
	if ns != "" {
		b.Namespace = ptr(gwv1.Namespace(ns))
	}
	return b
}

func httpRoute(ns, name string, parents []gwv1.ParentReference, rules ...gwv1.HTTPRouteRule) Route {
	s := &gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: parents}, Rules: rules}
	return Route{Name: RouteName{Kind: KindHTTPRoute, Namespace: ns, Name: name}, HTTP: s}
}

func prefix(p string) []gwv1.HTTPRouteMatch {
	return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr(p)}}}
}

// TestResolution: a route attaches to the Service ports its kind serves,
// a backend in another namespace needs a ReferenceGrant there, and the
// index answers each caller namespace with its consumer routes or the
// Service's own, rules in precedence order, backends resolved.
func TestResolution(t *testing.T) {
	echo := mesh.MeshService{Namespace: "default", Name: "echo"}
	v2 := mesh.MeshService{Namespace: "other", Name: "echo-v2"}
	w := mapWorld{services: map[mesh.MeshService][]Port{
		echo: {{Name: "web", Port: 80, AppProtocol: "http"}, {Name: "db", Port: 5432, AppProtocol: "tcp"}},
		v2:   {{Port: 8080, AppProtocol: "http"}},
	}}
	producer := httpRoute("default", "split", []gwv1.ParentReference{svcRef("", "echo", 0)},
		gwv1.HTTPRouteRule{Matches: prefix("/"), BackendRefs: []gwv1.HTTPBackendRef{backend("", "echo", 80)}},
		gwv1.HTTPRouteRule{Matches: prefix("/v2"), BackendRefs: []gwv1.HTTPBackendRef{backend("other", "echo-v2", 8080)}})
	consumer := httpRoute("caller", "mine", []gwv1.ParentReference{svcRef("default", "echo", 80)},
		gwv1.HTTPRouteRule{Matches: prefix("/"), BackendRefs: []gwv1.HTTPBackendRef{backend("default", "echo", 80)}})
	tcpPort := httpRoute("default", "db", []gwv1.ParentReference{svcRef("", "echo", 5432)})

	if a := ResolveParents(w, producer); len(a) != 1 || a[0].Reason != "" || !slices.Equal(a[0].Ports, []int{80}) {
		t.Errorf("producer attaches %+v, want port 80 only (5432 is tcp)", a)
	}
	if a := ResolveParents(w, tcpPort); a[0].Reason != string(gwv1.RouteReasonUnsupportedValue) || !strings.Contains(a[0].Message, "is tcp") {
		t.Errorf("an HTTPRoute on a tcp port: %+v, want UnsupportedValue", a[0])
	}
	probs := ResolveBackends(w, producer)
	if len(probs) != 1 || probs[0].Reason != string(gwv1.RouteReasonRefNotPermitted) || probs[0].Field != "spec.rules[1].backendRefs[0]" {
		t.Fatalf("backends without a grant: %+v, want rules[1] RefNotPermitted", probs)
	}
	w.grants = map[string][]*gwv1.ReferenceGrantSpec{"other": {{
		From: []gwv1.ReferenceGrantFrom{{Group: Group, Kind: KindHTTPRoute, Namespace: "default"}},
		To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: kindService}}}}}
	if probs := ResolveBackends(w, producer); len(probs) != 0 {
		t.Fatalf("backends with a grant: %+v, want none", probs)
	}

	x := NewIndex(w, []Route{consumer, producer, tcpPort}, nil)
	if !x.HasRoutes(echo) || x.HasRoutes(v2) {
		t.Errorf("HasRoutes(echo, echo-v2) = %v, %v; want true, false", x.HasRoutes(echo), x.HasRoutes(v2))
	}
	g, ok := x.Routes(echo, 80, "default")
	if !ok || g.Consumer != "" || len(g.Rules) != 2 || *g.Rules[0].HTTP.Path.Value != "/v2" || !g.Rules[0].Backends[0].Valid {
		t.Errorf("producer routes = %+v, want /v2 (valid backend) before /", g)
	}
	if g, ok := x.Routes(echo, 80, "caller"); !ok || g.Consumer != "caller" || len(g.Routes) != 1 || g.Routes[0].Name != "mine" {
		t.Errorf("caller's routes = %+v, want its consumer route", g)
	}
	if _, ok := x.Routes(echo, 5432, "default"); ok {
		t.Error("routes on port 5432, where none attaches")
	}

	w.splits = map[mesh.MeshService]string{echo: "TrafficSplit default/echo"}
	if x := NewIndex(w, []Route{producer}, nil); !x.Empty() {
		t.Error("a route on a TrafficSplit's root is indexed; it is inert")
	}
	if st := RouteStatus(w, producer); st.Parents[0].Conditions[0].Status != "False" || !strings.Contains(st.Parents[0].Conditions[0].Message, "TrafficSplit default/echo") {
		t.Errorf("status on a split root = %+v, want Accepted False naming the split", st.Parents[0].Conditions[0])
	}
}

// TestIntersectHosts follows the Gateway API's listener and route host
// name intersection.
func TestIntersectHosts(t *testing.T) {
	h := func(s string) *gwv1.Hostname { x := gwv1.Hostname(s); return &x }
	for _, tc := range []struct {
		listener *gwv1.Hostname
		route    []gwv1.Hostname
		want     []string
	}{
		{nil, nil, []string{"*"}},
		{h("*.example.com"), nil, []string{"*.example.com"}},
		{h("*.example.com"), []gwv1.Hostname{"a.example.com", "b.other.com"}, []string{"a.example.com"}},
		{h("a.example.com"), []gwv1.Hostname{"*.example.com"}, []string{"a.example.com"}},
		{h("example.com"), []gwv1.Hostname{"*.example.com"}, nil},
	} {
		if got := intersectHosts(tc.listener, tc.route); !slices.Equal(got, tc.want) {
			t.Errorf("intersectHosts(%v, %v) = %v, want %v", tc.listener, tc.route, got, tc.want)
		}
	}
}
