package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// gwServices are the Services the Gateway API tests route between.
const gwServices = `apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 7070, appProtocol: grpc}
  - {name: tcp, port: 9090, appProtocol: tcp}
---
apiVersion: v1
kind: Service
metadata: {name: echo-v1}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 7070, appProtocol: grpc}
---
apiVersion: v1
kind: Service
metadata: {name: echo-v2}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: grpc, port: 7070, appProtocol: grpc}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: other}
spec:
  ports:
  - {name: http, port: 80}
`

const routeHead = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 80}]
`

func rule(body string) string {
	return routeHead + "  rules:\n  - " + strings.ReplaceAll(strings.TrimSpace(body), "\n", "\n    ") + "\n"
}

const v1Backend = "backendRefs: [{name: echo-v1, port: 80}]"

func TestGatewayRouteInvalid(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // a part of the one error
	}{
		{"parent is a ListenerSet", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{kind: ListenerSet, name: gw}]\n",
			`spec.parentRefs[0]: parent ListenerSet (group "gateway.networking.k8s.io") is not supported: a route attaches to a Service (group: "", kind: Service; the mesh profile, GAMMA) or to a Gateway (group: gateway.networking.k8s.io, kind: Gateway)`},
		{"no parentRefs", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {}\n", "spec.parentRefs: no parentRefs"},
		{"bad hostname", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}]\n  hostnames: [\"Shop.Example.com\"]\n  rules: [{" + v1Backend + "}]\n",
			`spec.hostnames[0]: "Shop.Example.com": Hostname value must only contain valid characters`},
		{"same parent twice without sectionName", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}, {group: \"\", kind: Service, name: echo}]\n  rules: [{" + v1Backend + "}]\n",
			"sectionName must be specified when parentRefs includes 2 or more references to the same parent"},
		{"path not absolute", rule("matches: [{path: {type: PathPrefix, value: foo}}]\n" + v1Backend), "value must be an absolute path and start with '/'"},
		{"path with //", rule("matches: [{path: {type: Exact, value: /a//b}}]\n" + v1Backend), "must not contain '//'"},
		{"path ending /..", rule("matches: [{path: {type: Exact, value: /a/..}}]\n" + v1Backend), "must not end with '/..'"},
		{"path bad characters", rule("matches: [{path: {type: Exact, value: \"/a b\"}}]\n" + v1Backend), "must only contain valid characters"},
		{"path type", rule("matches: [{path: {type: Glob, value: /a}}]\n" + v1Backend), "type must be one of ['Exact', 'PathPrefix', 'RegularExpression']"},
		{"bad path regex", rule("matches: [{path: {type: RegularExpression, value: \"/(a\"}}]\n" + v1Backend), `invalid RE2 regular expression "/(a"`},
		{"path regex too complex", rule("matches: [{path: {type: RegularExpression, value: \"/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}/[a-z]{1000}\"}}]\n" + v1Backend), "is too complex"},
		{"header name", rule("matches: [{headers: [{name: \"x y\", value: a}]}]\n" + v1Backend), `"x y" is not a header name`},
		{"header twice", rule("matches: [{headers: [{name: X-A, value: a}, {name: x-a, value: b}]}]\n" + v1Backend), `"x-a" is matched twice`},
		{"bad header regex", rule("matches: [{headers: [{name: x, type: RegularExpression, value: \"(\"}]}]\n" + v1Backend), "invalid RE2 regular expression"},
		{"query type", rule("matches: [{queryParams: [{name: q, type: Prefix, value: a}]}]\n" + v1Backend), `unsupported type "Prefix": want Exact or RegularExpression`},
		{"method", rule("matches: [{method: GIT}]\n" + v1Backend), `unsupported method "GIT"`},
		{"redirect with backends", rule("filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301}}]\n" + v1Backend), "RequestRedirect filter must not be used together with backendRefs"},
		{"redirect and rewrite", rule("filters: [{type: RequestRedirect, requestRedirect: {}}, {type: URLRewrite, urlRewrite: {hostname: a.b}}]"), "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both"},
		{"filter field of another type", rule("filters: [{type: RequestHeaderModifier, responseHeaderModifier: {set: [{name: a, value: b}]}}]\n" + v1Backend), "filter.responseHeaderModifier must be nil if the filter.type is not ResponseHeaderModifier"},
		{"filter repeated", rule("filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: a, value: b}]}}, {type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: a, value: b}]}}]\n" + v1Backend), "RequestHeaderModifier filter cannot be repeated"},
		{"prefix rewrite needs one prefix match", rule("matches: [{path: {type: Exact, value: /a}}]\nfilters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]\n" + v1Backend), "When using URLRewrite filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"},
		{"path modifier fields", rule("filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replacePrefixMatch: /b}}}]\n" + v1Backend), "replaceFullPath must be specified when type is set to 'ReplaceFullPath'"},
		{"redirect status", rule("filters: [{type: RequestRedirect, requestRedirect: {statusCode: 300}}]"), "unsupported status code 300"},
		{"redirect scheme", rule("filters: [{type: RequestRedirect, requestRedirect: {scheme: ftp}}]"), `unsupported scheme "ftp"`},
		{"mirror percent and fraction", rule("filters: [{type: RequestMirror, requestMirror: {backendRef: {name: echo-v2, port: 80}, percent: 10, fraction: {numerator: 1}}}]\n" + v1Backend), "Only one of percent or fraction may be specified in HTTPRequestMirrorFilter"},
		{"mirror fraction", rule("filters: [{type: RequestMirror, requestMirror: {backendRef: {name: echo-v2, port: 80}, fraction: {numerator: 3, denominator: 2}}}]\n" + v1Backend), "numerator must be less than or equal to denominator"},
		{"mirror port", rule("filters: [{type: RequestMirror, requestMirror: {backendRef: {name: echo-v2}}}]\n" + v1Backend), "Must have port for Service reference"},
		{"CORS unsupported", rule("filters: [{type: CORS, cors: {allowOrigins: [\"*\"]}}]\n" + v1Backend), "filter CORS is not supported on a rule"},
		{"extensionRef unsupported", rule("filters: [{type: ExtensionRef, extensionRef: {group: x, kind: Y, name: z}}]\n" + v1Backend), "filter ExtensionRef is not supported on a rule"},
		{"mirror on a backendRef unsupported", rule("backendRefs: [{name: echo-v1, port: 80, filters: [{type: RequestMirror, requestMirror: {backendRef: {name: echo-v2, port: 80}}}]}]"), "filter RequestMirror is not supported on a backendRef"},
		{"backend port missing", rule("backendRefs: [{name: echo-v1}]"), "Must have port for Service reference"},
		{"backend kind", rule("backendRefs: [{group: example.com, kind: Bucket, name: b, port: 80}]"), `backend Bucket (group "example.com") is not supported`},
		{"weight", rule("backendRefs: [{name: echo-v1, port: 80, weight: 1000001}]"), "weight 1000001 is out of range: want 0-1000000"},
		{"timeouts", rule("timeouts: {request: 1s, backendRequest: 2s}\n" + v1Backend), "backendRequest timeout cannot be longer than request timeout"},
		{"timeout format", rule("timeouts: {request: 1.5s}\n" + v1Backend), `"1.5s" is not a Gateway API duration`},
		{"retry attempts", rule("retry: {attempts: 0}\n" + v1Backend), "spec.rules[0].retry.attempts: 0: want 1 or more"},
		{"retry codes", rule("retry: {codes: [503, 302]}\n" + v1Backend), "spec.rules[0].retry.codes[1]: status code 302 is out of range: want 400-599"},
		{"retry backoff", rule("retry: {backoff: 1.5s}\n" + v1Backend), `"1.5s" is not a Gateway API duration`},
		{"rule names unique", routeHead + "  rules:\n  - {name: a, " + v1Backend + "}\n  - {name: a, " + v1Backend + "}\n", "Rule name must be unique within the route"},
		{"unknown field", rule("matchs: []\n" + v1Backend), `unknown field "matchs"`},
		{"grpc method needs service or method", "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}]\n  rules: [{matches: [{method: {type: Exact}}], " + v1Backend + "}]\n",
			"One or both of 'service' or 'method' must be specified"},
		{"grpc service characters", "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}]\n  rules: [{matches: [{method: {service: \"a/b\"}}], " + v1Backend + "}]\n",
			"service must only contain valid characters"},
		{"grpc method characters", "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}]\n  rules: [{matches: [{method: {method: \"1a\"}}], " + v1Backend + "}]\n",
			"method must only contain valid characters"},
		{"grpc redirect has no field", "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g}\nspec:\n  parentRefs: [{group: \"\", kind: Service, name: echo}]\n  rules: [{filters: [{type: ExtensionRef, extensionRef: {group: a, kind: B, name: c}}], " + v1Backend + "}]\n",
			"filter ExtensionRef is not supported on a rule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { parseFails(t, tc.in, tc.want) })
	}
}

// TestGatewayCELRulesCovered reads every CEL rule of the upstream CRDs of
// HTTPRoute and GRPCRoute (standard channel) and checks that the
// validation here says each one's message, or refuses the field it is
// about as unsupported.
func TestGatewayCELRulesCovered(t *testing.T) {
	dir := moduleDir(t, "sigs.k8s.io/gateway-api@"+gatewayAPIVersion(t))
	var src []byte
	for _, f := range []string{"gateway.go", "gateway_kind.go", "gateway_l4.go", "gateway/routes.go", "gateway/filters.go", "gateway/listeners.go", "gateway/defaults.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	unsupported := []string{"cors", "CORS", "AllowHeaders", "AllowMethods", "AllowOrigins", "externalAuth", "extensionRef", "ExtensionRef",
		// Gateway fields refused as unsupported: infrastructure's labels
		// and annotations, addresses, the Gateway's tls.
		"Annotation", "annotation key", "Label keys", "label key", "IPAddress", "Hostname values must be unique",
		"Hostname value must be empty", "Port for TLS configuration"}
	for _, crd := range []string{"httproutes", "grpcroutes", "gateways", "tcproutes", "tlsroutes"} {
		b, err := os.ReadFile(filepath.Join(dir, "config", "crd", "standard", "gateway.networking.k8s.io_"+crd+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var msgs []string
		var walk func(any)
		walk = func(n any) {
			switch x := n.(type) {
			case map[string]any:
				if vs, ok := x["x-kubernetes-validations"].([]any); ok {
					for _, v := range vs {
						msgs = append(msgs, v.(map[string]any)["message"].(string))
					}
				}
				for _, c := range x {
					walk(c)
				}
			case []any:
				for _, c := range x {
					walk(c)
				}
			}
		}
		walk(doc)
		if len(msgs) < 4 {
			t.Fatalf("%s: found only %d CEL rules", crd, len(msgs))
		}
		for _, m := range msgs {
			if strings.Contains(string(src), m) || strings.Contains(string(src), strings.ReplaceAll(m, "%", "%%")) ||
				strings.Contains(string(src), strings.ReplaceAll(m, `\`, `\\`)) { // as a Go string literal
				continue
			}
			if generic := genericCEL(m); generic != "" && strings.Contains(string(src), generic) {
				continue
			}
			if containsAny(m, unsupported) {
				continue // the filter or field is refused as unsupported
			}
			t.Errorf("%s: CEL rule %q is not checked", crd, m)
		}
	}
}

// genericCEL maps the CRD's per-type messages to the format string that
// says them all.
func genericCEL(m string) string {
	switch {
	case strings.HasPrefix(m, "filter.") && strings.Contains(m, "must be nil if the filter.type is not"):
		return "filter.%s must be nil if the filter.type is not %s"
	case strings.HasPrefix(m, "filter.") && strings.Contains(m, "must be specified for"):
		return "filter.%s must be specified for %s filter.type"
	case strings.HasSuffix(m, "filter cannot be repeated"):
		return "%s filter cannot be repeated"
	case strings.HasPrefix(m, "must not contain '"):
		return "must not contain '%s' when type one of ['Exact', 'PathPrefix']"
	case strings.HasPrefix(m, "must not end with '"):
		return "must not end with '%s' when type one of ['Exact', 'PathPrefix']"
	case strings.HasPrefix(m, "When using") || strings.HasPrefix(m, "Within backendRefs"):
		return "When using %s filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified"
	case strings.HasPrefix(m, "service must only") || strings.HasPrefix(m, "method must only"):
		return "%s must only contain valid characters (matching %s)"
	}
	return ""
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// runGo runs the go command (the one running the tests).
func runGo(args ...string) ([]byte, error) {
	return exec.Command("go", args...).Output()
}

// gatewayAPIVersion is the sigs.k8s.io/gateway-api version go.mod pins.
func gatewayAPIVersion(t *testing.T) string {
	t.Helper()
	out, err := runGo("list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/gateway-api")
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// moduleDir returns the directory of module path@version in the module
// cache, downloading it when missing.
func moduleDir(t *testing.T, mod string) string {
	t.Helper()
	path, ver, _ := strings.Cut(mod, "@")
	out, err := runGo("mod", "download", "-json", path+"@"+ver)
	if err != nil {
		t.Fatalf("go mod download %s: %v", mod, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: no directory (%v)", mod, err)
	}
	return m.Dir
}

func applyYAML(t *testing.T, s *Spec, y string) BatchResult {
	t.Helper()
	res, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func TestGatewayRouteStatus(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	applyYAML(t, s, routeHead+"  rules:\n  - backendRefs: [{name: echo-v1, port: 80, weight: 9}, {name: echo-v3, port: 80, weight: 1}]\n")
	o, err := s.Snapshot().Object(Key{Kind: KindHTTPRoute, Namespace: "default", Name: "r"})
	if err != nil {
		t.Fatal("get: not found")
	}
	st := o.(*HTTPRoute).Status
	if st == nil || len(st.Parents) != 1 {
		t.Fatalf("status = %+v, want one parent", st)
	}
	ps := st.Parents[0]
	if ps.ControllerName != ControllerName || ps.ParentRef.Name != "echo" {
		t.Errorf("parent status = %+v", ps)
	}
	type cond struct{ Type, Status, Reason string }
	var got []cond
	for _, c := range ps.Conditions {
		got = append(got, cond{c.Type, string(c.Status), c.Reason})
	}
	want := []cond{{"Accepted", "True", "Accepted"}, {"ResolvedRefs", "False", "BackendNotFound"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if !strings.Contains(ps.Conditions[1].Message, `spec.rules[0].backendRefs[1]: service "echo-v3" not found`) {
		t.Errorf("ResolvedRefs message = %q", ps.Conditions[1].Message)
	}
	// Once the backend exists, every ref resolves.
	applyYAML(t, s, "apiVersion: v1\nkind: Service\nmetadata: {name: echo-v3}\nspec: {ports: [{port: 80}]}\n")
	o, _ = s.Snapshot().Object(Key{Kind: KindHTTPRoute, Namespace: "default", Name: "r"})
	if c := o.(*HTTPRoute).Status.Parents[0].Conditions[1]; c.Status != "True" {
		t.Errorf("ResolvedRefs after the Service was applied = %+v", c)
	}
	// Applying what get returned changes nothing (status is output only).
	b, _ := json.Marshal(o)
	if res := applyYAML(t, s, string(b)); res.Results[0].Action != Unchanged {
		t.Errorf("re-apply of get's output: %s, want unchanged", res.Results[0].Action)
	}
}

// TestGatewayRuleWithoutBackends: valid in the Gateway API (its calls
// fail with 500), so applied with a warning.
func TestGatewayRuleWithoutBackends(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	res := applyYAML(t, s, rule("matches: [{path: {value: /}}]"))
	want := []string{"HTTPRoute default/r (document 1, line 1): spec.rules[0].backendRefs: no backendRefs: every call this rule matches fails with 500 (name the Services to send them to)"}
	if diff := cmp.Diff(want, res.Results[0].Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestGatewayAndTrafficSplitConflict(t *testing.T) {
	split := "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: echo\n  backends: [{service: echo-v1, weight: 1}]\n"
	route := routeHead + "  rules: [{" + v1Backend + "}]\n"
	for _, tc := range []struct{ name, first, second, want string }{
		{"route onto a split root", split, route, "spec.parentRefs[0]: Service default/echo is the root of the SMI TrafficSplit default/s: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both"},
		{"split onto a route parent", route, split, "spec.service: Service default/echo is the parent of HTTPRoute default/r: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both"},
		{"both in one batch", "", split + "---\n" + route, "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			applyYAML(t, s, gwServices)
			if tc.first != "" {
				applyYAML(t, s, tc.first)
			}
			_, err := s.Apply(t.Context(), mustParse(t, tc.second), ApplyOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestGatewayCrossNamespaceBackends(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	route := routeHead + "  rules: [{backendRefs: [{name: other, namespace: other, port: 80}]}]\n"
	_, err := s.Apply(t.Context(), mustParse(t, route), ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), `Service other/other is in another namespace and no ReferenceGrant in namespace "other" allows HTTPRoutes from namespace "default" to refer to it`) {
		t.Fatalf("Apply without a ReferenceGrant: %v", err)
	}
	grant := "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: g, namespace: other}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]\n  to: [{group: \"\", kind: Service}]\n"
	applyYAML(t, s, grant+"---\n"+route)
	// The grant cannot go while the route relies on it.
	_, err = s.Delete(t.Context(), []Key{{Kind: KindReferenceGrant, Namespace: "other", Name: "g"}}, false)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "HTTPRoute default/r still refers to it") {
		t.Fatalf("Delete the grant: %v, want a conflict naming the route", err)
	}
	// Nor the backend, nor the parent.
	for _, k := range []Key{{Kind: KindService, Namespace: "other", Name: "other"}, {Kind: KindService, Namespace: "default", Name: "echo"}} {
		if _, err := s.Delete(t.Context(), []Key{k}, false); !errors.Is(err, ErrConflict) {
			t.Errorf("Delete %s: %v, want a conflict", k, err)
		}
	}
	// With the route, they all go.
	if _, err := s.Delete(t.Context(), []Key{{Kind: KindHTTPRoute, Namespace: "default", Name: "r"}, {Kind: KindReferenceGrant, Namespace: "other", Name: "g"}}, false); err != nil {
		t.Fatalf("Delete route and grant: %v", err)
	}
}

func TestGatewayRoutesOrderAndPrecedence(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices)
	applyYAML(t, s, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: b}
spec:
  parentRefs: [{group: "", kind: Service, name: echo}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: echo-v1, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v2}}, {path: {type: Exact, value: /exact}}]
    backendRefs: [{name: echo-v2, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: a}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, port: 80}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}, headers: [{name: x, value: "1"}]}]
    backendRefs: [{name: echo-v1, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: g}
spec:
  parentRefs: [{group: "", kind: Service, name: echo}]
  rules:
  - backendRefs: [{name: echo-v2, port: 7070}]
`)
	snap := s.Snapshot()
	echo := mesh.MeshService{Namespace: "default", Name: "echo"}
	g, ok := snap.GatewayRoutes(echo, 80, "default")
	if !ok {
		t.Fatal("no routes on echo:80")
	}
	var got []string
	for _, x := range g.Rules {
		got = append(got, fmt.Sprintf("%s/%d/%d", x.Route.Name, x.Rule, x.Match))
	}
	want := []string{"b/1/1", "a/0/0", "b/1/0", "b/0/0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rule order (-want +got):\n%s", diff)
	}
	// On the gRPC port the GRPCRoute takes precedence over HTTPRoute b.
	g, ok = snap.GatewayRoutes(echo, 7070, "default")
	if !ok || g.Kind != KindGRPCRoute || len(g.Rules) != 1 {
		t.Errorf("echo:7070 routes = %+v, want the GRPCRoute alone", g)
	}
	// Nothing attaches to the TCP port.
	if _, ok := snap.GatewayRoutes(echo, 9090, "default"); ok {
		t.Error("a route attached to the tcp port")
	}
	// Callers that may reach a backend get the parent as an upstream.
	ups := snap.Upstreams(mesh.ServiceAccount{Namespace: "default", Name: "client"})
	if len(ups) != 0 {
		t.Errorf("upstreams without any TrafficTarget = %v", ups)
	}
}

func TestGatewayConsumerRoutes(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, gwServices+"---\napiVersion: v1\nkind: Service\nmetadata: {name: client, namespace: consumer}\nspec: {ports: [{port: 80}]}\n")
	applyYAML(t, s, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mine, namespace: consumer}
spec:
  parentRefs: [{group: "", kind: Service, name: echo, namespace: default}]
  rules:
  - backendRefs: [{name: echo, namespace: default, port: 80}]
    filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: x, value: consumer}]}}]
`)
	snap := s.Snapshot()
	echo := mesh.MeshService{Namespace: "default", Name: "echo"}
	g, ok := snap.GatewayRoutes(echo, 80, "consumer")
	if !ok || g.Consumer != "consumer" || len(g.Rules) != 1 || !g.Rules[0].Backends[0].Valid {
		t.Errorf("consumer routes = %+v", g)
	}
	if _, ok := snap.GatewayRoutes(echo, 80, "default"); ok {
		t.Error("a consumer route applies to callers of another namespace")
	}
	if f := g.Rules[0].Filters; len(f) != 1 || f[0].Type != gwv1.HTTPRouteFilterResponseHeaderModifier {
		t.Errorf("consumer route filters = %+v", f)
	}
}

// An HTTPRoute with a timeout on a grpc port warns that C-core 1.51
// clients end its calls at once; one on an http port, or with a 0s
// timeout (none), does not.
func TestApplyRouteTimeoutProxylessWarning(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{name: http, port: 80}, {name: rpc, port: 9000, appProtocol: grpc}]}
`)
	res := applyYAML(t, s, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rpc, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: web, port: 9000}]
  rules:
    - backendRefs: [{name: web, port: 9000}]
      timeouts: {request: 500ms}
    - matches: [{path: {type: PathPrefix, value: /slow}}]
      backendRefs: [{name: web, port: 9000}]
      timeouts: {request: 0s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: web, port: 80}]
  rules:
    - backendRefs: [{name: web, port: 80}]
      timeouts: {request: 500ms}
`)
	var got []string
	for _, r := range res.Results {
		got = append(got, r.Warnings...)
	}
	want := []string{`HTTPRoute shop/rpc (document 1, line 1): spec.rules[0].timeouts: proxyless gRPC clients of the route's grpc ports get it as max_stream_duration: gRPC-Go and grpc-js end a call at it, but C-core 1.51 (Debian 12's python3-grpcio) ends every call far sooner, within milliseconds, with DEADLINE_EXCEEDED: give a route that C-core clients call no timeout`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
