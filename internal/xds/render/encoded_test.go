package render

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

// TestClusterResourcesStampEqualsBuilt: for every proxy of the golden
// meshes in both flavours, ClusterResources gives the clusters Clusters
// builds, byte for byte (the EDS clusters stamped, written once per
// upstream and flavour, and the local clusters), with the references the
// Validator finds in the built ones; every EDS and local cluster is
// stamped, and the sets validate.
func TestClusterResourcesStampEqualsBuilt(t *testing.T) {
	eps := bookstoreEndpoints(t)
	meshes := map[string]Mesh{
		"smi":                meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive":         meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"split-matches-root": splitMatchesEmptyRoot(t),
		"policy":             policyMesh(t),
		"tcp-only":           tcpOnlyMesh(t),
	}
	shapes := map[shapeKey]bool{}
	for name, m := range meshes {
		for _, f := range []Flavor{Envoy, GRPC} {
			m := m
			m.Memo = NewMemo()
			for _, info := range m.Spec().Services() {
				p := Proxy{Service: info.Service, Flavor: f, Address: netip.MustParseAddr("10.0.0.2")}
				label := fmt.Sprintf("%s/%s/%s", name, f, info.Service)
				built, err := Clusters(Mesh{View: m.View}, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				msgs, enc, err := ClusterResources(m, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				byName := map[string]*clusterv3.Cluster{}
				stampable := 0 // EDS and local clusters
				for _, c := range built {
					byName[c.GetName()] = c
					if c.GetEdsClusterConfig() != nil || strings.HasPrefix(c.GetName(), "local|") {
						stampable++
					}
				}
				if len(enc) != stampable || len(msgs)+len(enc) != len(built) {
					t.Errorf("%s: %d clusters as messages and %d stamped; %d built, %d of them EDS or local", label, len(msgs), len(enc), len(built), stampable)
				}
				for _, c := range msgs {
					if want := byName[c.GetName()]; !proto.Equal(c, want) {
						t.Errorf("%s: cluster %s differs from the built one", label, c.GetName())
					}
				}
				var encoded []Encoded
				for _, e := range enc {
					want, ok := byName[e.Name]
					if !ok {
						t.Errorf("%s: stamped cluster %q was not built", label, e.Name)
						continue
					}
					wb, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
					if err != nil {
						t.Fatal(err)
					}
					if e.TypeURL != clusterType || !bytes.Equal(e.Bytes, wb) {
						t.Errorf("%s: stamped cluster %q (%s)\n%x\nbuilt\n%x", label, e.Name, e.TypeURL, e.Bytes, wb)
					}
					refs, errs := walkOne(f, want)
					if len(errs) > 0 {
						t.Errorf("%s: %v", label, errs[0].err())
					}
					var wantRefs []Ref
					for _, r := range refs {
						wantRefs = append(wantRefs, Ref{typeOfKind[r.kind], r.name})
					}
					if !slices.Equal(e.Refs, wantRefs) {
						t.Errorf("%s: stamped cluster %q references %v; the built one %v", label, e.Name, e.Refs, wantRefs)
					}
					encoded = append(encoded, e)
				}
				// The set validates with its EDS clusters stamped.
				r := renderAll(t, Mesh{View: m.View}, p)
				var rest []proto.Message
				for _, x := range r.all() {
					if c, ok := x.(*clusterv3.Cluster); ok && byName[c.GetName()] != nil && slices.ContainsFunc(enc, func(e Encoded) bool { return e.Name == c.GetName() }) {
						continue
					}
					rest = append(rest, x)
				}
				if err := NewValidator(f).ValidateSet(nil, encoded, rest...); err != nil {
					t.Errorf("%s: %v", label, err)
				}
				for k, sh := range m.Memo.shapes {
					if sh.err != nil {
						t.Errorf("%s: shape %v cannot be stamped: %v", label, k, sh.err)
					}
					shapes[k] = true
				}
				// Asked again, the Memo answers with the same bytes for an
				// upstream (a local cluster is its group's alone).
				_, again, _ := ClusterResources(m, p)
				for i := range again {
					if !strings.HasPrefix(enc[i].Name, "local|") && &again[i].Bytes[0] != &enc[i].Bytes[0] {
						t.Errorf("%s: cluster %q written again", label, enc[i].Name)
					}
				}
			}
		}
	}
	// EDS clusters for Envoy with and without HTTP and for gRPC (which
	// calls only HTTP upstreams); local clusters of HTTP, gRPC and TCP
	// ports, one shape per port.
	kinds := map[memoKind]int{}
	for k := range shapes {
		kinds[k.kind]++
	}
	if kinds[memoCluster] < 3 || kinds[memoLocalCluster] < 3 {
		t.Errorf("the meshes stamped %d shapes of EDS cluster (%v): too few to test the flavours and HTTP", len(shapes), shapes)
	}
}

// tcpOnlyMesh is a permissive mesh of two services, one with only a TCP
// port (its EDS clusters have no HTTP options, no ALPN).
func tcpOnlyMesh(t *testing.T) Mesh {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec: {traffic: {permissive: true}}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db, namespace: data}
spec: {ports: [{port: 5432, appProtocol: tcp}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: app, namespace: web}
spec: {serviceAccount: frontend, ports: [{port: 8080}]}
`)
	return meshOf(s.Snapshot(), map[mesh.MeshService][]mesh.Endpoint{
		{Namespace: "data", Name: "db"}: {{IP: netip.MustParseAddr("10.0.2.1"), Port: 5432}},
		{Namespace: "web", Name: "app"}: {{IP: netip.MustParseAddr("10.0.2.2"), Port: 8080}},
	})
}

// TestSharedListenerResourcesStampEqualsBuilt: for every Envoy proxy of
// the test meshes, SharedListenerResources gives the listeners
// SharedListeners builds, byte for byte, the outbound listeners of
// upstreams called directly stamped (with the references the Validator
// finds in the built ones), the rest (splits) built; and the sets
// validate with them.
func TestSharedListenerResourcesStampEqualsBuilt(t *testing.T) {
	eps := bookstoreEndpoints(t)
	meshes := map[string]Mesh{
		"smi":                meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive":         meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"split-matches-root": splitMatchesEmptyRoot(t),
		"policy":             policyMesh(t),
		"tcp-only":           tcpOnlyMesh(t),
	}
	stamped, built := 0, 0
	for name, m := range meshes {
		m.Memo = NewMemo()
		for _, info := range m.Spec().Services() {
			p := Proxy{Service: info.Service, Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.2")}
			label := fmt.Sprintf("%s/%s", name, info.Service)
			want, err := SharedListeners(Mesh{View: m.View}, p)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			msgs, enc, err := SharedListenerResources(m, p)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if len(msgs)+len(enc) != len(want) {
				t.Errorf("%s: %d listeners as messages and %d stamped; %d built", label, len(msgs), len(enc), len(want))
			}
			byName := map[string]proto.Message{}
			for _, l := range want {
				byName[l.GetName()] = l
			}
			for _, l := range msgs {
				if !proto.Equal(l, byName[l.GetName()]) {
					t.Errorf("%s: listener %s differs from the built one", label, l.GetName())
				}
				built++
			}
			var encoded []Encoded
			for _, e := range enc {
				w, ok := byName[e.Name]
				if !ok {
					t.Errorf("%s: stamped listener %q was not built", label, e.Name)
					continue
				}
				if wb := mustMarshal(t, w); e.TypeURL != listenerType || !bytes.Equal(e.Bytes, wb) {
					t.Errorf("%s: stamped listener %q\n%x\nbuilt\n%x", label, e.Name, e.Bytes, wb)
				}
				refs, _ := walkOne(Envoy, w)
				var wantRefs []Ref
				for _, r := range refs {
					wantRefs = append(wantRefs, Ref{typeOfKind[r.kind], r.name})
				}
				if !slices.Equal(e.Refs, wantRefs) {
					t.Errorf("%s: stamped listener %q references %v; the built one %v", label, e.Name, e.Refs, wantRefs)
				}
				encoded = append(encoded, e)
				stamped++
			}
			r := renderAll(t, Mesh{View: m.View}, p)
			var rest []proto.Message
			for _, x := range r.all() {
				if l, ok := x.(*listenerv3.Listener); ok && slices.ContainsFunc(enc, func(e Encoded) bool { return e.Name == l.GetName() }) {
					continue
				}
				rest = append(rest, x)
			}
			if err := NewValidator(Envoy).ValidateSet(nil, encoded, rest...); err != nil {
				t.Errorf("%s: %v", label, err)
			}
		}
	}
	if stamped == 0 || built == 0 {
		t.Errorf("%d outbound listeners stamped, %d built: the meshes no longer test both paths", stamped, built)
	}
}

// TestRouteResourcesStampEqualsBuilt: for every proxy of the test meshes
// in both flavours, RouteResources gives the route configurations Routes
// builds, byte for byte, the inbound ones and those of upstreams called
// directly stamped (with the references the Validator finds in the built
// ones), the rest (splits) built; and the sets validate with them.
func TestRouteResourcesStampEqualsBuilt(t *testing.T) {
	eps := bookstoreEndpoints(t)
	meshes := map[string]Mesh{
		"smi":                meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive":         meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"split-matches-root": splitMatchesEmptyRoot(t),
		"policy":             policyMesh(t),
		"tcp-only":           tcpOnlyMesh(t),
	}
	stamped, built := map[Flavor]int{}, 0
	for name, m := range meshes {
		for _, f := range []Flavor{Envoy, GRPC} {
			m := m
			m.Memo = NewMemo()
			for _, info := range m.Spec().Services() {
				p := Proxy{Service: info.Service, Flavor: f, Address: netip.MustParseAddr("10.0.0.2")}
				label := fmt.Sprintf("%s/%s/%s", name, f, info.Service)
				want, err := Routes(Mesh{View: m.View}, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				msgs, enc, err := RouteResources(m, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if len(msgs)+len(enc) != len(want) {
					t.Errorf("%s: %d route configurations as messages and %d stamped; %d built", label, len(msgs), len(enc), len(want))
				}
				byName := map[string]proto.Message{}
				for _, r := range want {
					byName[r.GetName()] = r
				}
				for _, r := range msgs {
					if !proto.Equal(r, byName[r.GetName()]) {
						t.Errorf("%s: route configuration %s differs from the built one", label, r.GetName())
					}
					built++
				}
				for _, e := range enc {
					w, ok := byName[e.Name]
					if !ok {
						t.Errorf("%s: stamped route configuration %q was not built", label, e.Name)
						continue
					}
					if wb := mustMarshal(t, w); e.TypeURL != routeType || !bytes.Equal(e.Bytes, wb) {
						t.Errorf("%s: stamped route configuration %q\n%x\nbuilt\n%x", label, e.Name, e.Bytes, wb)
					}
					refs, _ := walkOne(f, w)
					var wantRefs []Ref
					for _, r := range refs {
						wantRefs = append(wantRefs, Ref{typeOfKind[r.kind], r.name})
					}
					if !slices.Equal(e.Refs, wantRefs) {
						t.Errorf("%s: stamped route configuration %q references %v; the built one %v", label, e.Name, e.Refs, wantRefs)
					}
					stamped[f]++
				}
				r := renderAll(t, Mesh{View: m.View}, p)
				var rest []proto.Message
				for _, x := range r.all() {
					if rc, ok := x.(*routev3.RouteConfiguration); ok && slices.ContainsFunc(enc, func(e Encoded) bool { return e.Name == rc.GetName() }) {
						continue
					}
					rest = append(rest, x)
				}
				if err := NewValidator(f).ValidateSet(nil, enc, rest...); err != nil {
					t.Errorf("%s: %v", label, err)
				}
			}
		}
	}
	if stamped[Envoy] == 0 || stamped[GRPC] == 0 || built == 0 {
		t.Errorf("route configurations stamped %v, %d built: the meshes no longer test both paths and both flavours", stamped, built)
	}
}

// TestPerProxyListenerResourcesStampEqualsBuilt: for every Envoy proxy of
// the test meshes, on IPv4, IPv6 and zoned IPv6 addresses,
// PerProxyListenerResources gives the inbound listeners PerProxyListeners
// builds, byte for byte, stamped with their RBAC rules spliced in (HTTP,
// gRPC and TCP ports; rules that allow some callers, everyone, or no
// one), with the references the Validator finds in the built ones; the
// sets validate with them.
func TestPerProxyListenerResourcesStampEqualsBuilt(t *testing.T) {
	eps := bookstoreEndpoints(t)
	meshes := map[string]Mesh{
		"smi":                meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive":         meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"split-matches-root": splitMatchesEmptyRoot(t),
		"policy":             policyMesh(t),
		"tcp-only":           tcpOnlyMesh(t),
	}
	stamped := 0
	for name, m := range meshes {
		m.Memo = NewMemo()
		for _, addr := range []string{"10.0.0.2", "2001:db8::2", "fe80::2%eth0"} {
			for _, info := range m.Spec().Services() {
				p := Proxy{Service: info.Service, Flavor: Envoy, Address: netip.MustParseAddr(addr)}
				label := fmt.Sprintf("%s/%s/%s", name, addr, info.Service)
				want, err := PerProxyListeners(Mesh{View: m.View}, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				msgs, enc, err := PerProxyListenerResources(m, p)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if len(msgs) != 0 || len(enc) != len(want) {
					t.Errorf("%s: %d inbound listeners as messages and %d stamped; %d built", label, len(msgs), len(enc), len(want))
				}
				byName := map[string]proto.Message{}
				for _, l := range want {
					byName[l.GetName()] = l
				}
				for _, e := range enc {
					w, ok := byName[e.Name]
					if !ok {
						t.Errorf("%s: stamped listener %q was not built", label, e.Name)
						continue
					}
					if wb := mustMarshal(t, w); e.TypeURL != listenerType || !bytes.Equal(e.Bytes, wb) {
						t.Errorf("%s: stamped listener %q\n%x\nbuilt\n%x", label, e.Name, e.Bytes, wb)
					}
					refs, _ := walkOne(Envoy, w)
					var wantRefs []Ref
					for _, r := range refs {
						wantRefs = append(wantRefs, Ref{typeOfKind[r.kind], r.name})
					}
					if !slices.Equal(e.Refs, wantRefs) {
						t.Errorf("%s: stamped listener %q references %v; the built one %v", label, e.Name, e.Refs, wantRefs)
					}
					if got, ok := listenerAddress(e.Bytes); !ok || got.Addr() != p.Address {
						t.Errorf("%s: stamped listener %q listens on %v", label, e.Name, got)
					}
					stamped++
				}
				r := renderAll(t, Mesh{View: m.View}, p)
				var rest []proto.Message
				for _, x := range r.all() {
					if l, ok := x.(*listenerv3.Listener); ok && slices.ContainsFunc(enc, func(e Encoded) bool { return e.Name == l.GetName() }) {
						continue
					}
					rest = append(rest, x)
				}
				if err := NewValidator(Envoy).ValidateSet(nil, enc, rest...); err != nil {
					t.Errorf("%s: %v", label, err)
				}
			}
		}
	}
	if stamped == 0 {
		t.Error("no inbound listener stamped")
	}
}
