package render

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/spec"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

type goldenCase struct {
	name       string
	service    string
	flavor     Flavor
	permissive bool
	// emptyRoot renders the mesh of splitMatchesEmptyRoot: the
	// TrafficSplit limited to a route group, its root without endpoints.
	emptyRoot bool
	// resilience adds testdata/resilience.yaml's failure-handling
	// policies to the bookstore mesh.
	resilience bool
}

func goldenCases() []goldenCase {
	var cases []goldenCase
	for _, permissive := range []bool{false, true} {
		mode := "smi"
		if permissive {
			mode = "permissive"
		}
		for _, s := range []string{"bookbuyer", "bookthief", "bookstore-v1", "bookwarehouse"} {
			cases = append(cases, goldenCase{name: mode + "-envoy-" + s, service: s, flavor: Envoy, permissive: permissive})
		}
	}
	for _, s := range []string{"bookbuyer", "bookstore-v1"} {
		cases = append(cases, goldenCase{name: "smi-grpc-" + s, service: s, flavor: GRPC})
	}
	for _, f := range []Flavor{Envoy, GRPC} {
		cases = append(cases, goldenCase{name: "split-matches-empty-root-" + f.String() + "-bookbuyer", service: "bookbuyer", flavor: f, emptyRoot: true})
	}
	for _, f := range []Flavor{Envoy, GRPC} {
		for _, s := range []string{"bookbuyer", "bookstore-v1", "bookwarehouse"} {
			cases = append(cases, goldenCase{name: "resilience-" + f.String() + "-" + s, service: s, flavor: f, resilience: true})
		}
	}
	return cases
}

// proxyAddr is the service's first endpoint address in endpoints.yaml.
func proxyAddr(t *testing.T, eps map[string][]netip.Addr, s string) netip.Addr {
	t.Helper()
	if len(eps[s]) == 0 {
		t.Fatalf("no endpoint for %s in endpoints.yaml", s)
	}
	return eps[s][0]
}

func TestGolden(t *testing.T) {
	eps := bookstoreEndpoints(t)
	addrs := map[string][]netip.Addr{}
	for s, es := range eps {
		for _, e := range es {
			addrs[s.Name] = append(addrs[s.Name], e.IP)
		}
	}
	specs := map[bool]Mesh{
		false: meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		true:  meshOf(bookstoreSpec(t, true).Snapshot(), eps),
	}
	emptyRoot := splitMatchesEmptyRoot(t)
	withPolicies := meshOf(resilienceSpec(t).Snapshot(), eps)
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := Proxy{Service: svc(tc.service), Flavor: tc.flavor, Address: proxyAddr(t, addrs, tc.service)}
			m := specs[tc.permissive]
			if tc.emptyRoot {
				m = emptyRoot
			}
			if tc.resilience {
				m = withPolicies
			}
			r := renderAll(t, m, p)
			if err := Validate(tc.flavor, r.all()...); err != nil {
				t.Errorf("Validate: %v", err)
			}
			got := goldenJSON(t, r)
			compareGolden(t, tc.name, got)
		})
	}
}

// TestSharedResourcesAreIdentical renders every service's proxy (two proxies
// for bookstore-v1, on different addresses) and checks that every resource
// name maps to the same bytes for every proxy that receives it, except the
// inbound listeners, which bind the proxy's own address.
func TestSharedResourcesAreIdentical(t *testing.T) {
	eps := bookstoreEndpoints(t)
	for _, permissive := range []bool{false, true} {
		m := meshOf(bookstoreSpec(t, permissive).Snapshot(), eps)
		for _, f := range []Flavor{Envoy, GRPC} {
			t.Run(fmt.Sprintf("permissive=%v/%s", permissive, f), func(t *testing.T) {
				seen := map[string][]byte{}
				owner := map[string]string{}
				shared := 0
				proxies := []Proxy{{Service: svc("bookstore-v1"), Flavor: f, Address: netip.MustParseAddr("10.0.0.1")}}
				for _, info := range m.Spec().Services() {
					proxies = append(proxies, Proxy{Service: info.Service, Flavor: f, Address: netip.MustParseAddr("10.0.0.2")})
				}
				for _, p := range proxies {
					r := renderAll(t, m, p)
					if err := Validate(f, r.all()...); err != nil {
						t.Errorf("proxy of %s: Validate: %v", p.Service, err)
					}
					for _, msg := range r.all() {
						key := fmt.Sprintf("%T %s", msg, labelOf(msg))
						if strings.Contains(key, `"inbound|`) && strings.HasPrefix(key, "*listenerv3") || strings.Contains(key, "grpc/server?") {
							continue
						}
						b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
						if err != nil {
							t.Fatal(err)
						}
						if prev, ok := seen[key]; ok {
							shared++
							if !bytes.Equal(prev, b) {
								t.Errorf("%s differs between the proxies of %s and %s", key, owner[key], p.Service)
							}
							continue
						}
						seen[key], owner[key] = b, p.Service.String()
					}
				}
				if shared == 0 {
					t.Error("no resource was shared between proxies; the check checked nothing")
				}
			})
		}
	}
}

// resilienceSpec is the bookstore mesh with testdata/resilience.yaml's
// policies.
func resilienceSpec(t *testing.T) *spec.Spec {
	t.Helper()
	s := bookstoreSpec(t, false)
	b, err := os.ReadFile(filepath.Join("testdata", "resilience.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, string(b))
	return s
}

// compareGolden compares got with testdata/<name>.golden, or writes it
// there with -update.
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
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
