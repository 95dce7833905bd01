package render

import (
	"encoding/json"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"go.yaml.in/yaml/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// conformanceMeshDir is the mesh tests' directory of the Gateway API
// conformance module matching the pinned sigs.k8s.io/gateway-api.
func conformanceMeshDir(t *testing.T) string {
	t.Helper()
	ver, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api: %v", err)
	}
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/gateway-api/conformance@"+strings.TrimSpace(string(ver))).Output()
	if err != nil {
		t.Fatalf("go mod download the conformance manifests: %v", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download: no directory (%v)", err)
	}
	return m.Dir
}

// request is what the conformance tests send: a path with a query, and
// headers.
type request struct {
	path    string
	headers map[string]string
}

// pickRoute returns the first route of rc that matches req, as Envoy picks it
// (the matchers rendering uses: path, prefix, path-separated prefix, safe
// regex; exact and regex headers; exact and regex query parameters).
func pickRoute(rc *routev3.RouteConfiguration, req request) *routev3.Route {
	u, _ := url.Parse(req.path)
	hdr := map[string]string{":method": "GET"}
	for k, v := range req.headers {
		hdr[strings.ToLower(k)] = v
	}
	full := func(re, s string) bool { return regexp.MustCompile("^(?:" + re + ")$").MatchString(s) }
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		m := r.GetMatch()
		p := u.Path
		ok := true
		switch {
		case m.GetPath() != "":
			ok = p == m.GetPath()
		case m.GetPathSeparatedPrefix() != "":
			pre := m.GetPathSeparatedPrefix()
			ok = p == pre || strings.HasPrefix(p, pre+"/")
		case m.GetSafeRegex() != nil:
			ok = full(m.GetSafeRegex().GetRegex(), p)
		default:
			ok = strings.HasPrefix(p, m.GetPrefix())
		}
		for _, h := range m.GetHeaders() {
			v, has := hdr[h.GetName()]
			switch {
			case h.GetSafeRegexMatch() != nil:
				ok = ok && has && full(h.GetSafeRegexMatch().GetRegex(), v)
			default:
				ok = ok && has && v == h.GetExactMatch()
			}
		}
		for _, q := range m.GetQueryParameters() {
			v, has := u.Query()[q.GetName()]
			sm := q.GetStringMatch()
			switch {
			case sm.GetSafeRegex() != nil:
				ok = ok && has && full(sm.GetSafeRegex().GetRegex(), v[0])
			default:
				ok = ok && has && v[0] == sm.GetExact()
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// outcome says what a route does: the cluster (or weighted clusters), a
// direct response, a redirect, with the filters it applies.
func outcome(r *routev3.Route) string {
	if r == nil {
		return "404"
	}
	var parts []string
	switch {
	case r.GetDirectResponse() != nil:
		parts = append(parts, "status "+jsonOf(r.GetDirectResponse().GetStatus()))
	case r.GetRedirect() != nil:
		parts = append(parts, "redirect "+compactJSON(r.GetRedirect()))
	case r.GetRoute().GetCluster() != "":
		parts = append(parts, r.GetRoute().GetCluster())
	default:
		var ws []string
		for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
			w := c.GetName() + "=" + jsonOf(c.GetWeight().GetValue())
			for _, h := range c.GetRequestHeadersToAdd() {
				w += " (req " + h.GetHeader().GetKey() + "=" + h.GetHeader().GetValue() + ")"
			}
			ws = append(ws, w)
		}
		parts = append(parts, strings.Join(ws, ","))
	}
	if rr := r.GetRoute(); rr != nil {
		if rr.GetPrefixRewrite() != "" {
			parts = append(parts, "prefix_rewrite "+rr.GetPrefixRewrite())
		}
		if rr.GetRegexRewrite() != nil {
			parts = append(parts, "regex_rewrite "+rr.GetRegexRewrite().GetPattern().GetRegex()+" -> "+rr.GetRegexRewrite().GetSubstitution())
		}
	}
	for _, h := range r.GetRequestHeadersToAdd() {
		parts = append(parts, "req "+h.GetAppendAction().String()+" "+h.GetHeader().GetKey()+"="+h.GetHeader().GetValue())
	}
	for _, h := range r.GetRequestHeadersToRemove() {
		parts = append(parts, "req remove "+h)
	}
	for _, h := range r.GetResponseHeadersToAdd() {
		parts = append(parts, "resp "+h.GetAppendAction().String()+" "+h.GetHeader().GetKey()+"="+h.GetHeader().GetValue())
	}
	return strings.Join(parts, "; ")
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

func compactJSON(m *routev3.RedirectAction) string {
	var parts []string
	if s := m.GetSchemeRedirect(); s != "" {
		parts = append(parts, "scheme="+s)
	}
	if h := m.GetHostRedirect(); h != "" {
		parts = append(parts, "host="+h)
	}
	if p := m.GetPortRedirect(); p != 0 {
		parts = append(parts, "port="+jsonOf(p))
	}
	if p := m.GetPathRedirect(); p != "" {
		parts = append(parts, "path="+p)
	}
	if p := m.GetPrefixRewrite(); p != "" {
		parts = append(parts, "prefix="+p)
	}
	if r := m.GetRegexRewrite(); r != nil {
		parts = append(parts, "regex="+r.GetPattern().GetRegex()+"->"+r.GetSubstitution())
	}
	parts = append(parts, "code="+m.GetResponseCode().String())
	return strings.Join(parts, " ")
}

// TestGatewayConformanceMeshRender applies the Gateway API project's own
// mesh conformance manifests (with the Services of its mesh base
// manifests, permissive) and renders the routes a caller in the mesh
// namespace gets, for Envoy and gRPC; every resource is validated, and the
// requests the conformance tests make are answered as those tests expect.
func TestGatewayConformanceMeshRender(t *testing.T) {
	dir := conformanceMeshDir(t)
	const ns = "gateway-conformance-mesh"
	const echo = "outbound|" + ns + "/echo|80|gw"
	c := func(s string) string { return ns + "/" + s }
	cases := map[string][]struct {
		route string
		req   request
		want  string
	}{
		"httproute-matching.yaml": {
			{echo, request{path: "/"}, c("echo-v1")},
			{echo, request{path: "/example"}, c("echo-v1")},
			{echo, request{path: "/", headers: map[string]string{"Version": "one"}}, c("echo-v1")},
			{echo, request{path: "/v2"}, c("echo-v2")},
			{echo, request{path: "/v2/example"}, c("echo-v2")},
			{echo, request{path: "/", headers: map[string]string{"Version": "two"}}, c("echo-v2")},
			{echo, request{path: "/v2/"}, c("echo-v2")},
			{echo, request{path: "/v2example"}, c("echo-v1")},
			{echo, request{path: "/foo/v2/example"}, c("echo-v1")},
		},
		"httproute-query-param-matching.yaml": {
			{echo, request{path: "/?animal=whale"}, c("echo-v1")},
			{echo, request{path: "/?animal=dolphin"}, c("echo-v2")},
			{echo, request{path: "/?animal=whale&otherparam=irrelevant"}, c("echo-v1")},
			{echo, request{path: "/?color=blue"}, "404"},
			{echo, request{path: "/?animal=whaledolphin"}, "404"},
			{echo, request{path: "/"}, "404"},
			{echo, request{path: "/path1?animal=whale"}, c("echo-v1")},
			{echo, request{path: "/?animal=whale", headers: map[string]string{"version": "one"}}, c("echo-v2")},
			{echo, request{path: "/path3?animal=shark"}, c("echo-v1")},
			{echo, request{path: "/path4?animal=kraken", headers: map[string]string{"version": "three"}}, c("echo-v1")},
			{echo, request{path: "/?animal=shark"}, "404"},
			{echo, request{path: "/path4?animal=kraken"}, "404"},
			{echo, request{path: "/path5?animal=hydra"}, c("echo-v1")},
		},
		"mesh-split.yaml": {
			{"outbound|" + ns + "/echo|80|gw", request{path: "/v1"}, c("echo-v1")},
			{"outbound|" + ns + "/echo|80|gw", request{path: "/v2"}, c("echo-v2")},
			{"outbound|" + ns + "/echo|80|gw", request{path: "/v3"}, "404"},
			{"outbound|" + ns + "/echo|8080|gw", request{path: "/v2"}, c("echo-v2")},
		},
		"httproute-weight.yaml": {
			{echo, request{path: "/"}, c("echo-v1") + "=70," + c("echo-v2") + "=30"},
		},
		"httproute-request-header-modifier.yaml": {
			{echo, request{path: "/set"}, c("echo-v1") + "; req OVERWRITE_IF_EXISTS_OR_ADD x-header-set=set-overwrites-values"},
			{echo, request{path: "/add"}, c("echo-v1") + "; req APPEND_IF_EXISTS_OR_ADD x-header-add=add-appends-values"},
			{echo, request{path: "/remove"}, c("echo-v1") + "; req remove x-header-remove"},
		},
		"httproute-rewrite-path.yaml": {
			{echo, request{path: "/prefix/one/two"}, c("echo-v1") + "; prefix_rewrite /one"},
			{echo, request{path: "/strip-prefix/three"}, c("echo-v1") + "; regex_rewrite ^/strip-prefix/* -> /"},
			{echo, request{path: "/full/one/two"}, c("echo-v1") + "; regex_rewrite ^.*$ -> /one"},
		},
		"httproute-redirect-path.yaml": {
			{echo, request{path: "/original-prefix/lemon"}, "redirect prefix=/replacement-prefix code=FOUND"},
			{echo, request{path: "/full/path/original"}, "redirect path=/full-path-replacement code=FOUND"},
			{echo, request{path: "/path-and-host"}, "redirect host=example.org prefix=/replacement-prefix code=FOUND"},
			{echo, request{path: "/path-and-status"}, "redirect prefix=/replacement-prefix code=MOVED_PERMANENTLY"},
		},
		"mesh-ports.yaml": {
			{"outbound|" + ns + "/echo-v1|80|gw", request{path: "/"}, c("echo-v1") + "; resp OVERWRITE_IF_EXISTS_OR_ADD x-header-set=v1"},
			{"outbound|" + ns + "/echo-v2|8080|gw", request{path: "/"}, c("echo-v2") + "; resp OVERWRITE_IF_EXISTS_OR_ADD x-header-set=v2"},
		},
		"grpcroute-weight.yaml": {
			// echo-v3 does not exist and has weight 0: nothing goes there.
			{"outbound|" + ns + "/echo|7070|gw", request{path: "/echo.Echo/Ping"}, c("echo-v1") + "=70," + c("echo-v2") + "=30"},
		},
	}
	services := conformanceServices(t, dir)
	files, _ := filepath.Glob(filepath.Join(dir, "tests", "mesh", "*.yaml"))
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			s, err := newSpecFromYAML(t, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: true}}\n---\n"+services+
				"---\napiVersion: v1\nkind: Service\nmetadata: {name: client, namespace: "+ns+"}\nspec: {ports: [{port: 80}]}\n"+
				"---\napiVersion: v1\nkind: Service\nmetadata: {name: client, namespace: "+ns+"-consumer}\nspec: {ports: [{port: 80}]}\n")
			if err != nil {
				t.Fatal(err)
			}
			applyYAML(t, s, readFile(t, f))
			eps := map[mesh.MeshService][]mesh.Endpoint{}
			for i, info := range s.Snapshot().Services() {
				eps[info.Service] = []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), Port: 80, Provider: "static"}}
			}
			m := meshOf(s.Snapshot(), eps)
			for _, caller := range []string{ns, ns + "-consumer"} {
				for _, fl := range []Flavor{Envoy, GRPC} {
					p := Proxy{Service: mesh.MeshService{Namespace: caller, Name: "client"}, Flavor: fl, Address: netip.MustParseAddr("10.2.1.1")}
					r := renderAll(t, m, p)
					if err := Validate(fl, r.all()...); err != nil {
						t.Errorf("%s caller in %s: Validate: %v", fl, caller, err)
					}
					if fl != Envoy || caller != ns {
						continue
					}
					byName := map[string]*routev3.RouteConfiguration{}
					for _, msg := range r.Routes {
						byName[msg.(*routev3.RouteConfiguration).GetName()] = msg.(*routev3.RouteConfiguration)
					}
					for _, tc := range cases[base] {
						rc, ok := byName[tc.route]
						if !ok {
							t.Errorf("no route configuration %s (have %v)", tc.route, keys(byName))
							continue
						}
						if got := outcome(pickRoute(rc, tc.req)); got != tc.want {
							t.Errorf("%s %+v: %s, want %s", tc.route, tc.req, got, tc.want)
						}
					}
				}
			}
		})
	}
	// The consumer route applies to callers in its namespace only.
	t.Run("mesh-consumer-route.yaml callers", func(t *testing.T) {
		s, err := newSpecFromYAML(t, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: true}}\n---\n"+services+
			"---\napiVersion: v1\nkind: Service\nmetadata: {name: client, namespace: "+ns+"-consumer}\nspec: {ports: [{port: 80}]}\n")
		if err != nil {
			t.Fatal(err)
		}
		applyYAML(t, s, readFile(t, dir, "tests", "mesh", "mesh-consumer-route.yaml"))
		m := meshOf(s.Snapshot(), nil)
		r := renderAll(t, m, Proxy{Service: mesh.MeshService{Namespace: ns + "-consumer", Name: "client"}, Flavor: Envoy, Address: netip.MustParseAddr("10.2.1.1")})
		var names []string
		for _, msg := range r.Routes {
			names = append(names, msg.(*routev3.RouteConfiguration).GetName())
		}
		want := "outbound|" + ns + "/echo-v1|80|gw=" + ns + "-consumer"
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("consumer's routes %v, want %s", names, want)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// conformanceServices returns the Service documents of the conformance
// mesh base manifests.
func conformanceServices(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "mesh", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var n yaml.Node
		if dec.Decode(&n) != nil {
			break
		}
		var head struct{ Kind string }
		_ = n.Decode(&head)
		if head.Kind == "Service" {
			y, _ := yaml.Marshal(&n)
			out = append(out, string(y))
		}
	}
	return strings.Join(out, "---\n")
}

// TestGatewayMatchAndFilterKinds: per match and filter kind, what a call
// to echo (testdata/gateway-features.yaml) gets from the routes rendered
// for the client, for Envoy and for gRPC (which drops what no gRPC call
// can match and the filters it does not honour are warned of at apply).
func TestGatewayMatchAndFilterKinds(t *testing.T) {
	s, err := newSpecFromYAML(t, readFile(t, "testdata", "gateway-features.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := meshOf(s.Snapshot(), nil)
	v1, v2 := "default/echo-v1", "default/echo-v2"
	tests := []struct {
		name    string
		port    string
		req     request
		envoy   string
		grpc    string // "" when as envoy (with |grpc clusters)
		grpcSet bool
	}{
		{"exact path", "80", request{path: "/exact"}, v1, "", false},
		{"exact path is not a prefix", "80", request{path: "/exact/more"}, "404", "", false},
		{"prefix, method, headers (exact and regex), query (exact and regex)", "80",
			request{path: "/v2/x?q=1&r=42", headers: map[string]string{"x-version": "two", "x-re": "aaa"}}, v2, "404", true},
		{"a header regex that fails", "80", request{path: "/v2/x?q=1&r=42", headers: map[string]string{"x-version": "two", "x-re": "b"}}, "404", "", false},
		{"a query that fails", "80", request{path: "/v2/x?q=2&r=42", headers: map[string]string{"x-version": "two", "x-re": "a"}}, "404", "", false},
		{"path regex", "80", request{path: "/re/abc"}, v1, "", false},
		{"weights, header modifiers, per-backend header, mirror", "80", request{path: "/split/a"},
			v1 + "=70," + v2 + "=30 (req x-backend=v2); req OVERWRITE_IF_EXISTS_OR_ADD x-set=s; req APPEND_IF_EXISTS_OR_ADD x-add=a; req remove x-remove; resp OVERWRITE_IF_EXISTS_OR_ADD x-resp=r", "", false},
		{"rewrite prefix and host", "80", request{path: "/prefix/one/two"}, v1 + "; prefix_rewrite /one", "", false},
		{"strip a prefix", "80", request{path: "/strip-prefix/three"}, v1 + "; regex_rewrite ^/strip-prefix/* -> /", "", false},
		{"replace the full path", "80", request{path: "/full/x"}, v1 + "; regex_rewrite ^.*$ -> /one", "", false},
		{"redirect", "80", request{path: "/old/page"}, "redirect scheme=https host=example.org port=8443 prefix=/new code=MOVED_PERMANENTLY", "", false},
		{"a backend that does not exist", "80", request{path: "/gone"}, "status 500", "", false},
		{"nothing matches", "80", request{path: "/elsewhere"}, "404", "", false},
		{"gRPC exact service and method", "7070", request{path: "/echo.Echo/Ping"}, v2, "", false},
		{"gRPC service", "7070", request{path: "/echo.Echo/Echo"}, v1, "", false},
		{"gRPC method of any service", "7070", request{path: "/other.Svc/Stream"}, v1, "", false},
		{"gRPC regex service and method", "7070", request{path: "/echo.Other/GetThing"}, v2, "", false},
		{"gRPC header", "7070", request{path: "/a.B/C", headers: map[string]string{"x-canary": "yes"}}, v2, "", false},
		{"gRPC weights", "7070", request{path: "/a.B/C"}, v1 + "=80," + v2 + "=20", "", false},
	}
	for _, fl := range []Flavor{Envoy, GRPC} {
		r := renderAll(t, m, Proxy{Service: svc("client"), Flavor: fl, Address: netip.MustParseAddr("10.1.0.1")})
		byPort := map[string]*routev3.RouteConfiguration{}
		for _, msg := range r.Routes {
			rc := msg.(*routev3.RouteConfiguration)
			if name, ok := strings.CutPrefix(rc.GetName(), "outbound|default/echo|"); ok {
				byPort[strings.Split(name, "|")[0]] = rc
			}
		}
		for _, tc := range tests {
			t.Run(fl.String()+"/"+tc.name, func(t *testing.T) {
				want := tc.envoy
				if fl == GRPC {
					if tc.grpcSet {
						want = tc.grpc
					}
					want = strings.ReplaceAll(strings.ReplaceAll(want, v1, v1+"|grpc"), v2, v2+"|grpc")
					// gRPC neither modifies headers nor rewrites: left out.
					want = regexp.MustCompile(`; (req|resp|prefix_rewrite|regex_rewrite) [^;]*| \(req [^)]*\)`).ReplaceAllString(want, "")
				}
				rc := byPort[tc.port]
				if rc == nil {
					t.Fatalf("no routes for echo:%s", tc.port)
				}
				if got := outcome(pickRoute(rc, tc.req)); got != want {
					t.Errorf("%+v: %s, want %s", tc.req, got, want)
				}
			})
		}
		// Only Envoy mirrors.
		split := pickRoute(byPort["80"], request{path: "/split"})
		mirrors := split.GetRoute().GetRequestMirrorPolicies()
		switch {
		case fl == Envoy && (len(mirrors) != 1 || mirrors[0].GetCluster() != "default/mirror" || mirrors[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 333333):
			t.Errorf("envoy mirror policies = %v, want default/mirror at 1/3", mirrors)
		case fl == GRPC && len(mirrors) != 0:
			t.Errorf("grpc mirror policies = %v, want none", mirrors)
		}
		// Retries: Envoy only; the backend request timeout bounds each attempt.
		retry := pickRoute(byPort["80"], request{path: "/retry/x"}).GetRoute()
		rp := retry.GetRetryPolicy()
		switch {
		case fl == Envoy && (rp.GetRetryOn() != "retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{503, 504}) ||
			rp.GetNumRetries().GetValue() != 2 || rp.GetRetryBackOff().GetBaseInterval().AsDuration().String() != "100ms" ||
			rp.GetPerTryTimeout().AsDuration().String() != "1s" || retry.GetTimeout().AsDuration().String() != "5s"):
			t.Errorf("envoy retry route = %v", retry)
		case fl == GRPC && rp != nil:
			t.Errorf("grpc retry policy = %v, want none (gRPC retries by gRPC status)", rp)
		}
		// The request timeout: the shorter of request (10s) and backendRequest (2s).
		if fl == Envoy && split.GetRoute().GetTimeout().AsDuration().String() != "2s" {
			t.Errorf("envoy timeout = %v, want 2s", split.GetRoute().GetTimeout())
		}
		if fl == GRPC && split.GetRoute().GetMaxStreamDuration().GetMaxStreamDuration().AsDuration().String() != "2s" {
			t.Errorf("grpc max stream duration = %v, want 2s", split.GetRoute().GetMaxStreamDuration())
		}
	}
}
