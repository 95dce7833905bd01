package render

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// splitWithMatches limits the bookstore example's TrafficSplit to the
// HTTPRouteGroup bookstore-service-routes (GET paths, which no gRPC call
// matches).
const splitWithMatches = `apiVersion: split.smi-spec.io/v1alpha4
kind: TrafficSplit
metadata: {name: bookstore-split, namespace: default}
spec:
  service: bookstore
  matches: [{kind: HTTPRouteGroup, name: bookstore-service-routes}]
  backends: [{service: bookstore-v1, weight: 80}, {service: bookstore-v2, weight: 20}]
`

func splitSpec(t *testing.T, matches bool) *spec.Snapshot {
	t.Helper()
	s := bookstoreSpec(t, false)
	if matches {
		applyYAML(t, s, splitWithMatches)
	}
	return s.Snapshot()
}

// endpointsWithout is the example's endpoints without those of the named
// services.
func endpointsWithout(t *testing.T, names ...string) map[mesh.MeshService][]mesh.Endpoint {
	t.Helper()
	eps := maps.Clone(bookstoreEndpoints(t))
	for _, n := range names {
		delete(eps, svc(n))
	}
	return eps
}

// splitMatchesEmptyRoot is the mesh the issue describes: the split has
// matches, and the machines enrolled as bookstore-v1 and bookstore-v2, so
// the root bookstore has no endpoints of its own.
func splitMatchesEmptyRoot(t *testing.T) Mesh {
	t.Helper()
	return meshOf(splitSpec(t, true), endpointsWithout(t, "bookstore"))
}

// routeSummary describes each route of the configuration named name as
// "match -> action": the match's name (or its prefix) and the cluster, or
// the weighted clusters, without the gRPC flavour's cluster suffix.
func routeSummary(t *testing.T, rs []*routev3.RouteConfiguration, name string) []string {
	t.Helper()
	for _, rc := range rs {
		if rc.GetName() != name {
			continue
		}
		var out []string
		for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
			match := r.GetName()
			if match == "" {
				match = r.GetMatch().GetPrefix()
			}
			a := r.GetRoute()
			action := strings.TrimSuffix(a.GetCluster(), "|grpc")
			if wc := a.GetWeightedClusters(); wc != nil {
				var ws []string
				for _, c := range wc.GetClusters() {
					ws = append(ws, fmt.Sprintf("%s:%d", strings.TrimSuffix(c.GetName(), "|grpc"), c.GetWeight().GetValue()))
				}
				action = strings.Join(ws, ",")
			}
			out = append(out, match+" -> "+action)
		}
		return out
	}
	var names []string
	for _, rc := range rs {
		names = append(names, rc.GetName())
	}
	t.Fatalf("no route configuration %q among %v", name, names)
	return nil
}

// TestSplitRootWithoutEndpoints: the traffic to a TrafficSplit's root goes
// to its backends when the root has no endpoints of its own (matched by the
// split's route groups or not, so gRPC clients, which never match :method,
// and Envoy agree), and a backend without endpoints takes no share while
// another has some. Both flavours, with and without a shared Memo.
func TestSplitRootWithoutEndpoints(t *testing.T) {
	const (
		split  = "default/bookstore-v1:80,default/bookstore-v2:20"
		onlyV1 = "default/bookstore-v1:80"
		root   = "default/bookstore"
	)
	cases := []struct {
		name    string
		matches bool
		without []string
		// want is bookbuyer's routes to bookstore for Envoy and gRPC.
		wantEnvoy, wantGRPC []string
		// wantRoot says whether bookbuyer receives the root's cluster.
		wantRoot bool
	}{
		{"root served, no matches: the split takes all", false, nil,
			[]string{"/ -> " + split}, []string{"/ -> " + split}, false},
		{"root served, matches: the rest to the root (gRPC never matches GET)", true, nil,
			[]string{"bookstore-service-routes/books -> " + split, "bookstore-service-routes/buy-a-book -> " + split, "/ -> " + root},
			[]string{"/ -> " + root}, true},
		{"root empty, matches: all to the backends", true, []string{"bookstore"},
			[]string{"/ -> " + split}, []string{"/ -> " + split}, false},
		{"root empty, no matches", false, []string{"bookstore"},
			[]string{"/ -> " + split}, []string{"/ -> " + split}, false},
		{"root empty, a backend empty: the other takes all", true, []string{"bookstore", "bookstore-v2"},
			[]string{"/ -> " + onlyV1}, []string{"/ -> " + onlyV1}, false},
		{"root served, a backend empty", false, []string{"bookstore-v2"},
			[]string{"/ -> " + onlyV1}, []string{"/ -> " + onlyV1}, false},
		{"nobody serves: the weights stay", true, []string{"bookstore", "bookstore-v1", "bookstore-v2"},
			[]string{"/ -> " + split}, []string{"/ -> " + split}, false},
	}
	specs := map[bool]*spec.Snapshot{false: splitSpec(t, false), true: splitSpec(t, true)}
	memo := NewMemo() // shared by every case in turn, as the publisher's is across Views
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := meshOf(specs[tc.matches], endpointsWithout(t, tc.without...))
			for _, f := range []Flavor{Envoy, GRPC} {
				p := Proxy{Service: svc("bookbuyer"), Flavor: f, Address: netip.MustParseAddr("127.0.10.1")}
				rs, err := Routes(m, p)
				if err != nil {
					t.Fatal(err)
				}
				name := "outbound|default/bookstore|14001"
				want := tc.wantEnvoy
				if f == GRPC {
					name, want = name+"|grpc", tc.wantGRPC
				}
				if diff := cmp.Diff(want, routeSummary(t, rs, name)); diff != "" {
					t.Errorf("%s: routes to bookstore (-want +got):\n%s", f, diff)
				}
				checkTotalWeights(t, f, rs)
				deps, err := Dependencies(m, p)
				if err != nil {
					t.Fatal(err)
				}
				gotRoot := false
				for _, d := range deps {
					gotRoot = gotRoot || d == svc("bookstore")
				}
				if gotRoot != tc.wantRoot {
					t.Errorf("%s: bookbuyer receives bookstore's cluster and endpoints: %v, want %v (deps %v)", f, gotRoot, tc.wantRoot, deps)
				}
				r := renderAll(t, m, p)
				if err := Validate(f, r.all()...); err != nil {
					t.Errorf("%s: Validate: %v", f, err)
				}
				memoised := renderAll(t, Mesh{View: m.View, Memo: memo}, p)
				if !slicesEqual(r.all(), memoised.all()) {
					t.Errorf("%s: rendering with a Memo used for the previous cases' Views differs from rendering without", f)
				}
			}
		})
	}
}

func slicesEqual(a, b []proto.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// checkTotalWeights: gRPC C-core 1.51 NACKs weighted clusters whose
// weights do not sum to total_weight (100 when unset), so the gRPC flavour
// sets it to the sum; Envoy's output leaves the deprecated field out.
func checkTotalWeights(t *testing.T, f Flavor, rs []*routev3.RouteConfiguration) {
	t.Helper()
	for _, rc := range rs {
		for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
			wc := r.GetRoute().GetWeightedClusters()
			if wc == nil {
				continue
			}
			var sum uint32
			for _, c := range wc.GetClusters() {
				sum += c.GetWeight().GetValue()
			}
			switch {
			case f == GRPC && wc.GetTotalWeight().GetValue() != sum:
				t.Errorf("%s: %s: total_weight %v, want the sum of the weights, %d", f, rc.GetName(), wc.GetTotalWeight(), sum)
			case f == Envoy && wc.GetTotalWeight() != nil:
				t.Errorf("%s: %s: total_weight set (deprecated in Envoy)", f, rc.GetName())
			}
		}
	}
}
