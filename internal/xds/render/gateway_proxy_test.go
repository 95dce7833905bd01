package render

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// TestGatewayProxyGolden renders the two gateway proxies of
// testdata/gateway-proxy.yaml, one per listener kind: HTTP (web: two
// ports, virtual hosts by host name) and HTTPS (secure: TLS terminated
// from certificate files, filter chains by SNI, a GRPCRoute); every
// resource validated with every Any unpacked.
func TestGatewayProxyGolden(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	eps := map[mesh.MeshService][]mesh.Endpoint{}
	for i, n := range []string{"echo-v1", "echo-v2", "grpc-echo"} {
		eps[svc(n)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), Port: 80, Provider: "static"}}
	}
	m := meshOf(s.Snapshot(), eps)
	for _, gw := range []string{"web", "secure"} {
		t.Run(gw, func(t *testing.T) {
			r := renderAll(t, m, Proxy{Service: svc(gw), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
			if err := Validate(Gateway, r.all()...); err != nil {
				t.Errorf("Validate: %v", err)
			}
			checkGolden(t, "gateway-proxy-"+gw, goldenJSON(t, r))
			// echo-v2 is not allowed by any TrafficTarget from the
			// gateways: no cluster, and its rule answers 403.
			for _, c := range r.Clusters {
				if strings.Contains(c.(interface{ GetName() string }).GetName(), "echo-v2") {
					t.Errorf("cluster %v: the gateway may not call echo-v2", c)
				}
			}
		})
	}
}

// TestGatewayProxyWithoutGateway: a machine enrolled as a Gateway that is
// not in the specification gets an error naming the fix.
func TestGatewayProxyWithoutGateway(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Listeners(meshOf(s.Snapshot(), nil), Proxy{Service: svc("nope"), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10")})
	if err == nil || !strings.Contains(err.Error(), `no Gateway "nope" in namespace "default"`) {
		t.Errorf("Listeners: %v, want an error naming the missing Gateway", err)
	}
}

// TestGatewayProxyCertDir: a gateway machine's certificate directory (node
// metadata osm.gatewayCertDir) is where its HTTPS listeners read their
// certificate files; without one, spec.GatewayCertDir. Both validate.
func TestGatewayProxyCertDir(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{"", "/etc/osm/gateway-tls/default/"},
		{"/srv/gateway-tls", "/srv/gateway-tls/default/"},
	} {
		r := renderAll(t, meshOf(s.Snapshot(), nil), Proxy{Service: svc("secure"), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10"), GatewayCertDir: tc.dir})
		if err := Validate(Gateway, r.all()...); err != nil {
			t.Errorf("dir %q: Validate: %v", tc.dir, err)
		}
		files := 0
		for _, l := range r.Listeners {
			for _, fc := range l.(*listenerv3.Listener).GetFilterChains() {
				var tc3 tlsv3.DownstreamTlsContext
				if fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tc3) != nil {
					continue
				}
				for _, c := range tc3.GetCommonTlsContext().GetTlsCertificates() {
					for _, f := range []string{c.GetCertificateChain().GetFilename(), c.GetPrivateKey().GetFilename(), c.GetWatchedDirectory().GetPath() + "/"} {
						files++
						if !strings.HasPrefix(f, tc.want) {
							t.Errorf("dir %q: file %s, want it under %s", tc.dir, f, tc.want)
						}
					}
				}
			}
		}
		if files == 0 {
			t.Errorf("dir %q: no certificate files in the HTTPS listeners", tc.dir)
		}
	}
}

// TestGatewayProxyUnusableCertificates: the Gateway listeners whose
// certificate files the machine reported unusable are left out of its
// port's listener (Envoy would reject the whole listener for want of the
// files); the others on the port stay, and a port with none left has no
// listener. What remains validates.
func TestGatewayProxyUnusableCertificates(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		unusable []string
		chains   []string // the filter chains of port 443's listener; nil: no listener
	}{
		{nil, []string{"shop", "api"}},
		{[]string{"shop"}, []string{"api"}},
		{[]string{"api", "shop"}, nil},
	} {
		r := renderAll(t, meshOf(s.Snapshot(), nil), Proxy{Service: svc("secure"), Flavor: Gateway, Address: netip.MustParseAddr("203.0.113.10"), UnusableCertificates: tc.unusable})
		if err := Validate(Gateway, r.all()...); err != nil {
			t.Errorf("unusable %q: Validate: %v", tc.unusable, err)
		}
		var chains []string
		for _, l := range r.Listeners {
			for _, fc := range l.(*listenerv3.Listener).GetFilterChains() {
				chains = append(chains, fc.GetName())
			}
		}
		if !slices.Equal(chains, tc.chains) {
			t.Errorf("unusable %q: filter chains %q, want %q", tc.unusable, chains, tc.chains)
		}
	}
}
