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
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

// stampCase is one kind of resource render writes from stamps, rendered
// both ways for a proxy.
type stampCase struct {
	typeURL string
	flavors []Flavor
	addrs   []string // the proxies' addresses
	// built renders the resources as messages (m without a Memo);
	// written renders them as the publisher does (m with one).
	built   func(m Mesh, p Proxy) ([]proto.Message, error)
	written func(m Mesh, p Proxy) ([]proto.Message, []Encoded, error)
	// stamped says which of the built resources must come stamped.
	stamped func(proto.Message) bool
	// check, if set, checks more of each proxy's rendering.
	check func(t *testing.T, label string, m Mesh, p Proxy, enc []Encoded)
}

// stampMeshes are the meshes stamps are checked over: the golden ones,
// the policy mesh and a mesh with a TCP-only service.
func stampMeshes(t *testing.T) map[string]Mesh {
	eps := bookstoreEndpoints(t)
	return map[string]Mesh{
		"smi":                meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive":         meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"split-matches-root": splitMatchesEmptyRoot(t),
		"policy":             policyMesh(t),
		"tcp-only":           tcpOnlyMesh(t),
		"resilience":         meshOf(resilienceSpec(t).Snapshot(), eps),
		"rate-limit":         rateLimitMesh(t),
	}
}

// checkStamps renders c for every service of the stamp meshes, in each
// flavour and at each address, and checks that the publisher's form gives
// the built resources byte for byte: the stamped ones (all those
// c.stamped names) with the references the Validator finds in the built
// ones, the rest as the same messages; that every shape could be stamped;
// and that the set validates with the stamped resources. It returns how
// many were stamped and built, and the shapes made.
func checkStamps(t *testing.T, c stampCase) (stamped, built int, shapes map[shapeKey]bool) {
	t.Helper()
	shapes = map[shapeKey]bool{}
	for name, m := range stampMeshes(t) {
		for _, f := range c.flavors {
			m := m
			m.Memo = NewMemo()
			for _, addr := range c.addrs {
				for _, info := range m.Spec().Services() {
					p := Proxy{Service: info.Service, Flavor: f, Address: netip.MustParseAddr(addr)}
					label := fmt.Sprintf("%s/%s/%s/%s", name, f, addr, info.Service)
					want, err := c.built(Mesh{View: m.View}, p)
					if err != nil {
						t.Fatalf("%s: %v", label, err)
					}
					msgs, enc, err := c.written(m, p)
					if err != nil {
						t.Fatalf("%s: %v", label, err)
					}
					byName := map[string]proto.Message{}
					must := 0
					for _, w := range want {
						_, n := kindAndName(w)
						byName[n] = w
						if c.stamped(w) {
							must++
						}
					}
					if len(enc) != must || len(msgs)+len(enc) != len(want) {
						t.Errorf("%s: %d as messages and %d stamped; %d built, %d of which to stamp", label, len(msgs), len(enc), len(want), must)
					}
					for _, x := range msgs {
						if _, n := kindAndName(x); !proto.Equal(x, byName[n]) {
							t.Errorf("%s: %s differs from the built one", label, labelOf(x))
						}
						built++
					}
					for _, e := range enc {
						w, ok := byName[e.Name]
						if !ok {
							t.Errorf("%s: stamped %q was not built", label, e.Name)
							continue
						}
						if wb := mustMarshal(t, w); e.TypeURL != c.typeURL || !bytes.Equal(e.Bytes, wb) {
							t.Errorf("%s: stamped %s %q\n%x\nbuilt\n%x", label, e.TypeURL, e.Name, e.Bytes, wb)
						}
						refs, errs := walkOne(f, w)
						if len(errs) > 0 {
							t.Errorf("%s: %v", label, errs[0].err())
						}
						var wantRefs []Ref
						for _, r := range refs {
							wantRefs = append(wantRefs, Ref{typeOfKind[r.kind], r.name})
						}
						if !slices.Equal(e.Refs, wantRefs) {
							t.Errorf("%s: stamped %q references %v; the built one %v", label, e.Name, e.Refs, wantRefs)
						}
						stamped++
					}
					// The set validates with them stamped.
					var rest []proto.Message
					for _, x := range renderAll(t, Mesh{View: m.View}, p).all() {
						if kind, n := kindAndName(x); typeOfKind[kind] == c.typeURL && slices.ContainsFunc(enc, func(e Encoded) bool { return e.Name == n }) {
							continue
						}
						rest = append(rest, x)
					}
					if err := NewValidator(f).ValidateSet(nil, enc, rest...); err != nil {
						t.Errorf("%s: %v", label, err)
					}
					if c.check != nil {
						c.check(t, label, m, p, enc)
					}
				}
			}
			for k, sh := range m.Memo.shapes.All() {
				if sh.err != nil {
					t.Errorf("%s/%s: shape %v cannot be stamped: %v", name, f, k, sh.err)
				}
				shapes[k] = true
			}
		}
	}
	return stamped, built, shapes
}

func messages[T proto.Message](render func(Mesh, Proxy) ([]T, error)) func(Mesh, Proxy) ([]proto.Message, error) {
	return func(m Mesh, p Proxy) ([]proto.Message, error) {
		out, err := render(m, p)
		return msgs(out), err
	}
}

func writtenMessages[T proto.Message](render func(Mesh, Proxy, []Encoded) ([]T, []Encoded, error)) func(Mesh, Proxy) ([]proto.Message, []Encoded, error) {
	return func(m Mesh, p Proxy) ([]proto.Message, []Encoded, error) {
		// A buffer too small for most sets: appending to it must grow it.
		out, enc, err := render(m, p, make([]Encoded, 0, 1))
		return msgs(out), enc, err
	}
}

// TestClusterResourcesStampEqualsBuilt: the EDS clusters (written once
// per upstream and flavour: asked again, the Memo answers with the same
// bytes) and local clusters of ClusterResources are those Clusters
// builds, in both flavours, and every shape is stamped: EDS clusters for
// Envoy with and without HTTP and for gRPC (which calls only HTTP
// upstreams), local clusters of HTTP, gRPC and TCP ports.
func TestClusterResourcesStampEqualsBuilt(t *testing.T) {
	_, _, shapes := checkStamps(t, stampCase{
		typeURL: clusterType,
		flavors: []Flavor{Envoy, GRPC},
		addrs:   []string{"10.0.0.2"},
		built:   messages(Clusters),
		written: writtenMessages(ClusterResources),
		stamped: func(x proto.Message) bool {
			c := x.(*clusterv3.Cluster)
			return c.GetEdsClusterConfig() != nil || strings.HasPrefix(c.GetName(), "local|")
		},
		check: func(t *testing.T, label string, m Mesh, p Proxy, enc []Encoded) {
			_, again, _ := ClusterResources(m, p, nil)
			for i := range again {
				if !strings.HasPrefix(enc[i].Name, "local|") && &again[i].Bytes[0] != &enc[i].Bytes[0] {
					t.Errorf("%s: cluster %q written again", label, enc[i].Name)
				}
			}
		},
	})
	kinds := map[memoKind]int{}
	for k := range shapes {
		kinds[k.kind]++
	}
	if kinds[memoCluster] < 3 || kinds[memoLocalCluster] < 3 {
		t.Errorf("the meshes stamped shapes %v: too few to test the flavours, HTTP and the ports", shapes)
	}
}

// TestSharedListenerResourcesStampEqualsBuilt: the outbound listeners of
// upstreams called directly are stamped as SharedListeners builds them;
// those of splits are built.
func TestSharedListenerResourcesStampEqualsBuilt(t *testing.T) {
	stamped, built, _ := checkStamps(t, stampCase{
		typeURL: listenerType,
		flavors: []Flavor{Envoy},
		addrs:   []string{"10.0.0.2"},
		built:   messages(SharedListeners),
		written: writtenMessages(SharedListenerResources),
		stamped: func(x proto.Message) bool {
			l := x.(*listenerv3.Listener)
			return !strings.Contains(l.GetName(), "|to=") && !strings.HasSuffix(l.GetName(), "|split-only") && !isSplit(l)
		},
	})
	if stamped == 0 || built == 0 {
		t.Errorf("%d outbound listeners stamped, %d built: the meshes no longer test both paths", stamped, built)
	}
}

// isSplit reports whether outbound listener l sends TCP to weighted
// clusters (a split).
func isSplit(l *listenerv3.Listener) bool {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			tp := &tcpproxyv3.TcpProxy{}
			if f.GetName() == tcpProxyFilter && f.GetTypedConfig().UnmarshalTo(tp) == nil && tp.GetWeightedClusters() != nil {
				return true
			}
		}
	}
	return false
}

// TestRouteResourcesStampEqualsBuilt: the inbound route configurations and
// those of upstreams called directly are stamped as Routes builds them,
// in both flavours; those of splits are built.
func TestRouteResourcesStampEqualsBuilt(t *testing.T) {
	stampedBy := map[Flavor]int{}
	_, built, _ := checkStamps(t, stampCase{
		typeURL: routeType,
		flavors: []Flavor{Envoy, GRPC},
		addrs:   []string{"10.0.0.2"},
		built:   messages(Routes),
		written: writtenMessages(RouteResources),
		stamped: func(x proto.Message) bool {
			rc := x.(*routev3.RouteConfiguration)
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if r.GetRoute().GetWeightedClusters() != nil || r.GetName() != "" && !strings.HasPrefix(r.GetName(), "rate-limit-") {
						return false // a split's
					}
				}
			}
			return true
		},
		check: func(t *testing.T, label string, m Mesh, p Proxy, enc []Encoded) { stampedBy[p.Flavor] += len(enc) },
	})
	if stampedBy[Envoy] == 0 || stampedBy[GRPC] == 0 || built == 0 {
		t.Errorf("route configurations stamped %v, %d built: the meshes no longer test both paths and both flavours", stampedBy, built)
	}
}

// TestPerProxyListenerResourcesStampEqualsBuilt: every Envoy inbound
// listener, on IPv4, IPv6 and zoned IPv6 addresses, is stamped with its
// RBAC rules spliced in as PerProxyListeners builds it (HTTP, gRPC and TCP
// ports; rules that allow some callers, everyone, or no one), and listens
// on the proxy's address.
func TestPerProxyListenerResourcesStampEqualsBuilt(t *testing.T) {
	stamped, _, _ := checkStamps(t, stampCase{
		typeURL: listenerType,
		flavors: []Flavor{Envoy},
		addrs:   []string{"10.0.0.2", "2001:db8::2", "fe80::2%eth0"},
		built:   messages(PerProxyListeners),
		written: writtenMessages(PerProxyListenerResources),
		stamped: func(proto.Message) bool { return true },
		check: func(t *testing.T, label string, m Mesh, p Proxy, enc []Encoded) {
			for _, e := range enc {
				if got, ok := listenerAddress(e.Bytes); !ok || got.Addr() != p.Address {
					t.Errorf("%s: stamped listener %q listens on %v", label, e.Name, got)
				}
			}
		},
	})
	if stamped == 0 {
		t.Error("no inbound listener stamped")
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

// rulesYAML is a mesh whose inbound rules test what appendInboundRules
// writes: a service two TrafficTargets allow (two policies, whose names
// sort otherwise than they were applied), a caller named twice in one
// target and in both, HTTP and TCP ports, and a target on one port only.
const rulesYAML = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: shop}
spec: {serviceAccount: shop, ports: [{port: 80, appProtocol: http}, {port: 81, appProtocol: http}, {port: 5432, appProtocol: tcp}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: reads}
spec: {matches: [{name: get, pathRegex: "/items/.*", methods: [GET]}, {name: head, methods: [HEAD]}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: pg}
spec: {matches: {name: pg, ports: [5432]}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: z-readers}
spec:
  destination: {kind: ServiceAccount, name: shop}
  sources: [{kind: ServiceAccount, name: web}, {kind: ServiceAccount, name: admin}, {kind: ServiceAccount, name: web}]
  rules: [{kind: HTTPRouteGroup, name: reads}, {kind: TCPRoute, name: pg}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: a-admin-81}
spec:
  destination: {kind: ServiceAccount, name: shop, port: 81}
  sources: [{kind: ServiceAccount, name: admin}, {kind: ServiceAccount, name: ops, namespace: infra}]
  rules: [{kind: HTTPRouteGroup, name: reads}]
`

// TestInboundRulesWritten: the inbound RBAC rules written from their
// parts' encodings (inboundRulesBytes with a Memo) are byte for byte
// protobuf-go's deterministic marshal of inboundRBAC's message, for every
// port of every service of the stamp meshes and rulesYAML's, and fail
// validation exactly where the message's filter does. (The specification
// refuses what would fail; TestEncodedPartsRefuseInvalid covers that
// path.)
func TestInboundRulesWritten(t *testing.T) {
	meshes := stampMeshes(t)
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, rulesYAML)
	meshes["rules"] = meshOf(s.Snapshot(), nil)
	written, failed := 0, 0
	for name, m := range meshes {
		m.Memo = NewMemo()
		for pass := range 2 { // the second pass from the Memo's parts
			for _, info := range m.Spec().Services() {
				for _, port := range info.Ports {
					label := fmt.Sprintf("%s/%s:%d (pass %d)", name, info.Service, port.Port, pass)
					rules := inboundRBAC(Mesh{View: m.View}, info.Service, port, Envoy)
					var filter proto.Message = &rbachttpv3.RBAC{Rules: rules}
					if !isHTTP(port) {
						filter = &rbacnetv3.RBAC{StatPrefix: "x", Rules: rules}
					}
					_, errs := walkOne(Envoy, filter)
					got := inboundRulesBytes(m, info.Service, port, InboundName(info.Service, port.Port))
					if got.ok != (len(errs) == 0) {
						t.Fatalf("%s: written rules ok = %v; the message's validation found %v", label, got.ok, errs)
					}
					if !got.ok {
						failed++
						continue
					}
					want, err := proto.MarshalOptions{Deterministic: true}.Marshal(rules)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.b, want) {
						t.Fatalf("%s: written rules differ from the message's:\n got %x\nwant %x", label, got.b, want)
					}
					if len(rules.Policies) > 1 {
						written++
					}
				}
			}
		}
	}
	if written == 0 || failed != 0 {
		t.Fatalf("%d rules of several policies written, %d failed validation: want some and none", written, failed)
	}
}

// TestEncodedPartsRefuseInvalid: a permission that fails Envoy's
// validation (a regex that is not RE2) makes the rules holding it fail,
// when first met and when remembered; valid parts are their encodings.
func TestEncodedPartsRefuseInvalid(t *testing.T) {
	bad := &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
		Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "(unclosed"}}}},
	}}}
	good := principal("cluster.local", mesh.ServiceAccount{Namespace: "default", Name: "web"})
	mm := NewMemo()
	for pass := range 2 {
		if _, ok := mm.encodedParts([]proto.Message{good, bad}); ok {
			t.Fatalf("pass %d: rules with an invalid permission encoded", pass)
		}
		enc, ok := mm.encodedParts([]proto.Message{anyPermission, good})
		if !ok {
			t.Fatalf("pass %d: valid parts refused", pass)
		}
		for i, m := range []proto.Message{anyPermission, good} {
			want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if !bytes.Equal(enc[i], want) {
				t.Fatalf("pass %d: part %d is %x, want %x", pass, i, enc[i], want)
			}
		}
	}
}
