package render

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// messageLoadAssignment builds, as messages, the load assignment
// EncodeClusterLoadAssignment documents: the reference its bytes are
// compared with.
func messageLoadAssignment(name string, eps []mesh.Endpoint) *endpointv3.ClusterLoadAssignment {
	var addrs []netip.AddrPort
	for _, e := range eps {
		if e.IP.IsValid() && e.Port != 0 {
			addrs = append(addrs, e.AddrPort())
		}
	}
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	addrs = slices.Compact(addrs)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(addrs) > 0 {
		loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(1)}
		for _, ap := range addrs {
			loc.LbEndpoints = append(loc.LbEndpoints, lbEndpoint(ap))
		}
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{loc}
	}
	return cla
}

// TestEncodeClusterLoadAssignment: the encoder writes exactly the bytes
// protobuf-go's deterministic marshal gives for the load assignment
// built as messages, for endpoint sets that exercise every length
// (names and localities past one and two varint bytes, ports past 127
// and 16383, IPv4, IPv6 and zoned IPv6 addresses), duplicates and
// endpoints it must leave out; and what it writes passes validation.
func TestEncodeClusterLoadAssignment(t *testing.T) {
	ep := func(s string) mesh.Endpoint {
		ap := netip.MustParseAddrPort(s)
		return mesh.Endpoint{IP: ap.Addr(), Port: ap.Port()}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randomEndpoints := func(n int) []mesh.Endpoint {
		var out []mesh.Endpoint
		for range n {
			var e mesh.Endpoint
			switch rng.IntN(4) {
			case 0:
				e.IP = netip.AddrFrom4([4]byte{10, byte(rng.IntN(3)), byte(rng.IntN(256)), byte(rng.IntN(256))})
			case 1:
				var a [16]byte
				for i := range a {
					a[i] = byte(rng.IntN(256))
				}
				e.IP = netip.AddrFrom16(a)
			case 2:
				e.IP = netip.AddrFrom16([16]byte{0xfe, 0x80, 15: byte(rng.IntN(256))}).WithZone(fmt.Sprintf("eth%d", rng.IntN(3)))
			default:
				e.IP = netip.AddrFrom4([4]byte{192, 168, 0, byte(rng.IntN(4))}) // duplicates
			}
			e.Port = []uint16{0, 1, 127, 128, 8080, 16383, 16384, 65535}[rng.IntN(8)]
			out = append(out, e)
		}
		return out
	}
	cases := []struct {
		name string
		svc  mesh.MeshService
		eps  []mesh.Endpoint
	}{
		{"no endpoints", mesh.MeshService{Namespace: "bench", Name: "none"}, nil},
		{"only unusable endpoints", mesh.MeshService{Namespace: "bench", Name: "unusable"}, []mesh.Endpoint{{Port: 8080}, {IP: netip.MustParseAddr("10.0.0.1")}}},
		{"one", mesh.MeshService{Namespace: "bench", Name: "one"}, []mesh.Endpoint{ep("10.0.0.1:8080")}},
		{"duplicates and order", mesh.MeshService{Namespace: "bench", Name: "dups"}, []mesh.Endpoint{ep("10.0.0.2:80"), ep("10.0.0.1:80"), ep("10.0.0.2:80"), ep("10.0.0.1:79")}},
		{"IPv6 and zones", mesh.MeshService{Namespace: "bench", Name: "v6"}, []mesh.Endpoint{ep("[2001:db8::1]:443"), ep("[fe80::1%eth0]:443"), ep("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%a-long-zone-name]:65535"), ep("[::ffff:10.0.0.1]:1")}},
		{"long name", mesh.MeshService{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 200)}, []mesh.Endpoint{ep("10.0.0.1:8080")}},
		{"ten", mesh.MeshService{Namespace: "bench", Name: "ten"}, randomEndpoints(10)},
		{"locality past 127 bytes", mesh.MeshService{Namespace: "bench", Name: "some"}, randomEndpoints(40)},
		{"locality past 16383 bytes", mesh.MeshService{Namespace: "bench", Name: "many"}, randomEndpoints(2000)},
	}
	for range 50 {
		cases = append(cases, cases[len(cases)-3])
		cases[len(cases)-1].eps = randomEndpoints(rng.IntN(60))
	}
	for _, tc := range cases {
		m := meshIn(nil, map[mesh.MeshService][]mesh.Endpoint{tc.svc: tc.eps}, trustDomain)
		got, err := EncodeClusterLoadAssignment(nil, m, tc.svc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ref := messageLoadAssignment(EDSName(tc.svc), m.Endpoints(tc.svc))
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: encoded\n%x\nwant (protobuf-go)\n%x", tc.name, got, want)
		}
		// Appending keeps what b held.
		if prefixed, _ := EncodeClusterLoadAssignment([]byte("kept"), m, tc.svc); !bytes.Equal(prefixed, append([]byte("kept"), want...)) {
			t.Errorf("%s: appending to a buffer lost or changed its content", tc.name)
		}
		cla, err := ClusterLoadAssignment(m, tc.svc)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(cla, ref) {
			t.Errorf("%s: ClusterLoadAssignment = %v, want %v", tc.name, cla, ref)
		}
		if err := Validate(Envoy, cla); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
