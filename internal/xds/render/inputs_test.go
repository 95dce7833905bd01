package render

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

// randomMesh is a small specification drawn at random: services (some
// sharing a service account) with HTTP, gRPC and TCP ports, two route
// groups, a TCPRoute, TrafficTargets and TrafficSplits.
type randomMesh struct {
	permissive bool
	services   []randomService
	groups     [2][]randomMatch
	tcpPorts   []int
	targets    []randomTarget
	splits     []randomSplit
	routes     []randomRoute
	// limits are the inbound rate limits of some services (by index): an
	// UpstreamTrafficSetting's rateLimit.local and httpRoutes.
	limits map[int]randomLimit
	// config is more of MeshConfig's spec, such as
	// "certificate: {serviceLifetime: 1s}"; empty for none.
	config string
}

type randomService struct {
	account string
	ports   []int // of 8080 (http), 7070 (grpc), 9090 (tcp)
	// protocols and targetPorts override, per port, the protocol given by
	// the port number (tcp for other ports) and the target port (port+1).
	protocols   map[int]string
	targetPorts map[int]int
}

type randomMatch struct {
	path    string
	methods []string
}

type randomTarget struct {
	dest    string
	port    int // 0 for all
	sources []string
	rules   []string // "g0", "g1", "g1:m0", "tcp"
}

// randomRoute is an HTTPRoute attached to a service (one port or all)
// with a header-matched rule and a weighted one.
type randomRoute struct {
	parent   string
	port     int // 0 for all
	header   string
	backends map[string]int
}

func newRandomRoute(r *rand.Rand) randomRoute {
	rt := randomRoute{parent: fmt.Sprintf("s%d", r.IntN(5)), header: pick(r, []string{"", "a", "b"}), backends: map[string]int{}}
	if r.IntN(2) == 0 {
		rt.port = pick(r, randomPorts)
	}
	for range 1 + r.IntN(3) {
		rt.backends[fmt.Sprintf("s%d", r.IntN(5))] = pick(r, []int{0, 10, 50, 90})
	}
	return rt
}

// randomLimit is an UpstreamTrafficSetting's local rate limits: of
// connections, of requests, of the requests of one path, each of n a
// second (0: none); and a BackendTrafficPolicy's request timeout of
// timeout seconds (0: none).
type randomLimit struct {
	tcp, http, route int
	timeout          int
}

func newRandomLimit(r *rand.Rand) randomLimit {
	return randomLimit{tcp: pick(r, []int{0, 10}), http: pick(r, []int{0, 5, 50}), route: pick(r, []int{0, 5}), timeout: pick(r, []int{0, 0, 3})}
}

type randomSplit struct {
	root     string
	backends map[string]int
	match    bool // limited to route group g0
}

var (
	randomAccounts = []string{"s0", "s1", "s2", "s3", "s4", "shared"}
	randomPorts    = []int{8080, 7070, 9090}
)

func pick[T any](r *rand.Rand, from []T) T { return from[r.IntN(len(from))] }

func someOf[T any](r *rand.Rand, from []T) []T {
	var out []T
	for _, x := range from {
		if r.IntN(2) == 0 {
			out = append(out, x)
		}
	}
	return out
}

func newRandomMesh(r *rand.Rand) randomMesh {
	m := randomMesh{permissive: r.IntN(6) == 0, tcpPorts: someOf(r, randomPorts)}
	for i := range 5 {
		s := randomService{account: fmt.Sprintf("s%d", i), ports: someOf(r, randomPorts)}
		if r.IntN(3) == 0 {
			s.account = "shared"
		}
		if len(s.ports) == 0 {
			s.ports = []int{8080}
		}
		m.services = append(m.services, s)
	}
	for g := range m.groups {
		for range 1 + r.IntN(2) {
			m.groups[g] = append(m.groups[g], randomMatch{path: pick(r, []string{"/a.*", "/b", ""}), methods: someOf(r, []string{"GET", "POST"})})
		}
	}
	for range r.IntN(6) {
		m.targets = append(m.targets, newRandomTarget(r))
	}
	for range r.IntN(3) {
		m.splits = append(m.splits, newRandomSplit(r))
	}
	for range r.IntN(3) {
		m.routes = append(m.routes, newRandomRoute(r))
	}
	if r.IntN(2) == 0 {
		m.limits = map[int]randomLimit{r.IntN(5): newRandomLimit(r)}
	}
	return m
}

func newRandomTarget(r *rand.Rand) randomTarget {
	t := randomTarget{dest: pick(r, randomAccounts), sources: someOf(r, randomAccounts), rules: someOf(r, []string{"g0", "g1", "g1:m0", "tcp"})}
	if len(t.sources) == 0 {
		t.sources = []string{pick(r, randomAccounts)}
	}
	if len(t.rules) == 0 {
		t.rules = []string{"g0"}
	}
	if r.IntN(4) == 0 {
		t.port = pick(r, randomPorts)
	}
	return t
}

func newRandomSplit(r *rand.Rand) randomSplit {
	s := randomSplit{root: fmt.Sprintf("s%d", r.IntN(5)), backends: map[string]int{}, match: r.IntN(3) == 0}
	for range 1 + r.IntN(3) {
		s.backends[fmt.Sprintf("s%d", r.IntN(5))] = pick(r, []int{0, 10, 50, 90})
	}
	return s
}

// mutate changes one thing at random.
func (m randomMesh) mutate(r *rand.Rand) randomMesh {
	m.services = append([]randomService(nil), m.services...)
	m.targets = append([]randomTarget(nil), m.targets...)
	m.splits = append([]randomSplit(nil), m.splits...)
	m.routes = append([]randomRoute(nil), m.routes...)
	limits := map[int]randomLimit{}
	for i, l := range m.limits {
		limits[i] = l
	}
	m.limits = limits
	switch r.IntN(11) {
	case 0:
		m.permissive = !m.permissive
	case 1:
		i := r.IntN(len(m.services))
		m.services[i].ports = someOf(r, randomPorts)
		if len(m.services[i].ports) == 0 {
			m.services[i].ports = []int{9090}
		}
	case 2:
		m.services[r.IntN(len(m.services))].account = pick(r, randomAccounts)
	case 3:
		g := r.IntN(2)
		m.groups[g] = append(append([]randomMatch(nil), m.groups[g]...), randomMatch{path: pick(r, []string{"/c", "/a.*"}), methods: someOf(r, []string{"GET", "PUT"})})
	case 4:
		m.tcpPorts = someOf(r, randomPorts)
	case 5:
		m.targets = append(m.targets, newRandomTarget(r))
	case 6:
		if len(m.targets) > 0 {
			i := r.IntN(len(m.targets))
			m.targets = append(m.targets[:i:i], m.targets[i+1:]...)
		}
	case 7:
		if len(m.targets) > 0 {
			m.targets[r.IntN(len(m.targets))].sources = []string{pick(r, randomAccounts)}
		}
	case 8:
		if len(m.splits) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(m.splits))
			backends := map[string]int{}
			for b, w := range m.splits[i].backends {
				backends[b] = w
			}
			backends[fmt.Sprintf("s%d", r.IntN(5))] = pick(r, []int{0, 30})
			m.splits[i].backends = backends
		} else {
			m.splits = append(m.splits, newRandomSplit(r))
		}
	case 9:
		switch {
		case len(m.routes) > 0 && r.IntN(3) == 0:
			i := r.IntN(len(m.routes))
			m.routes = append(m.routes[:i:i], m.routes[i+1:]...)
		case len(m.routes) > 0 && r.IntN(2) == 0:
			i := r.IntN(len(m.routes))
			backends := map[string]int{}
			for b, w := range m.routes[i].backends {
				backends[b] = w
			}
			backends[fmt.Sprintf("s%d", r.IntN(5))] = pick(r, []int{0, 30})
			m.routes[i].backends = backends
		default:
			m.routes = append(m.routes, newRandomRoute(r))
		}
	case 10:
		if i := r.IntN(5); r.IntN(3) == 0 {
			delete(m.limits, i)
		} else {
			m.limits[i] = newRandomLimit(r)
		}
	}
	return m
}

// protocolOf is the protocol of port p of service s.
func (s randomService) protocolOf(p int) string {
	if proto := s.protocols[p]; proto != "" {
		return proto
	}
	if proto := map[int]string{8080: "http", 7070: "grpc"}[p]; proto != "" {
		return proto
	}
	return "tcp"
}

// routeFits reports whether rt can attach: its parent is no TrafficSplit
// root and has the port (or any port) it can serve.
func (m randomMesh) routeFits(rt randomRoute) bool {
	for _, sp := range m.splits {
		if sp.root == rt.parent {
			return false
		}
	}
	var parent randomService
	for i, s := range m.services {
		if fmt.Sprintf("s%d", i) == rt.parent {
			parent = s
		}
	}
	for _, p := range parent.ports {
		if (rt.port == 0 || rt.port == p) && parent.protocolOf(p) != "tcp" {
			return true
		}
	}
	return false
}

func (m randomMesh) yaml() string {
	var b strings.Builder
	config := ""
	if m.config != "" {
		config = ", " + m.config
	}
	fmt.Fprintf(&b, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: %v}%s}\n", m.permissive, config)
	for i, s := range m.services {
		var ports []string
		for _, p := range s.ports {
			proto, target := s.protocolOf(p), p+1
			if t, ok := s.targetPorts[p]; ok {
				target = t
			}
			ports = append(ports, fmt.Sprintf("{port: %d, targetPort: %d, appProtocol: %s}", p, target, proto))
		}
		fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: s%d, namespace: default}\nspec: {serviceAccount: %s, ports: [%s]}\n", i, s.account, strings.Join(ports, ", "))
	}
	for g, matches := range m.groups {
		var ms []string
		for i, x := range matches {
			ms = append(ms, fmt.Sprintf("{name: m%d, pathRegex: '%s', methods: [%s]}", i, x.path, strings.Join(x.methods, ", ")))
		}
		fmt.Fprintf(&b, "---\napiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: g%d, namespace: default}\nspec: {matches: [%s]}\n", g, strings.Join(ms, ", "))
	}
	var tcp []string
	for _, p := range m.tcpPorts {
		tcp = append(tcp, fmt.Sprint(p))
	}
	fmt.Fprintf(&b, "---\napiVersion: specs.smi-spec.io/v1alpha4\nkind: TCPRoute\nmetadata: {name: tcp, namespace: default}\nspec: {matches: {name: tcp, ports: [%s]}}\n", strings.Join(tcp, ", "))
	for i, t := range m.targets {
		var srcs, rules []string
		for _, s := range t.sources {
			srcs = append(srcs, fmt.Sprintf("{kind: ServiceAccount, name: %s, namespace: default}", s))
			if s == "shared" || s == "s0" {
				srcs = append(srcs, "{kind: ServiceAccount, name: gw, namespace: default}")
			}
		}
		for _, r := range t.rules {
			switch r {
			case "tcp":
				rules = append(rules, "{kind: TCPRoute, name: tcp}")
			case "g1:m0":
				rules = append(rules, "{kind: HTTPRouteGroup, name: g1, matches: [m0]}")
			default:
				rules = append(rules, fmt.Sprintf("{kind: HTTPRouteGroup, name: %s}", r))
			}
		}
		port := ""
		if t.port != 0 {
			port = fmt.Sprintf(", port: %d", t.port)
		}
		fmt.Fprintf(&b, "---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: t%d, namespace: default}\nspec:\n  destination: {kind: ServiceAccount, name: %s, namespace: default%s}\n  rules: [%s]\n  sources: [%s]\n", i, t.dest, port, strings.Join(rules, ", "), strings.Join(srcs, ", "))
	}
	for i, s := range m.splits {
		var backends []string
		for _, name := range []string{"s0", "s1", "s2", "s3", "s4"} {
			if w, ok := s.backends[name]; ok {
				backends = append(backends, fmt.Sprintf("{service: %s, weight: %d}", name, w))
			}
		}
		matches := ""
		if s.match {
			matches = ", matches: [{kind: HTTPRouteGroup, name: g0}]"
		}
		fmt.Fprintf(&b, "---\napiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split%d, namespace: default}\nspec: {service: %s, backends: [%s]%s}\n", i, s.root, strings.Join(backends, ", "), matches)
	}
	for i, rt := range m.routes {
		if !m.routeFits(rt) {
			continue // the specification would refuse it
		}
		var backends []string
		for _, name := range []string{"s0", "s1", "s2", "s3", "s4"} {
			if w, ok := rt.backends[name]; ok {
				backends = append(backends, fmt.Sprintf("{name: %s, port: 8080, weight: %d}", name, w))
			}
		}
		port := ""
		if rt.port != 0 {
			port = fmt.Sprintf(", port: %d", rt.port)
		}
		rules := fmt.Sprintf("[{backendRefs: [%s]}]", strings.Join(backends, ", "))
		if rt.header != "" {
			rules = fmt.Sprintf("[{matches: [{headers: [{name: x-v, value: %s}]}], backendRefs: [%s]}, {backendRefs: [%s]}]", rt.header, backends[0], strings.Join(backends, ", "))
		}
		// Routes with header "b" or none also attach to the Gateway gw.
		gw := ""
		if rt.header != "a" {
			gw = ", {name: gw}"
		}
		fmt.Fprintf(&b, "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: route%d, namespace: default}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: %s%s}%s]\n  rules: %s\n", i, rt.parent, port, gw, rules)
	}
	for i := range 5 {
		l, ok := m.limits[i]
		if !ok {
			continue
		}
		if l.timeout > 0 {
			fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: s%d, namespace: default}\nspec: {targetRefs: [{group: \"\", kind: Service, name: s%d}], timeouts: {request: %ds}}\n", i, i, l.timeout)
		}
		if l.tcp == 0 && l.http == 0 && l.route == 0 {
			continue
		}
		var local []string
		if l.tcp > 0 {
			local = append(local, fmt.Sprintf("tcp: {connections: %d, unit: second}", l.tcp))
		}
		if l.http > 0 {
			local = append(local, fmt.Sprintf("http: {requests: %d, unit: second, burst: 1, responseStatusCode: 503, responseHeadersToAdd: [{name: x-limited, value: %q}]}", l.http, fmt.Sprint(l.http)))
		}
		routes := ""
		if l.route > 0 {
			routes = fmt.Sprintf(", httpRoutes: [{path: /a.*, rateLimit: {local: {requests: %d, unit: minute}}}]", l.route)
		}
		rateLimit := ""
		if len(local) > 0 {
			rateLimit = fmt.Sprintf(", rateLimit: {local: {%s}}", strings.Join(local, ", "))
		}
		fmt.Fprintf(&b, "---\napiVersion: policy.openservicemesh.io/v1alpha1\nkind: UpstreamTrafficSetting\nmetadata: {name: s%d, namespace: default}\nspec: {host: s%d%s%s}\n", i, i, rateLimit, routes)
	}
	// An ingress Gateway whose account is a source wherever "shared" or s0 is.
	b.WriteString("---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default}\nspec: {gatewayClassName: osm-vm, listeners: [{name: web, port: 80, protocol: HTTP}]}\n")
	return b.String()
}

// snapshotOf applies y to a fresh specification; nil when the
// specification refuses it.
func snapshotOf(t *testing.T, y string) *spec.Snapshot {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	docs, err := spec.Parse([]byte(y), "random.yaml")
	if err != nil {
		return nil
	}
	if _, err := s.Apply(t.Context(), docs, spec.ApplyOptions{}); err != nil {
		return nil
	}
	return s.Snapshot()
}

// renderedByLabel returns every listener, route configuration and cluster of p
// keyed by type and name, or the rendering error.
func renderedByLabel(m Mesh, p Proxy) (map[string]proto.Message, error) {
	ls, err := Listeners(m, p)
	if err != nil {
		return nil, err
	}
	rs, err := Routes(m, p)
	if err != nil {
		return nil, err
	}
	cs, err := Clusters(m, p)
	if err != nil {
		return nil, err
	}
	out := map[string]proto.Message{}
	for _, l := range ls {
		out[labelOf(l)] = l
	}
	for _, r := range rs {
		out[labelOf(r)] = r
	}
	for _, c := range cs {
		out[labelOf(c)] = c
	}
	return out, nil
}

func marshalled(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEqualInputsRenderEqually: for random specifications and random
// one-change edits of them, every proxy whose Inputs are equal under both
// gets byte-identical listeners, route configurations and clusters. Both
// outcomes must occur often enough for the test to mean something.
func TestEqualInputsRenderEqually(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addr := netip.MustParseAddr("10.0.0.9")
	same, differ, routed := 0, 0, 0
	gwSame, gwDiffer := 0, 0 // of the gateway proxy, with routes attached
	for i := range 300 {
		base := newRandomMesh(r)
		edit := base.mutate(r)
		a, b := snapshotOf(t, base.yaml()), snapshotOf(t, edit.yaml())
		if a == nil || b == nil {
			continue
		}
		for s := range 5 {
			if a.HasGatewayRoutes(svcNamed(s)) || b.HasGatewayRoutes(svcNamed(s)) {
				routed++
				break
			}
		}
		ma, mb := meshOf(a, nil), meshOf(b, nil)
		for s := range 6 { // s5: the gateway proxy of Gateway gw
			for _, f := range []Flavor{Envoy, GRPC, Gateway} {
				if (s == 5) != (f == Gateway) {
					continue
				}
				p := Proxy{Service: svcNamed(s), Flavor: f, Address: addr}
				if f == Gateway {
					p.Service = svc("gw")
				}
				ia, errA := InputsOf(ma, p)
				ib, errB := InputsOf(mb, p)
				if errA != nil || errB != nil {
					continue
				}
				if deps, err := Dependencies(mb, p); err != nil || !slices.Equal(ib.Dependencies(), deps) {
					t.Fatalf("case %d, proxy of s%d (%s): Inputs.Dependencies %v, Dependencies %v (%v)", i, s, f, ib.Dependencies(), deps, err)
				}
				if reflect.DeepEqual(ia, ib) && !ia.Equal(ib) {
					t.Fatalf("case %d, proxy of s%d (%s): Inputs.Equal false where reflect.DeepEqual is true", i, s, f)
				}
				attached := f == Gateway && len(ib.upstreams) > 0
				if !ia.Equal(ib) {
					differ++
					if attached {
						gwDiffer++
					}
					continue
				}
				same++
				if attached {
					gwSame++
				}
				ra, errA := renderedByLabel(ma, p)
				rb, errB := renderedByLabel(mb, p)
				if (errA == nil) != (errB == nil) {
					t.Fatalf("case %d, proxy of s%d (%s): equal Inputs, but rendering failed under one: %v / %v\nbefore:\n%s\nafter:\n%s", i, s, f, errA, errB, base.yaml(), edit.yaml())
				}
				for label, x := range ra {
					y, ok := rb[label]
					if !ok || !bytes.Equal(marshalled(t, x), marshalled(t, y)) {
						t.Fatalf("case %d, proxy of s%d (%s): equal Inputs, but %s differs\nbefore:\n%s\nafter:\n%s\n(-before +after):\n%s", i, s, f, label, base.yaml(), edit.yaml(), cmp.Diff(protojson.Format(x), protojson.Format(y)))
					}
				}
				if len(ra) != len(rb) {
					t.Fatalf("case %d, proxy of s%d (%s): equal Inputs, but %d resources against %d", i, s, f, len(ra), len(rb))
				}
			}
		}
	}
	t.Logf("equal Inputs %d times, different %d times; %d cases with Gateway API routes; the gateway proxy with backends: equal %d, different %d", same, differ, routed, gwSame, gwDiffer)
	if gwSame < 10 || gwDiffer < 10 {
		t.Errorf("the gateway proxy had backends with equal Inputs %d times, different %d times: the random specifications no longer exercise it", gwSame, gwDiffer)
	}
	if routed < 50 {
		t.Errorf("only %d cases had Gateway API routes: the random specifications no longer exercise them", routed)
	}
	if same < 500 || differ < 200 {
		t.Errorf("equal Inputs %d times, different %d times: the random edits no longer exercise both", same, differ)
	}
}

func svcNamed(i int) mesh.MeshService { return svc(fmt.Sprintf("s%d", i)) }

// TestRenderingIsByteStable renders the same proxy many times from a
// specification with two TrafficTargets into one service (two RBAC
// policies, a map inside an Any): every rendering must marshal to the same
// bytes, or an unchanged listener would get a new version and drain.
func TestRenderingIsByteStable(t *testing.T) {
	m := randomMesh{services: []randomService{{account: "s0", ports: []int{8080}}, {account: "s1", ports: []int{8080}}, {account: "s2", ports: []int{8080}}, {account: "s3", ports: []int{8080}}, {account: "s4", ports: []int{8080}}},
		groups: [2][]randomMatch{{{path: "/a"}}, {{path: "/b"}}}, tcpPorts: []int{9090},
		targets: []randomTarget{{dest: "s0", sources: []string{"s1"}, rules: []string{"g0"}}, {dest: "s0", sources: []string{"s2"}, rules: []string{"g1"}}}}
	mesh := meshOf(snapshotOf(t, m.yaml()), nil)
	p := Proxy{Service: svcNamed(0), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.9")}
	var first map[string][]byte
	for range 20 {
		got, err := renderedByLabel(mesh, p)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = map[string][]byte{}
			for label, msg := range got {
				first[label] = marshalled(t, msg)
			}
			continue
		}
		for label, msg := range got {
			if !bytes.Equal(marshalled(t, msg), first[label]) {
				t.Fatalf("%s marshals to different bytes on another rendering", label)
			}
		}
	}
}

// TestInputsEqualCoversEveryField: Inputs.Equal compares field by field;
// a field added to any type it compares must be added there too, and here.
func TestInputsEqualCoversEveryField(t *testing.T) {
	compared := map[reflect.Type][]string{
		reflect.TypeFor[Inputs]():                 {"self", "permissive", "inbound", "plan", "upstreams", "policies", "egress", "gateway", "limit", "calls"}, // policies: slices.Equal: ==
		reflect.TypeFor[spec.ServiceInfo]():       {"Service", "ServiceAccount", "Ports", "VIP"},
		reflect.TypeFor[spec.ServicePort]():       {"Name", "Port", "TargetPort", "AppProtocol"}, // slices.Equal: ==
		reflect.TypeFor[spec.InboundRule]():       {"Policy", "Sources", "Port", "HTTP", "TCPPorts", "TCPAllPorts"},
		reflect.TypeFor[spec.HTTPRouteMatch]():    {"Group", "Name", "PathRegex", "Methods", "Headers"},
		reflect.TypeFor[outbound]():               {"info", "port", "direct", "split", "subset", "splitMatches", "gw", "name", "grpcName", "call", "callKey", "retrySrc"}, // name, grpcName: worked out from the others; call by callKey
		reflect.TypeFor[gatewayPlan]():            {"routes", "allowed", "subset"},                                                                                        // routes by their Fingerprint, the JSON of all of it
		reflect.TypeFor[backend]():                {"svc", "weight"},                                                                                                      // slices.Equal: ==
		reflect.TypeFor[spec.EgressRoute]():       {"Host", "VIP", "EgressPort", "Matches", "RestrictedBy", "Gateway"},
		reflect.TypeFor[spec.EgressGatewayInfo](): {"Service", "ServiceAccount", "Port"},                // ==
		reflect.TypeFor[spec.EgressPort]():        {"Number", "Protocol", "TargetPort", "OriginateTLS"}, // ==
	}
	for typ, want := range compared {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s has fields (-compared by Inputs.Equal +declared):\n%s\nupdate Inputs.Equal and this test", typ, diff)
		}
	}
}

// TestAllowedUpstreams: the plans read Allows from AllowedUpstreams
// (spec), which must say for each upstream what Allows says, and list
// what Upstreams lists, over random meshes with TrafficSplits, Gateway
// API routes and permissive mode.
func TestAllowedUpstreams(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	checked, indirect := 0, 0
	for range 300 {
		snap := snapshotOf(t, newRandomMesh(r).yaml())
		if snap == nil {
			continue
		}
		for _, info := range snap.Services() {
			src := info.ServiceAccount
			ups := snap.AllowedUpstreams(src)
			want := snap.Upstreams(src)
			if len(ups) != len(want) {
				t.Fatalf("AllowedUpstreams(%s) lists %d services, Upstreams %d", src, len(ups), len(want))
			}
			for i, u := range ups {
				if u.Service != want[i] {
					t.Fatalf("AllowedUpstreams(%s)[%d] = %s, Upstreams has %s", src, i, u.Service, want[i])
				}
				if allows := snap.Allows(src, u.Service); u.Allowed != allows {
					t.Fatalf("AllowedUpstreams(%s): %s allowed %v, Allows says %v", src, u.Service, u.Allowed, allows)
				}
				checked++
				if !u.Allowed {
					indirect++
				}
			}
			// Every service src may call directly is listed.
			for _, dst := range snap.Services() {
				if dst.ServiceAccount != src && snap.Allows(src, dst.Service) && !slices.ContainsFunc(ups, func(u spec.Upstream) bool { return u.Service == dst.Service }) {
					t.Fatalf("AllowedUpstreams(%s) leaves out %s, which Allows", src, dst.Service)
				}
			}
		}
	}
	if checked == 0 || indirect == 0 {
		t.Fatalf("checked %d upstreams, %d not allowed directly: the meshes cover too little", checked, indirect)
	}
}
