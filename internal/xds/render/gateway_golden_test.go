package render

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// checkGolden compares got with testdata/name.golden (rewritten with
// -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (-want +got; go test -run %s -update if intended):\n%s", path, t.Name(), cmp.Diff(string(want), string(got)))
	}
}

func readFile(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGatewayGolden renders Gateway API routes: the bookstore in Gateway
// API form (examples/bookstore/gateway-api) for bookbuyer, and every match
// and filter kind (testdata/gateway-features.yaml) for a client, in both
// flavours; every resource validated with every Any unpacked.
func TestGatewayGolden(t *testing.T) {
	eps := bookstoreEndpoints(t)
	bookstore, err := newSpecFromYAML(t, readFile(t, "..", "..", "..", "examples", "bookstore", "gateway-api", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	features, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-features.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	featureEPs := map[mesh.MeshService][]mesh.Endpoint{}
	for i, s := range []string{"client", "echo", "echo-v1", "echo-v2", "mirror"} {
		featureEPs[svc(s)] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: 80, Provider: "static"}}
	}
	for _, tc := range []struct {
		name    string
		m       Mesh
		service string
		addr    netip.Addr
	}{
		{"gateway-envoy-bookbuyer", meshOf(bookstore.Snapshot(), eps), "bookbuyer", eps[svc("bookbuyer")][0].IP},
		{"gateway-grpc-bookbuyer", meshOf(bookstore.Snapshot(), eps), "bookbuyer", eps[svc("bookbuyer")][0].IP},
		{"gateway-envoy-features", meshOf(features.Snapshot(), featureEPs), "client", netip.MustParseAddr("10.1.0.1")},
		{"gateway-grpc-features", meshOf(features.Snapshot(), featureEPs), "client", netip.MustParseAddr("10.1.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Envoy
			if strings.Contains(tc.name, "-grpc-") {
				f = GRPC
			}
			r := renderAll(t, tc.m, Proxy{Service: svc(tc.service), Flavor: f, Address: tc.addr})
			if err := Validate(f, r.all()...); err != nil {
				t.Errorf("Validate: %v", err)
			}
			checkGolden(t, tc.name, goldenJSON(t, r))
		})
	}
}
