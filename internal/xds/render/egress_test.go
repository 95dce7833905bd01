package render

import (
	"net/netip"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// egressPolicies are one Egress per kind of port, all for bookbuyer.
const egressPolicies = `
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: feed-read}
spec: {matches: [{name: feed, pathRegex: "/feed/.*", methods: [GET, HEAD]}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: tls}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: tcp}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [mongo.k8s.com]
  ports: [{number: 27017, protocol: tcp}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: tcp-originate}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [db.example.net]
  ports: [{number: 5432, protocol: tcp, targetPort: 15432, originateTLS: true}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: http}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [httpbin.org]
  ports: [{number: 80, protocol: http}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: http-originate}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [newsfeed.news.com]
  ports: [{number: 80, protocol: http, targetPort: 443, originateTLS: true}]
  matches: [{kind: HTTPRouteGroup, name: feed-read}]
`

// egressMesh is the bookstore mesh with egressPolicies applied.
func egressMesh(t *testing.T) Mesh {
	t.Helper()
	s := bookstoreSpec(t, false)
	applyYAML(t, s, egressPolicies)
	return meshOf(s.Snapshot(), bookstoreEndpoints(t))
}

// withPrefix keeps the listeners, routes and clusters whose names start
// with prefix.
func withPrefix(r resources, prefix string) resources {
	keep := func(ms []proto.Message) []proto.Message {
		var out []proto.Message
		for _, m := range ms {
			if _, name := kindAndName(m); strings.HasPrefix(name, prefix) {
				out = append(out, m)
			}
		}
		return out
	}
	return resources{Listeners: keep(r.Listeners), Routes: keep(r.Routes), Clusters: keep(r.Clusters)}
}

// TestEgressGolden renders bookbuyer's proxy, validates its whole set and
// compares the egress resources of each kind of port with its golden file.
func TestEgressGolden(t *testing.T) {
	m := egressMesh(t)
	p := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")}
	r := renderAll(t, m, p)
	if err := Validate(Envoy, r.all()...); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for kind, host := range map[string]string{
		"tls": "api.github.com", "tcp": "mongo.k8s.com", "tcp-originate": "db.example.net",
		"http": "httpbin.org", "http-originate": "newsfeed.news.com",
	} {
		t.Run(kind, func(t *testing.T) {
			got := goldenJSON(t, withPrefix(r, "egress|"+host+"|"))
			compareGolden(t, "egress-"+kind, got)
		})
	}
}

// TestEgressOnlyForSources: a proxy whose service account no Egress lists
// gets no egress resources, nor does a proxyless gRPC client.
func TestEgressOnlyForSources(t *testing.T) {
	m := egressMesh(t)
	for _, p := range []Proxy{
		{Service: svc("bookthief"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.3")},
		{Service: svc("bookstore-v1"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.4")},
		{Service: svc("bookbuyer"), Flavor: GRPC, Address: netip.MustParseAddr("10.0.0.2")},
	} {
		r := renderAll(t, m, p)
		if err := Validate(p.Flavor, r.all()...); err != nil {
			t.Errorf("%s/%s: Validate: %v", p.Service, p.Flavor, err)
		}
		if eg := withPrefix(r, "egress|"); len(eg.all()) != 0 {
			t.Errorf("%s/%s got egress resources: %v", p.Service, p.Flavor, eg.all())
		}
	}
	// And bookbuyer's inputs change when an Egress does.
	buyer := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")}
	before, err := InputsOf(meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t)), buyer)
	if err != nil {
		t.Fatal(err)
	}
	after, err := InputsOf(m, buyer)
	if err != nil {
		t.Fatal(err)
	}
	if before.Equal(after) {
		t.Error("bookbuyer's Inputs are equal with and without Egresses: its configuration would not be rendered again")
	}
}

// TestValidateEgressClusters: the validator's rules for what egress adds.
func TestValidateEgressClusters(t *testing.T) {
	m := egressMesh(t)
	cs, err := Clusters(m, Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	var tls *clusterv3.Cluster
	for _, c := range cs {
		if c.GetName() == "egress|db.example.net|15432|tls" {
			tls = c
		}
	}
	if tls == nil {
		t.Fatal("no TLS-originating egress cluster")
	}
	for name, c := range map[string]struct {
		flavor Flavor
		edit   func(c *clusterv3.Cluster)
		want   string
	}{
		"grpc":        {GRPC, func(*clusterv3.Cluster) {}, "LOGICAL_DNS cluster: rendered for Envoy's egress only"},
		"no endpoint": {Envoy, func(c *clusterv3.Cluster) { c.LoadAssignment.Endpoints = nil }, "LOGICAL_DNS cluster needs exactly one endpoint"},
		"strict dns": {Envoy, func(c *clusterv3.Cluster) {
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
		}, "want EDS, STATIC, LOGICAL_DNS or a dynamic forward proxy"},
		"no system roots": {Envoy, func(c *clusterv3.Cluster) {
			c.TransportSocket = (&builder{}).transportSocket(upstreamTLSWithoutRoots())
		}, "Envoy TLS must take its certificate and CA by SDS"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := proto.Clone(tls).(*clusterv3.Cluster)
			c.edit(bad)
			if err := Validate(c.flavor, bad); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func upstreamTLSWithoutRoots() proto.Message {
	return &tlsv3.UpstreamTlsContext{Sni: "db.example.net", CommonTlsContext: &tlsv3.CommonTlsContext{}}
}
