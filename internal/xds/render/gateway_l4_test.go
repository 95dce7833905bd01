package render

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// TestGatewayL4ProxyGolden renders the two gateway proxies of
// testdata/gateway-l4.yaml: tcp-edge (TCP listeners: weighted tcp_proxy,
// a backend the gateway may not call left out, a listener without routes
// refusing) and tls-edge (TLS Passthrough chains by SNI, the most specific
// listener winning a name, and a Terminate chain); every resource
// validated with every Any unpacked.
func TestGatewayL4ProxyGolden(t *testing.T) {
	m := l4Mesh(t)
	for _, gw := range []string{"tcp-edge", "tls-edge"} {
		t.Run(gw, func(t *testing.T) {
			r := renderAll(t, m, Proxy{Service: svc(gw), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
			if err := Validate(Gateway, r.all()...); err != nil {
				t.Errorf("Validate: %v", err)
			}
			checkGolden(t, "gateway-proxy-"+gw, goldenJSON(t, r))
			for _, c := range r.Clusters {
				if strings.Contains(c.(interface{ GetName() string }).GetName(), "blocked") {
					t.Errorf("cluster %v: the gateway may not call blocked", c)
				}
			}
		})
	}
}

func l4Mesh(t *testing.T) Mesh {
	t.Helper()
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-l4.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i, n := range []string{"db", "db-replica", "blocked", "shop", "app"} {
		eps[svc(n)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 3, 0, byte(i + 1)}), Port: 5432, Provider: "static"}}
	}
	return meshOf(s.Snapshot(), eps)
}

// TestGatewayL4Chains checks what the goldens show, by name: which
// clusters each TCP and TLS chain forwards to, with which SNI names and
// whether it terminates TLS.
func TestGatewayL4Chains(t *testing.T) {
	m := l4Mesh(t)
	got := map[string]string{}
	for _, gw := range []string{"tcp-edge", "tls-edge"} {
		ls, err := Listeners(m, Proxy{Service: svc(gw), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			for _, fc := range l.GetFilterChains() {
				var tp tcpproxyv3.TcpProxy
				if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&tp); err != nil {
					t.Fatal(err)
				}
				to := tp.GetCluster()
				for _, w := range tp.GetWeightedClusters().GetClusters() {
					to += fmt.Sprintf("%s=%d ", w.GetName(), w.GetWeight())
				}
				desc := strings.TrimSpace(to) + " sni=" + strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")
				if fc.GetTransportSocket() != nil {
					desc += " terminate"
				}
				got[l.GetName()+" "+fc.GetName()] = desc
			}
		}
	}
	want := map[string]string{
		"gateway|default/tcp-edge|5432 pg":                        "default/db=80 default/db-replica=20 sni=",
		"gateway|default/tcp-edge|7000 idle":                      GatewayRefuseCluster + " sni=",
		"gateway|default/tls-edge|443 app|app.example.com":        "default/app sni=app.example.com",
		"gateway|default/tls-edge|443 any|*.example.com":          "default/shop sni=*.example.com",
		"gateway|default/tls-edge|9443 secure|secure.example.com": "default/app sni=secure.example.com terminate",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chains (-want +got):\n%s", diff)
	}
}

// TestGatewayL4Backend checks the backend's side: the inbound listener of
// db's tcp port terminates mesh mTLS, its network RBAC admits the
// gateway's identity (the TrafficTarget from tcp-edge), and it forwards
// the bytes to the application.
func TestGatewayL4Backend(t *testing.T) {
	m := l4Mesh(t)
	ls, err := Listeners(m, Proxy{Service: svc("db"), Flavor: Envoy, Address: netip.MustParseAddr("10.3.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	var inbound string
	for _, l := range ls {
		if l.GetName() == InboundName(svc("db"), 5432) {
			b, err := protojson.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			inbound = string(b)
		}
	}
	for _, want := range []string{
		`"requireClientCertificate":true`,
		"spiffe://" + trustDomain + "/ns/default/sa/tcp-edge",
		`"cluster":"` + LocalClusterName(svc("db"), 5432) + `"`,
	} {
		if !strings.Contains(inbound, want) {
			t.Errorf("inbound listener of db:5432 lacks %s:\n%s", want, inbound)
		}
	}
}
