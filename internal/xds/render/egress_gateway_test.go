package render

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// egressGatewaySvc is the EgressGateway of egressGatewayMesh, and its
// machines.
var (
	egressGatewaySvc   = mesh.MeshService{Namespace: "default", Name: "egress"}
	egressGatewayAddrs = []string{"10.0.9.1", "10.0.9.2"}
)

// egressGatewayMesh is egressMesh with every Egress through the
// EgressGateway default/egress (bookthief also a source of the tls one),
// whose two machines a provider lists on its port.
func egressGatewayMesh(t *testing.T) Mesh {
	t.Helper()
	s := bookstoreSpec(t, false)
	policies := strings.ReplaceAll(egressPolicies, "  sources: [{kind: ServiceAccount, name: bookbuyer}]\n", "  sources: [{kind: ServiceAccount, name: bookbuyer}]\n  gateway: {name: egress}\n")
	policies = strings.Replace(policies, "metadata: {name: tls}\nspec:\n  sources: [{kind: ServiceAccount, name: bookbuyer}]", "metadata: {name: tls}\nspec:\n  sources: [{kind: ServiceAccount, name: bookbuyer}, {kind: ServiceAccount, name: bookthief}]", 1)
	applyYAML(t, s, "apiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress}\nspec: {}\n"+policies)
	eps := bookstoreEndpoints(t)
	for _, a := range egressGatewayAddrs {
		eps[egressGatewaySvc] = append(eps[egressGatewaySvc], mesh.Endpoint{IP: netip.MustParseAddr(a), Port: spec.DefaultEgressGatewayPort, Provider: "static"})
	}
	return meshOf(s.Snapshot(), eps)
}

var egressKinds = map[string]string{
	"tls": "api.github.com", "tcp": "mongo.k8s.com", "tcp-originate": "db.example.net",
	"http": "httpbin.org", "http-originate": "newsfeed.news.com",
}

// TestEgressGatewaySourceGolden: a source's listener and routes stay as
// without a gateway; its cluster for each kind of port is the gateway's
// machines (EDS, the gateway's endpoints among the source's), over mTLS
// with the host and port in the SNI.
func TestEgressGatewaySourceGolden(t *testing.T) {
	m := egressGatewayMesh(t)
	p := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")}
	r := renderAll(t, m, p)
	if err := Validate(Envoy, r.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	direct := renderAll(t, egressMesh(t), p)
	for kind, host := range egressKinds {
		t.Run(kind, func(t *testing.T) {
			got := withPrefix(r, "egress|"+host+"|")
			compareGolden(t, "egress-gateway-source-"+kind, goldenJSON(t, got))
			want := withPrefix(direct, "egress|"+host+"|")
			// Equal but for the name of the cluster they send to.
			clusterRef := regexp.MustCompile(`"cluster": "[^"]*"`)
			g := clusterRef.ReplaceAll(goldenJSON(t, resources{Listeners: got.Listeners, Routes: got.Routes}), nil)
			w := clusterRef.ReplaceAll(goldenJSON(t, resources{Listeners: want.Listeners, Routes: want.Routes}), nil)
			if string(g) != string(w) {
				t.Errorf("the listener and routes differ from those without a gateway in more than the cluster's name:\n%s\nwant\n%s", g, w)
			}
		})
	}
	deps, err := Dependencies(m, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(deps, egressGatewaySvc) {
		t.Errorf("Dependencies = %v, want the egress gateway %s among them", deps, egressGatewaySvc)
	}
	var cla *endpointv3.ClusterLoadAssignment
	for _, e := range r.Endpoints {
		if e := e.(*endpointv3.ClusterLoadAssignment); e.GetClusterName() == EDSName(egressGatewaySvc) {
			cla = e
		}
	}
	if n := len(cla.GetEndpoints()); n != 1 || len(cla.GetEndpoints()[0].GetLbEndpoints()) != len(egressGatewayAddrs) {
		t.Errorf("the gateway's load assignment: %v, want its %d machines", cla, len(egressGatewayAddrs))
	}
}

// TestEgressGatewayGolden renders the gateway machine's Envoy: one
// listener on its address and port with a filter chain per host and port
// (each kind of port), the LOGICAL_DNS clusters a source gets without a
// gateway, its secrets, and nothing else.
func TestEgressGatewayGolden(t *testing.T) {
	m := egressGatewayMesh(t)
	p := Proxy{Service: egressGatewaySvc, Flavor: Gateway, Address: netip.MustParseAddr(egressGatewayAddrs[0])}
	r := renderAll(t, m, p)
	if err := Validate(Gateway, r.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if len(r.Routes) != 0 || len(r.Endpoints) != 0 {
		t.Errorf("routes %v, endpoints %v: want none", r.Routes, r.Endpoints)
	}
	compareGolden(t, "egress-gateway", goldenJSON(t, resources{Listeners: r.Listeners, Clusters: r.Clusters}))
	if len(r.Listeners) != 1 {
		t.Fatalf("listeners: %v, want one", r.Listeners)
	}
	l := r.Listeners[0].(*listenerv3.Listener)
	if !PerProxy(l.GetName()) {
		t.Errorf("listener %q binds the machine's address but PerProxy says it does not", l.GetName())
	}
	// The clusters are byte-identical to a source's without a gateway.
	direct := renderAll(t, egressMesh(t), Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")})
	want := withPrefix(direct, "egress|").Clusters
	if string(goldenJSON(t, resources{Clusters: r.Clusters})) != string(goldenJSON(t, resources{Clusters: want})) {
		t.Error("the gateway's clusters differ from the per-machine egress clusters")
	}
	// Each filter chain allows exactly the sources of its host and port.
	for _, fc := range l.GetFilterChains() {
		want := []string{"spiffe://" + trustDomain + "/ns/default/sa/bookbuyer"}
		if fc.GetName() == "443.api.github.com" {
			want = append(want, "spiffe://"+trustDomain+"/ns/default/sa/bookthief")
		}
		got := chainPrincipals(t, fc)["egress|"+fc.GetName()]
		if !slices.Equal(got, want) {
			t.Errorf("filter chain %s allows %v, want %v", fc.GetName(), got, want)
		}
	}
}

// chainPrincipals returns the principals a filter chain's network RBAC
// allows, by policy.
func chainPrincipals(t *testing.T, fc *listenerv3.FilterChain) map[string][]string {
	t.Helper()
	for _, f := range fc.GetFilters() {
		var rules rbacnetv3.RBAC
		if f.GetName() != networkRBACFilter {
			continue
		}
		if err := f.GetTypedConfig().UnmarshalTo(&rules); err != nil {
			t.Fatal(err)
		}
		return principalsOf(rules.GetRules())
	}
	return nil
}

// TestEgressGatewayInputs: the gateway's inputs change with what goes
// through it, a source's with whether its Egress names a gateway, and a
// gateway proxy without its EgressGateway is refused with the fix.
func TestEgressGatewayInputs(t *testing.T) {
	m := egressGatewayMesh(t)
	gw := Proxy{Service: egressGatewaySvc, Flavor: Gateway, Address: netip.MustParseAddr(egressGatewayAddrs[0])}
	buyer := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")}
	before, err := InputsOf(m, buyer)
	if err != nil {
		t.Fatal(err)
	}
	after, err := InputsOf(egressMesh(t), buyer)
	if err != nil {
		t.Fatal(err)
	}
	if before.Equal(after) {
		t.Error("bookbuyer's Inputs are equal with and without the gateway")
	}
	s := bookstoreSpec(t, false)
	applyYAML(t, s, "apiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress}\nspec: {}\n")
	empty := meshOf(s.Snapshot(), nil)
	a, err := InputsOf(m, gw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := InputsOf(empty, gw)
	if err != nil {
		t.Fatal(err)
	}
	if a.Equal(b) {
		t.Error("the gateway's Inputs are equal with and without Egresses through it")
	}
	// Without Egresses the gateway has no listener (one needs a filter chain).
	if ls, err := Listeners(empty, gw); err != nil || len(ls) != 0 {
		t.Errorf("Listeners without Egresses = %v, %v; want none", ls, err)
	}
	_, err = Listeners(meshOf(bookstoreSpec(t, false).Snapshot(), nil), gw)
	if err == nil || !strings.Contains(err.Error(), "apply its EgressGateway") {
		t.Errorf("a gateway proxy without its EgressGateway: %v, want the fix named", err)
	}
}

// TestValidateEgressViaGatewayCluster: the source's cluster to the gateway
// is an ordinary mesh EDS cluster to the validator; without its SDS
// certificate it is refused.
func TestValidateEgressViaGatewayCluster(t *testing.T) {
	cs, err := Clusters(egressGatewayMesh(t), Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cs, func(c *clusterv3.Cluster) bool { return c.GetName() == "egress|api.github.com|443|via=default/egress" })
	if i < 0 {
		t.Fatal("no cluster through the gateway")
	}
	bad := cs[i]
	bad.TransportSocket = (&builder{}).transportSocket(upstreamTLSWithoutRoots())
	if err := Validate(Envoy, bad); err == nil || !strings.Contains(err.Error(), "SDS") {
		t.Errorf("Validate = %v, want the missing SDS named", err)
	}
}
