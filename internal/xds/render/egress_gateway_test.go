package render

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dfpclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	setfilterstatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/set_filter_state/v3"
	snidfpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

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
// (each kind of port), a dynamic forward proxy cluster per host and
// target port (TLS as a source's without a gateway), its secrets, and
// nothing else. The golden shows the connect-time refusal: each chain
// resolves its host through the DNS cache that drops internal addresses.
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
	// The clusters are a source's without a gateway (names, TLS), resolved
	// by the dynamic forward proxy.
	direct := renderAll(t, egressMesh(t), Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")})
	want := withPrefix(direct, "egress|").Clusters
	if len(want) != len(r.Clusters) {
		t.Fatalf("the gateway has %d clusters, a source without it %d", len(r.Clusters), len(want))
	}
	for i, c := range r.Clusters {
		got, w := c.(*clusterv3.Cluster), want[i].(*clusterv3.Cluster)
		if got.GetName() != w.GetName() || !proto.Equal(got.GetTransportSocket(), w.GetTransportSocket()) {
			t.Errorf("gateway cluster %q differs from the source's %q in name or TLS", got.GetName(), w.GetName())
		}
	}
	checkConnectTimeRefusal(t, l, r.Clusters, spec.DefaultMeshConfig().Spec.EgressDeniedPrefixes())
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

// checkConnectTimeRefusal checks that every filter chain of the egress
// gateway's listener resolves its host (set_filter_state naming the host
// and target port, then the SNI dynamic forward proxy) after RBAC and
// before tcp_proxy, into the one DNS cache of every cluster, whose
// resolved_address_filter is denied.
func checkConnectTimeRefusal(t *testing.T, l *listenerv3.Listener, clusters []proto.Message, denied []netip.Prefix) {
	t.Helper()
	var ranges []string
	for _, p := range denied {
		ranges = append(ranges, p.String())
	}
	var cache *dfpcommonv3.DnsCacheConfig
	same := func(where string, c *dfpcommonv3.DnsCacheConfig) {
		var got []string
		for _, r := range c.GetResolvedAddressFilter().GetRanges() {
			got = append(got, netip.PrefixFrom(netip.MustParseAddr(r.GetAddressPrefix()), int(r.GetPrefixLen().GetValue())).String())
		}
		if d := cmp.Diff(ranges, got); d != "" || c.GetResolvedAddressFilter().GetInvertMatch() {
			t.Errorf("%s: resolved_address_filter (-want +got):\n%s", where, d)
		}
		if cache == nil {
			cache = c
		} else if !proto.Equal(cache, c) {
			t.Errorf("%s: DNS cache %v differs from %v (Envoy refuses two settings of one cache)", where, c, cache)
		}
	}
	for _, fc := range l.GetFilterChains() {
		var names []string
		for _, f := range fc.GetFilters() {
			names = append(names, f.GetName())
		}
		if d := cmp.Diff([]string{networkRBACFilter, setFilterStateFilter, sniDFPFilter, tcpProxyFilter}, names); d != "" {
			t.Fatalf("filter chain %s filters (-want +got):\n%s", fc.GetName(), d)
		}
		fs := &setfilterstatev3.Config{}
		if err := fc.GetFilters()[1].GetTypedConfig().UnmarshalTo(fs); err != nil {
			t.Fatal(err)
		}
		dfp := &snidfpv3.FilterConfig{}
		if err := fc.GetFilters()[2].GetTypedConfig().UnmarshalTo(dfp); err != nil {
			t.Fatal(err)
		}
		host := fs.GetOnNewConnection()[0].GetFormatString().GetTextFormatSource().GetInlineString()
		port := fs.GetOnNewConnection()[1].GetFormatString().GetTextFormatSource().GetInlineString()
		if k := fs.GetOnNewConnection()[0].GetObjectKey(); k != dynamicHostKey || !strings.HasSuffix(fc.GetName(), "."+host) || port != strconv.Itoa(int(dfp.GetPortValue())) {
			t.Errorf("filter chain %s sets %s=%q, port %q (SNI DFP port %d)", fc.GetName(), k, host, port, dfp.GetPortValue())
		}
		same("filter chain "+fc.GetName(), dfp.GetDnsCacheConfig())
	}
	for _, m := range clusters {
		c := m.(*clusterv3.Cluster)
		cc := &dfpclusterv3.ClusterConfig{}
		if c.GetClusterType().GetName() != dfpCluster || c.GetClusterType().GetTypedConfig().UnmarshalTo(cc) != nil {
			t.Fatalf("cluster %s: type %v, want %s", c.GetName(), c.GetClusterType(), dfpCluster)
		}
		same("cluster "+c.GetName(), cc.GetDnsCacheConfig())
	}
	for _, a := range []string{"169.254.169.254", "127.0.0.1", "0.0.0.0", "::1", "::ffff:169.254.169.254", "fe80::1", "fd00:ec2::254", "100.100.100.200"} {
		if !slices.ContainsFunc(denied, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr(a)) }) {
			t.Errorf("%s is not refused", a)
		}
	}
}

// TestEgressGatewayAllowedInternalCIDRs: a MeshConfig allowing an
// internal range carves it out of the DNS cache's filter (a new cache
// name, as Envoy keeps a cache per name), and the listener's and clusters'
// caches stay one.
func TestEgressGatewayAllowedInternalCIDRs(t *testing.T) {
	s := bookstoreSpec(t, false)
	policies := strings.ReplaceAll(egressPolicies, "  sources: [{kind: ServiceAccount, name: bookbuyer}]\n", "  sources: [{kind: ServiceAccount, name: bookbuyer}]\n  gateway: {name: egress}\n")
	applyYAML(t, s, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  egress: {allowedInternalCIDRs: [169.254.170.2/32]}\n---\napiVersion: osm-vm.io/v1alpha1\nkind: EgressGateway\nmetadata: {name: egress}\nspec: {}\n"+policies)
	m := meshOf(s.Snapshot(), bookstoreEndpoints(t))
	p := Proxy{Service: egressGatewaySvc, Flavor: Gateway, Address: netip.MustParseAddr(egressGatewayAddrs[0])}
	r := renderAll(t, m, p)
	if err := Validate(Gateway, r.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	denied := s.Snapshot().MeshConfig().EgressDeniedPrefixes()
	if slices.ContainsFunc(denied, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr("169.254.170.2")) }) {
		t.Fatalf("169.254.170.2 still denied: %v", denied)
	}
	checkConnectTimeRefusal(t, r.Listeners[0].(*listenerv3.Listener), r.Clusters, denied)
	compareGolden(t, "egress-gateway-allowed-cidrs", goldenJSON(t, resources{Clusters: r.Clusters[:1]}))
	def := egressDNSCache(spec.DefaultMeshConfig().Spec.EgressDeniedPrefixes())
	if got := egressDNSCache(denied); got.GetName() == def.GetName() {
		t.Errorf("DNS cache name %q is the default's: Envoy would refuse its new settings", got.GetName())
	}
}

// TestValidateEgressGatewayRefusal: the validator refuses a gateway whose
// DNS cache would not drop internal addresses, in a cluster or a filter,
// and dynamic forward proxy clusters elsewhere.
func TestValidateEgressGatewayRefusal(t *testing.T) {
	m := egressGatewayMesh(t)
	p := Proxy{Service: egressGatewaySvc, Flavor: Gateway, Address: netip.MustParseAddr(egressGatewayAddrs[0])}
	r := renderAll(t, m, p)
	cluster := r.Clusters[0].(*clusterv3.Cluster)
	listener := r.Listeners[0].(*listenerv3.Listener)
	withCache := func(edit func(*dfpcommonv3.DnsCacheConfig)) *clusterv3.Cluster {
		c := proto.Clone(cluster).(*clusterv3.Cluster)
		cc := &dfpclusterv3.ClusterConfig{}
		if err := c.GetClusterType().GetTypedConfig().UnmarshalTo(cc); err != nil {
			t.Fatal(err)
		}
		edit(cc.GetDnsCacheConfig())
		c.GetClusterType().TypedConfig = (&builder{}).any(cc)
		return c
	}
	for name, c := range map[string]struct {
		flavor Flavor
		res    proto.Message
		want   string
	}{
		"no filter": {Gateway, withCache(func(d *dfpcommonv3.DnsCacheConfig) { d.ResolvedAddressFilter = nil }), "has no resolved_address_filter"},
		"inverted":  {Gateway, withCache(func(d *dfpcommonv3.DnsCacheConfig) { d.ResolvedAddressFilter.InvertMatch = true }), "has no resolved_address_filter"},
		"no ranges": {Gateway, withCache(func(d *dfpcommonv3.DnsCacheConfig) { d.ResolvedAddressFilter.Ranges = nil }), "has no resolved_address_filter"},
		"lb policy": {Gateway, func() *clusterv3.Cluster {
			c := proto.Clone(cluster).(*clusterv3.Cluster)
			c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
			return c
		}(), "Envoy requires CLUSTER_PROVIDED"},
		"grpc": {GRPC, cluster, "rendered for an egress gateway's Envoy only"},
		"filter without": {Gateway, func() *listenerv3.Listener {
			l := proto.Clone(listener).(*listenerv3.Listener)
			f := l.GetFilterChains()[0].GetFilters()[2]
			dfp := &snidfpv3.FilterConfig{}
			if err := f.GetTypedConfig().UnmarshalTo(dfp); err != nil {
				t.Fatal(err)
			}
			dfp.DnsCacheConfig.ResolvedAddressFilter = nil
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: (&builder{}).any(dfp)}
			return l
		}(), "has no resolved_address_filter"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Validate(c.flavor, c.res)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want it to contain %q", err, c.want)
			}
		})
	}
}
