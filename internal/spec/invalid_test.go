package spec

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const svcHead = "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web, namespace: default}\n"

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown field", svcHead + "spec:\n  ports:\n    - {port: 80, prot: 81}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports[0].prot: unknown field \"prot\": remove it or use one of appProtocol, name, port, targetPort",
		}},
		{"unknown top-level field", svcHead + "spek: {}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spek: unknown field \"spek\": remove it or use one of apiVersion, kind, metadata, spec, status (did you mean \"spec\"?)",
		}},
		{"wrong apiVersion", "apiVersion: access.smi-spec.io/v1alpha2\nkind: TrafficTarget\nmetadata: {name: a}\n", []string{
			"TrafficTarget default/a (web.yaml document 1, line 1): apiVersion: TrafficTarget needs apiVersion \"access.smi-spec.io/v1alpha3\", not \"access.smi-spec.io/v1alpha2\"",
		}},
		{"unknown kind", "apiVersion: osm-vm.io/v1alpha1\nkind: Servce\nmetadata: {name: a}\n", []string{
			"Servce a (web.yaml document 1, line 1): kind: unsupported kind \"Servce\": want one of osm-vm.io/v1alpha1 MeshConfig, osm-vm.io/v1alpha1 Service, specs.smi-spec.io/v1alpha4 HTTPRouteGroup, specs.smi-spec.io/v1alpha4 TCPRoute, access.smi-spec.io/v1alpha3 TrafficTarget, split.smi-spec.io/v1alpha4 TrafficSplit, osm-vm.io/v1alpha1 EgressGateway, osm-vm.io/v1alpha1 Egress, gateway.networking.k8s.io/v1 Gateway, gateway.networking.k8s.io/v1beta1 ReferenceGrant, gateway.networking.k8s.io/v1 HTTPRoute, gateway.networking.k8s.io/v1 GRPCRoute, gateway.networking.k8s.io/v1 TLSRoute, policy.openservicemesh.io/v1alpha1 UpstreamTrafficSetting, policy.openservicemesh.io/v1alpha1 Retry, osm-vm.io/v1alpha1 BackendTrafficPolicy, v1 Service, gateway.networking.k8s.io/v1beta1 HTTPRoute, gateway.networking.k8s.io/v1 ReferenceGrant, gateway.networking.k8s.io/v1beta1 Gateway, gateway.networking.k8s.io/v1 TCPRoute, gateway.networking.k8s.io/v1alpha2 TCPRoute, gateway.networking.k8s.io/v1alpha2 TLSRoute (did you mean \"Service\"?)",
		}},
		{"missing kind", "apiVersion: osm-vm.io/v1alpha1\nmetadata: {name: a}\n", []string{
			"document a (web.yaml document 1, line 1): kind: missing: want one of osm-vm.io/v1alpha1 MeshConfig, osm-vm.io/v1alpha1 Service, specs.smi-spec.io/v1alpha4 HTTPRouteGroup, specs.smi-spec.io/v1alpha4 TCPRoute, access.smi-spec.io/v1alpha3 TrafficTarget, split.smi-spec.io/v1alpha4 TrafficSplit, osm-vm.io/v1alpha1 EgressGateway, osm-vm.io/v1alpha1 Egress, gateway.networking.k8s.io/v1 Gateway, gateway.networking.k8s.io/v1beta1 ReferenceGrant, gateway.networking.k8s.io/v1 HTTPRoute, gateway.networking.k8s.io/v1 GRPCRoute, gateway.networking.k8s.io/v1 TLSRoute, policy.openservicemesh.io/v1alpha1 UpstreamTrafficSetting, policy.openservicemesh.io/v1alpha1 Retry, osm-vm.io/v1alpha1 BackendTrafficPolicy, v1 Service, gateway.networking.k8s.io/v1beta1 HTTPRoute, gateway.networking.k8s.io/v1 ReferenceGrant, gateway.networking.k8s.io/v1beta1 Gateway, gateway.networking.k8s.io/v1 TCPRoute, gateway.networking.k8s.io/v1alpha2 TCPRoute, gateway.networking.k8s.io/v1alpha2 TLSRoute",
		}},
		{"port out of range", svcHead + "spec:\n  ports:\n    - {port: 70000}\n    - {port: 0}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports[0].port: port 70000 is out of range: want 1-65535",
			"Service default/web (web.yaml document 1, line 1): spec.ports[1].port: port 0 is out of range: want 1-65535",
		}},
		{"duplicate port", svcHead + "spec:\n  ports:\n    - {name: a, port: 80}\n    - {name: b, port: 80}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports[1].port: duplicate port 80 (also spec.ports[0]): give each port once",
		}},
		{"bad appProtocol", svcHead + "spec:\n  ports:\n    - {port: 80, appProtocol: htp}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports[0].appProtocol: unsupported appProtocol \"htp\": want http, tcp or grpc (did you mean \"http\"?)",
		}},
		{"no ports", svcHead + "spec: {}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports: a Service needs at least one port: add one such as {name: http, port: 8080, appProtocol: http}",
		}},
		{"port is a string", svcHead + "spec:\n  ports:\n    - {port: eighty}\n", []string{
			"Service default/web (web.yaml document 1, line 1): spec.ports[0].port: got the string \"eighty\", want a whole number",
		}},
		{"bad name", "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: Web_1}\nspec: {ports: [{port: 80}]}\n", []string{
			"Service default/Web_1 (web.yaml document 1, line 1): metadata.name: name \"Web_1\" is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)",
		}},
		{"weights sum to zero", "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: web\n  backends:\n    - {service: web-v1, weight: 0}\n", []string{
			"TrafficSplit default/s (web.yaml document 1, line 1): spec.backends: weights sum to 0: give at least one backend a positive weight",
		}},
		{"negative weight", "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: web\n  backends:\n    - {service: web-v1, weight: -5}\n    - {service: web-v2, weight: 10}\n", []string{
			"TrafficSplit default/s (web.yaml document 1, line 1): spec.backends[0].weight: negative weight -5: want 0 or more",
		}},
		{"weight past uint32", "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: web\n  backends:\n    - {service: web-v1, weight: 4294967296}\n    - {service: web-v2, weight: 1}\n", []string{
			"TrafficSplit default/s (web.yaml document 1, line 1): spec.backends[0].weight: weight 4294967296 is out of range: want 0-4294967295",
		}},
		{"weights sum past uint32", "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: web\n  backends:\n    - {service: web-v1, weight: 4294967295}\n    - {service: web-v2, weight: 1}\n", []string{
			"TrafficSplit default/s (web.yaml document 1, line 1): spec.backends: weights sum to 4294967296, more than 4294967295 (Envoy and gRPC refuse larger totals): scale the weights down, such as to percentages",
		}},
		{"weight too large for an integer", "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s}\nspec:\n  service: web\n  backends:\n    - {service: web-v1, weight: 18446744073709551616}\n", []string{
			"TrafficSplit default/s (web.yaml document 1, line 1): spec.backends[0].weight: got the number 1.8446744073709552e+19, want a whole number",
		}},
		{"meshconfig lifetime too long", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  certificate: {serviceLifetime: 8761h, proxyLifetime: 2562047h}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.certificate.serviceLifetime: 8761h0m0s is too long: want at most 8760h (a year), such as \"24h\"",
			"MeshConfig mesh (web.yaml document 1, line 1): spec.certificate.proxyLifetime: 2562047h0m0s is too long: want at most 8760h (a year), such as \"168h\"",
		}},
		{"meshconfig large range", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  outbound: {vipRange: 8.0.0.0/7}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.outbound.vipRange: \"8.0.0.0/7\" is too large: want /8 or smaller, such as 127.77.0.0/16",
		}},
		{"invalid path regex", "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, pathRegex: \"/books(\"}\n", []string{
			"HTTPRouteGroup default/r (web.yaml document 1, line 1): spec.matches[0].pathRegex: invalid RE2 regular expression \"/books(\": missing closing ): `/books(`",
		}},
		{"invalid header regex and method", "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, methods: [GTE], headers: {x-user: \"a**\"}}\n", []string{
			"HTTPRouteGroup default/r (web.yaml document 1, line 1): spec.matches[0].methods[0]: unsupported method \"GTE\": want one of *, GET, HEAD, POST, PUT, PATCH, DELETE, CONNECT, OPTIONS, TRACE",
			"HTTPRouteGroup default/r (web.yaml document 1, line 1): spec.matches[0].headers.x-user: invalid RE2 regular expression \"a**\": invalid nested repetition operator: `**`",
		}},
		{"regex too complex for Envoy", "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, pathRegex: \"/\\\\pL{100}\"}\n", []string{
			"HTTPRouteGroup default/r (web.yaml document 1, line 1): spec.matches[0].pathRegex: regular expression \"/\\\\pL{100}\" is too complex: its RE2 program is estimated at up to 430111 instructions, over Envoy's limit of 32768 (runtime re2.max_program_size.error_level, as osm-agent's bootstrap sets it); the estimate never counts low, so an expression near the limit may be refused that Envoy would take: use fewer repetitions, fewer non-ASCII classes or dots",
		}},
		{"lookahead is not RE2", "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, pathRegex: \"/(?!admin)\"}\n", []string{
			"HTTPRouteGroup default/r (web.yaml document 1, line 1): spec.matches[0].pathRegex: invalid RE2 regular expression \"/(?!admin)\": invalid or unsupported Perl syntax: `(?!`",
		}},
		{"tcp route port", "apiVersion: specs.smi-spec.io/v1alpha4\nkind: TCPRoute\nmetadata: {name: r}\nspec:\n  matches: {ports: [99999]}\n", []string{
			"TCPRoute default/r (web.yaml document 1, line 1): spec.matches.ports[0]: port 99999 is out of range: want 1-65535",
		}},
		{"traffic target destination kind", "apiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: t}\nspec:\n  destination: {kind: Service, name: web}\n  sources: [{kind: ServiceAccount, name: a}]\n  rules: [{kind: HTTPRouteGrup, name: r}]\n", []string{
			"TrafficTarget default/t (web.yaml document 1, line 1): spec.destination.kind: unsupported kind \"Service\": want ServiceAccount",
			"TrafficTarget default/t (web.yaml document 1, line 1): spec.rules[0].kind: unsupported rule kind \"HTTPRouteGrup\": want HTTPRouteGroup or TCPRoute (did you mean \"HTTPRouteGroup\"?)",
		}},
		{"meshconfig name and range", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: config, namespace: default}\nspec:\n  outbound: {vipRange: 10.0.0.1/8}\n", []string{
			"MeshConfig config (web.yaml document 1, line 1): metadata.namespace: MeshConfig is mesh-wide: remove metadata.namespace",
			"MeshConfig config (web.yaml document 1, line 1): metadata.name: MeshConfig is a singleton named \"mesh\", not \"config\": rename it",
			"MeshConfig config (web.yaml document 1, line 1): spec.outbound.vipRange: \"10.0.0.1/8\" has host bits set: write 10.0.0.0/8",
		}},
		{"meshconfig small range", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  outbound: {vipRange: 127.77.0.0/31}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.outbound.vipRange: \"127.77.0.0/31\" is too small: want /30 or larger, such as 127.77.0.0/16",
		}},
		{"meshconfig permissive not a bool", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  traffic: {permissive: \"yes\"}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.traffic.permissive: got the string \"yes\", want true or false",
		}},
		{"meshconfig duration", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  certificate: {serviceLifetime: 1d}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.certificate.serviceLifetime: \"1d\" is not a duration: want a value such as \"24h\" or \"90m\"",
		}},
		{"meshconfig lifetime too short", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec:\n  certificate: {serviceLifetime: 500ms, proxyLifetime: -1h}\n", []string{
			"MeshConfig mesh (web.yaml document 1, line 1): spec.certificate.serviceLifetime: 500ms is too short: want at least 1s, such as \"24h\"",
			"MeshConfig mesh (web.yaml document 1, line 1): spec.certificate.proxyLifetime: negative duration: want a positive value such as \"168h\"",
		}},
		{"yaml syntax", "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web\n", []string{
			"document (web.yaml document 1): cannot parse YAML: yaml: line 2: did not find expected ',' or '}'",
		}},
		{"second document", svcHead + "spec: {ports: [{port: 80}]}\n---\n" + svcHead + "spec: {ports: [{port: 80, targetPort: 70000}]}\n", []string{
			"Service default/web (web.yaml document 2, line 6): spec.ports[0].targetPort: port 70000 is out of range: want 1-65535",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "web.yaml")
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error = %v, want a *ValidationError", err)
			}
			var got []string
			for _, fe := range ve.Errors {
				got = append(got, fe.Error())
			}
			if os.Getenv("SPEC_DUMP") != "" {
				for _, g := range got {
					fmt.Printf("%s\t%q\n", tc.name, g)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
