package agenttest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
)

// TestFakeClusters: the stand-in's /clusters is Envoy's, in both formats,
// and what the agent reads of the JSON is the hosts the test ejected.
func TestFakeClusters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clusters.json")
	t.Setenv(FakeEnvoyClustersEnv, path)
	addr := &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 15128}}}}
	lb := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}
	xds := &clusterv3.Cluster{Name: "osm-xds", LoadAssignment: &endpointv3.ClusterLoadAssignment{
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{lb}}}}}
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{xds}}}
	srv := httptest.NewServer(serveClusters(b))
	defer srv.Close()
	get := func(q string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/clusters" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/clusters%s: %s: %s", q, resp.Status, data)
		}
		return string(data)
	}

	// No file yet: the bootstrap's cluster alone, healthy.
	if got := get(""); !strings.Contains(got, "osm-xds::added_via_api::false\n") || !strings.Contains(got, "osm-xds::127.0.0.1:15128::health_flags::healthy\n") {
		t.Errorf("/clusters without CDS clusters:\n%s\nwant the static cluster's host, healthy", got)
	}
	if err := WriteFakeClusters(path, []FakeCluster{{Name: "shop/db", Hosts: []FakeHost{{Address: "10.0.0.1:5432"}, {Address: "10.0.0.3:5432", Ejected: true}, {Address: "10.0.0.2:5432", Ejected: true}}}}); err != nil {
		t.Fatal(err)
	}
	text := get("")
	for _, line := range []string{"shop/db::added_via_api::true", "shop/db::10.0.0.1:5432::health_flags::healthy", "shop/db::10.0.0.2:5432::health_flags::/failed_outlier_check", "shop/db::default_priority::max_connections::1024"} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("/clusters has no line %q:\n%s", line, text)
		}
	}
	got, err := envoy.EjectedHosts([]byte(get("?format=json")))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]string{"shop/db": {"10.0.0.2:5432", "10.0.0.3:5432"}}; !cmp.Equal(got, want) {
		t.Errorf("ejected hosts = %v, want %v", got, want)
	}
}
