package spec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
	"github.com/osm-vm/osm-vm/internal/store"
)

// osmServices are the Services OSM's documentation's demos call.
const osmServices = `apiVersion: v1
kind: Service
metadata: {name: fortio, namespace: server}
spec:
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: httpbin, namespace: httpbin}
spec:
  ports: [{name: http, port: 14001}]
---
apiVersion: v1
kind: Service
metadata: {name: curl, namespace: curl}
spec:
  ports: [{name: http, port: 80}]
`

// osmPolicies are written as OSM v1.2's documentation writes them (its
// circuit breaking, rate limiting and retry demos), and as `kubectl get
// -o yaml` returns them from a cluster (server fields and OSM's status).
const osmPolicies = `apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: http-circuit-breaking
  namespace: server
  uid: 5a0c5f61-8a0b-4b5e-9d1f-8b3f3a5b1c2d
  resourceVersion: "8712"
  creationTimestamp: "2022-06-01T10:00:00Z"
spec:
  host: fortio.server.svc.cluster.local
  connectionSettings:
    tcp:
      maxConnections: 1
    http:
      maxPendingRequests: 1
      maxRequestsPerConnection: 1
  rateLimit:
    local:
      http:
        requests: 3
        unit: minute
        responseHeadersToAdd:
        - name: x-rate-limited
          value: "true"
  httpRoutes:
  - path: /echo.*
    rateLimit:
      local:
        requests: 1
        unit: minute
        responseStatusCode: 503
status:
  currentStatus: committed
  reason: successfully committed
---
kind: Retry
apiVersion: policy.openservicemesh.io/v1alpha1
metadata:
  name: retry
  namespace: curl
spec:
  source:
    kind: ServiceAccount
    name: curl
    namespace: curl
  destinations:
  - kind: Service
    name: httpbin
    namespace: httpbin
  retryPolicy:
    retryOn: "5xx"
    perTryTimeout: 1s
    numRetries: 5
    retryBackoffBaseInterval: 1s
`

func TestApplyOSMPoliciesUnchanged(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, osmServices)
	res := applyYAML(t, s, osmPolicies)
	var warnings []string
	for _, r := range res.Results {
		warnings = append(warnings, r.Warnings...)
	}
	want := []string{"UpstreamTrafficSetting server/http-circuit-breaking (document 1, line 1): ignored (no meaning here): metadata.uid, metadata.resourceVersion, metadata.creationTimestamp, status"}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	snap := s.Snapshot()
	fortio := mesh.MeshService{Namespace: "server", Name: "fortio"}
	uts := resilience.Source("UpstreamTrafficSetting server/http-circuit-breaking")
	if got, want := snap.ServiceResilience(fortio).CircuitBreaker, (&resilience.CircuitBreaker{MaxConnections: 1, MaxPendingRequests: 1, MaxRequests: resilience.Unlimited,
		MaxRetries: resilience.Unlimited, MaxRequestsPerConnection: 1, Source: uts}); !cmp.Equal(got, want) {
		t.Errorf("ServiceResilience(fortio).CircuitBreaker = %+v, want %+v", got, want)
	}
	if got := snap.ServiceResilience(fortio).ConnectTimeout; got.Source != resilience.SourceDefault || got.Duration != 5*time.Second {
		t.Errorf("ServiceResilience(fortio).ConnectTimeout = %+v, want MeshConfig's 5s (the setting gives none)", got)
	}
	rl := snap.InboundRateLimit(fortio)
	if rl == nil || rl.HTTP == nil || rl.HTTP.TokensPerFill != 3 || rl.HTTP.FillInterval != time.Minute || len(rl.Routes) != 1 || rl.Routes[0].Limit.Status != 503 || rl.Source != uts {
		t.Errorf("InboundRateLimit(fortio) = %+v, want 3 a minute, and the /echo.* route's 1 a minute answered 503", rl)
	}
	httpbin := mesh.MeshService{Namespace: "httpbin", Name: "httpbin"}
	got := snap.CallResilience(mesh.ServiceAccount{Namespace: "curl", Name: "curl"}, httpbin, 14001).Retry
	wantRetry := &resilience.Retry{RetryOn: []string{"5xx"}, NumRetries: 5, PerTryTimeout: time.Second, BackoffBase: time.Second, BackoffMax: 10 * time.Second, Source: "Retry curl/retry"}
	if diff := cmp.Diff(wantRetry, got); diff != "" {
		t.Errorf("CallResilience(curl, httpbin).Retry (-want +got):\n%s", diff)
	}
	if got := snap.CallResilience(mesh.ServiceAccount{Namespace: "server", Name: "fortio"}, httpbin, 14001).Retry; got.Source != resilience.SourceDefault {
		t.Errorf("CallResilience(fortio, httpbin).Retry = %+v, want MeshConfig's (the Retry names curl only)", got)
	}
	// get lists them, as policies too.
	for _, kind := range []string{"upstreamtrafficsettings", "retries", "policies", "all"} {
		kinds, err := ResolveKinds(kind)
		if err != nil {
			t.Fatalf("ResolveKinds(%q): %v", kind, err)
		}
		var names []string
		for _, o := range snap.Objects(kinds...) {
			if k := o.Key(); k.Kind == KindUpstreamTrafficSetting || k.Kind == KindRetry {
				names = append(names, k.String())
			}
		}
		want := []string{"UpstreamTrafficSetting server/http-circuit-breaking", "Retry curl/retry"}
		switch kind {
		case "upstreamtrafficsettings":
			want = want[:1]
		case "retries":
			want = want[1:]
		}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("get %s (-want +got):\n%s", kind, diff)
		}
	}
	if plural, namespaced, ok := KindNames(KindBackendTrafficPolicy); plural != "backendtrafficpolicies" || !namespaced || !ok {
		t.Errorf("KindNames(BackendTrafficPolicy) = %q, %v, %v", plural, namespaced, ok)
	}
}

// Bad input is refused with the document and field named, whatever the
// stage that finds it (decoding, field rules, references).
func TestApplyResilienceErrors(t *testing.T) {
	btp := func(spec string) string {
		return "apiVersion: osm-vm.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n  targetRefs: [{group: \"\", kind: Service, name: web}]\n" + spec
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", btp("  retry: {attempt: 3}\n"), `spec.retry.attempt: unknown field "attempt": remove it or use one of attempts, backoff, budget, perTryTimeout, retryOn (did you mean "attempts"?)`},
		{"string for a number", btp("  circuitBreaker: {maxRequests: many}\n"), `spec.circuitBreaker.maxRequests: got the string "many", want a whole number`},
		{"string for a percentage", btp("  faultInjection: {abort: {httpStatus: 503, percentage: ten}}\n"), `spec.faultInjection.abort.percentage: got the string "ten", want a number`},
		{"number for a duration", btp("  timeouts: {request: 5}\n"), `spec.timeouts.request: got the number 5, want a string (quote it)`},
		{"range", btp("  outlierDetection: {consecutiveGatewayErrors: 5, maxEjectionPercent: 150}\n"), `spec.outlierDetection.maxEjectionPercent: 150 is out of range: want 0 to 100`},
		{"wrong apiVersion", "apiVersion: osm-vm.io/v1alpha1\nkind: Retry\nmetadata: {name: r}\nspec: {}\n", `apiVersion: Retry needs apiVersion "policy.openservicemesh.io/v1alpha1", not "osm-vm.io/v1alpha1"`},
		{"osm retry numRetries", "apiVersion: policy.openservicemesh.io/v1alpha1\nkind: Retry\nmetadata: {name: r, namespace: shop}\nspec:\n  source: {kind: ServiceAccount, name: web}\n  destinations: [{kind: Service, name: web}]\n  retryPolicy: {retryOn: 5xx, perTryTimeout: 1s, numRetries: -1, retryBackoffBaseInterval: 1s}\n",
			`spec.retryPolicy.numRetries: -1 is out of range: want 0 to 100`},
		{"uts duplicate host", "apiVersion: policy.openservicemesh.io/v1alpha1\nkind: UpstreamTrafficSetting\nmetadata: {name: a, namespace: shop}\nspec: {host: web, connectionSettings: {tcp: {maxConnections: 10}}}\n---\napiVersion: policy.openservicemesh.io/v1alpha1\nkind: UpstreamTrafficSetting\nmetadata: {name: b, namespace: shop}\nspec: {host: web.shop.svc.cluster.local, connectionSettings: {tcp: {maxConnections: 20}}}\n",
			`spec.host: UpstreamTrafficSetting shop/b already governs Service "web" (host "web.shop.svc.cluster.local"): put the settings in one of them and delete the other`},
		{"meshconfig defaults", "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {resilience: {timeouts: {connect: 0s}}}\n", `spec.resilience.timeouts.connect: 0s is out of range: want 1ms to 5m0s, such as "5s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			applyYAML(t, s, "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {ports: [{name: http, port: 80}]}\n")
			docs, err := Parse([]byte(tt.yaml), "")
			if err == nil {
				_, err = s.Apply(t.Context(), docs, ApplyOptions{})
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n got: %s\nwant it to contain: %s", err, tt.want)
			}
		})
	}
}

func TestApplyResilienceWarnings(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{name: http, port: 80}, {name: admin, port: 9000}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: a, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  timeouts: {request: 3s}
`)
	res := applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: b, namespace: shop}
spec:
  targetRefs:
  - {group: "", kind: Service, name: web}
  - {group: "", kind: Service, name: wep}
  - {group: "", kind: Service, name: web, sectionName: admn}
  timeouts: {request: 5s}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: r, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: wep}
  destinations: [{kind: Service, name: webb}]
  retryPolicy: {retryOn: "connect-failure,retriable-status-codes", perTryTimeout: 0s, numRetries: 2, retryBackoffBaseInterval: 25ms}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: u, namespace: shop}
spec:
  host: wb
  rateLimit: {global: {http: {domain: shop}}}
`)
	var got []string
	for _, r := range res.Results {
		got = append(got, r.Warnings...)
	}
	want := []string{
		`BackendTrafficPolicy shop/b (document 1, line 1): spec.targetRefs[1].name: Service "wep" not found in namespace "shop" yet: the policy applies to nothing there until it exists (did you mean "web"?)`,
		`BackendTrafficPolicy shop/b (document 1, line 1): spec.targetRefs[2].sectionName: Service "web" has no port named "admn" (its named ports: http, admin): the policy applies to none of its calls until one is (did you mean "admin"?)`,
		`BackendTrafficPolicy shop/b (document 1, line 1): spec.targetRefs: BackendTrafficPolicy shop/a also sets timeouts for Service web: "a" wins (the first by name); merge them into one policy`,
		`Retry shop/r (document 2, line 11): spec.retryPolicy.retryOn: "retriable-status-codes" retries nothing here: a Retry cannot give the status codes or headers it needs; use 5xx or gateway-error`,
		`Retry shop/r (document 2, line 11): spec.source: no Service runs as service account "wep" in namespace "shop" yet: the retry applies to no caller until one does (did you mean "web"?)`,
		`Retry shop/r (document 2, line 11): spec.destinations[0]: Service "webb" not found in namespace "shop" yet: the retry applies to no call to it until it exists (did you mean "web"?)`,
		`UpstreamTrafficSetting shop/u (document 3, line 19): spec.rateLimit.global: ignored: the mesh runs no global rate limit service; use rateLimit.local, which the Service's own proxies enforce`,
		`UpstreamTrafficSetting shop/u (document 3, line 19): spec.host: Service "wb" not found in namespace "shop" yet: the setting applies to nothing until it exists (did you mean "web"?)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// The snapshot's queries answer per Service, port and caller, and
// MeshConfig's defaults govern what no policy sets.
func TestSnapshotResilienceQueries(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  resilience:
    timeouts: {request: 20s}
    retry: {disabled: true}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{name: http, port: 80}, {name: rpc, port: 9000, appProtocol: grpc}, {name: db, port: 5432, appProtocol: tcp}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: other, namespace: shop}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: web, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  timeouts: {connect: 1s, idle: 1m}
  loadBalancer: {type: LeastRequest, leastRequest: {choiceCount: 3}}
  outlierDetection: {failurePercentage: {threshold: 50}}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: web-rpc, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web, sectionName: rpc}]
  timeouts: {request: 2s}
  retry: {attempts: 3, retryOn: [unavailable], perTryTimeout: 500ms}
  faultInjection: {abort: {grpcStatus: 14, percentage: 10}}
`)
	snap := s.Snapshot()
	web := mesh.MeshService{Namespace: "shop", Name: "web"}
	caller := mesh.ServiceAccount{Namespace: "shop", Name: "other"}
	pol := func(name string) resilience.Source {
		return resilience.SourceOf(KindBackendTrafficPolicy, "shop", name)
	}
	c := snap.ServiceResilience(web)
	if c.ConnectTimeout.Duration != time.Second || c.ConnectTimeout.Source != pol("web") ||
		c.LoadBalancer.Type != resilience.LeastRequest || c.LoadBalancer.ChoiceCount != 3 ||
		c.OutlierDetection.FailurePercentage.Threshold != 50 || c.OutlierDetection.ConsecutiveGatewayErrors != 0 || c.OutlierDetection.Source != pol("web") {
		t.Errorf("ServiceResilience(web) = %+v", c)
	}
	tests := []struct {
		name string
		svc  mesh.MeshService
		port int
		want resilience.Route
	}{
		{"http port", web, 80, resilience.Route{
			RequestTimeout: &resilience.Timeout{Duration: 20 * time.Second, Source: resilience.SourceDefault},
			IdleTimeout:    &resilience.Timeout{Duration: time.Minute, Source: pol("web")},
		}},
		{"grpc port", web, 9000, resilience.Route{
			RequestTimeout: &resilience.Timeout{Duration: 2 * time.Second, Source: pol("web-rpc")},
			IdleTimeout:    &resilience.Timeout{Duration: time.Minute, Source: pol("web")},
			Retry:          &resilience.Retry{RetryOn: []string{"unavailable"}, NumRetries: 3, PerTryTimeout: 500 * time.Millisecond, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond, Source: pol("web-rpc")},
			Fault:          &resilience.Fault{Abort: &resilience.Abort{GRPCStatus: 14, PerMillion: 100000}, Source: pol("web-rpc")},
		}},
		{"tcp port", web, 5432, resilience.Route{}},
		{"no such port", web, 81, resilience.Route{}},
		{"no such service", mesh.MeshService{Namespace: "shop", Name: "nope"}, 80, resilience.Route{}},
		{"a Service no policy names", mesh.MeshService{Namespace: "shop", Name: "other"}, 80, resilience.Route{
			RequestTimeout: &resilience.Timeout{Duration: 20 * time.Second, Source: resilience.SourceDefault},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second answer is the cached one
				if diff := cmp.Diff(tt.want, snap.CallResilience(caller, tt.svc, tt.port)); diff != "" {
					t.Errorf("CallResilience (-want +got):\n%s", diff)
				}
			}
		})
	}
	if got := snap.InboundRateLimit(web); got != nil {
		t.Errorf("InboundRateLimit(web) = %+v, want nil (no UpstreamTrafficSetting)", got)
	}
}

// resilienceAnswers is every answer of the resilience queries of s, for
// the given callers, by Service, port and caller.
func resilienceAnswers(s *Snapshot, callers []mesh.ServiceAccount) map[string]any {
	out := map[string]any{}
	for _, info := range s.Services() {
		out[info.Service.String()] = s.ServiceResilience(info.Service)
		if rl := s.InboundRateLimit(info.Service); rl != nil {
			out[info.Service.String()+" inbound"] = rl
		}
		for _, p := range info.Ports {
			for _, c := range callers {
				out[fmt.Sprintf("%s:%d from %s", info.Service, p.Port, c)] = s.CallResilience(c, info.Service, p.Port)
			}
		}
	}
	return out
}

// apply warns, once per field, of what the proxyless gRPC callers of a
// Service's grpc ports ignore or replace of a policy, naming the ports;
// a policy of Services or ports without grpc gets no such warning.
func TestApplyProxylessWarnings(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{name: http, port: 80}, {name: rpc, port: 9000, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: ring, namespace: shop}
spec: {ports: [{port: 7000, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: od, namespace: shop}
spec: {ports: [{name: grpc, port: 9000, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: api, namespace: shop}
spec: {ports: [{name: http, port: 80}]}
`)
	res := applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: web, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  timeouts: {connect: 2s, request: 10s, idle: 1m}
  retry: {attempts: 5, retryOn: [unavailable, connect-failure, 5xx], perTryTimeout: 1s, backoff: {base: 50ms}, budget: {percent: 25}}
  circuitBreaker: {maxConnections: 100, maxPendingRequests: 50, maxRequests: 500, maxRetries: 10, maxRequestsPerConnection: 1000}
  outlierDetection: {consecutiveGatewayErrors: 3, failurePercentage: {threshold: 50}}
  loadBalancer: {type: LeastRequest}
  faultInjection: {abort: {grpcStatus: 14, percentage: 10}}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: web-http, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: web, sectionName: http}]
  timeouts: {request: 5s, idle: 1m}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: ring, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: ring}]
  loadBalancer: {type: RingHash, hashOn: [{header: x-user}, {sourceIP: true}, {cookie: {name: s}}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: od, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: od}]
  retry: {attempts: 3}
  outlierDetection: {consecutiveErrors: 5, consecutiveGatewayErrors: 3}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: api, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: api}]
  loadBalancer: {type: LeastRequest}
  outlierDetection: {consecutiveGatewayErrors: 3}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: web, namespace: shop}
spec:
  host: web.shop.svc.cluster.local
  connectionSettings:
    tcp: {maxConnections: 100, connectTimeout: 3s}
    http: {maxRequests: 500, maxPendingRequests: 50, maxRetries: 10, maxRequestsPerConnection: 100}
  rateLimit: {local: {http: {requests: 50, unit: second}}}
  httpRoutes: [{path: /books/.*, rateLimit: {local: {requests: 5, unit: second}}}]
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: to-ring, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: web}
  destinations: [{kind: Service, name: ring}, {kind: Service, name: api}]
  retryPolicy: {retryOn: "5xx,unavailable", perTryTimeout: 1s, numRetries: 6, retryBackoffBaseInterval: 25ms}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: to-od, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: web}
  destinations: [{kind: Service, name: od}]
  retryPolicy: {retryOn: connect-failure, perTryTimeout: 0s, numRetries: 2, retryBackoffBaseInterval: 25ms}
`)
	var got []string
	for _, r := range res.Results {
		got = append(got, r.Warnings...)
	}
	const (
		web      = `BackendTrafficPolicy shop/web (document 1, line 1): `
		webPorts = `proxyless gRPC callers of Service web's grpc port "rpc" `
		grpcOnly = `they retry on gRPC status names only (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable)`
		ejectors = `ignore it: they eject by successRate and failurePercentage only (gRFC A50); Envoy callers honour it`
		uts      = `UpstreamTrafficSetting shop/web (document 6, line 43): `
		ring     = `Retry shop/to-ring (document 7, line 54): `
		ringPort = `proxyless gRPC callers of Service ring's grpc port 7000 `
	)
	want := []string{
		web + `spec.timeouts.connect: 2s: ` + webPorts + `ignore it: gRPC's own connect timeout (20s) applies; Envoy callers honour it`,
		web + `spec.timeouts.request: 10s: ` + webPorts + `get it as max_stream_duration: gRPC-Go and grpc-js end a call at it, but C-core 1.51 (Debian 12's python3-grpcio) ends every call far sooner, within milliseconds, with DEADLINE_EXCEEDED: give a Service that C-core callers call no request timeout; Envoy callers end a call at it`,
		web + `spec.timeouts.idle: 1m: ` + webPorts + `ignore it: gRPC has no idle timeout for a call; Envoy callers honour it`,
		web + `spec.retry.retryOn: connect-failure, 5xx: ` + webPorts + `ignore them: ` + grpcOnly + `, and gRPC itself retries a call that never left the client; Envoy callers honour them`,
		web + `spec.retry.attempts: 5: ` + webPorts + `make at most 5 attempts (4 retries): gRPC caps a call's attempts at 5; Envoy callers make every retry`,
		web + `spec.retry.perTryTimeout: 1s: ` + webPorts + `ignore it: a retry may take what is left of the call's deadline; Envoy callers honour it`,
		web + `spec.retry.budget: ` + webPorts + `ignore it: only attempts bounds their retries; Envoy callers honour it`,
		web + `spec.circuitBreaker.maxConnections: 100: ` + webPorts + `ignore it: a gRPC client keeps one connection to each backend; Envoy callers honour it`,
		web + `spec.circuitBreaker.maxPendingRequests: 50: ` + webPorts + `ignore it: only maxRequests limits their calls; Envoy callers honour it`,
		web + `spec.circuitBreaker.maxRetries: 10: ` + webPorts + `ignore it: only attempts bounds their retries; Envoy callers honour it`,
		web + `spec.circuitBreaker.maxRequestsPerConnection: 1000: ` + webPorts + `ignore it: a gRPC client keeps its connection to a backend however many calls it carried; Envoy callers honour it`,
		web + `spec.outlierDetection.consecutiveGatewayErrors: ` + webPorts + ejectors,
		web + `spec.loadBalancer.type: LeastRequest: ` + webPorts + `use round robin (C-core 1.51 and grpc-js refuse least request, so no proxyless client is sent it); Envoy callers use least request`,
		`BackendTrafficPolicy shop/ring (document 3, line 20): spec.loadBalancer.hashOn[1].sourceIP: ` + ringPort + `ignore it: they hash headers only, and a call with no header to hash goes to a random backend; Envoy callers honour it`,
		`BackendTrafficPolicy shop/ring (document 3, line 20): spec.loadBalancer.hashOn[2].cookie: ` + ringPort + `ignore it: they hash headers only, and a call with no header to hash goes to a random backend; Envoy callers honour it`,
		`BackendTrafficPolicy shop/od (document 4, line 27): spec.retry: proxyless gRPC callers of Service od's grpc port "grpc" retry nothing: retryOn is connect-failure, refused-stream unless set, and ` + grpcOnly + `; add unavailable to retryOn to retry their calls; Envoy callers retry on connect-failure, refused-stream`,
		`BackendTrafficPolicy shop/od (document 4, line 27): spec.outlierDetection: consecutiveErrors, consecutiveGatewayErrors only: proxyless gRPC callers of Service od's grpc port "grpc" eject no backend: they eject by successRate and failurePercentage only (gRFC A50), counting every failed call; add failurePercentage, such as {threshold: 50, minHosts: 2} (minHosts: how many backends must have had requestVolume calls), to eject for them too; Envoy callers eject by consecutiveErrors, consecutiveGatewayErrors`,
		uts + `spec.connectionSettings.tcp.connectTimeout: 3s: ` + webPorts + `ignore it: gRPC's own connect timeout (20s) applies; Envoy callers honour it`,
		uts + `spec.connectionSettings.tcp.maxConnections: 100: ` + webPorts + `ignore it: a gRPC client keeps one connection to each backend; Envoy callers honour it`,
		uts + `spec.connectionSettings.http.maxPendingRequests: 50: ` + webPorts + `ignore it: only maxRequests limits their calls; Envoy callers honour it`,
		uts + `spec.connectionSettings.http.maxRetries: 10: ` + webPorts + `ignore it: only attempts bounds their retries; Envoy callers honour it`,
		uts + `spec.connectionSettings.http.maxRequestsPerConnection: 100: ` + webPorts + `ignore it: a gRPC client keeps its connection to a backend however many calls it carried; Envoy callers honour it`,
		uts + `spec.rateLimit.local: proxyless gRPC servers of Service web's grpc port "rpc" do not enforce it: gRPC servers have no local rate limit`,
		uts + `spec.httpRoutes[0].rateLimit.local: proxyless gRPC servers of Service web's grpc port "rpc" do not enforce it: gRPC servers have no local rate limit`,
		ring + `spec.retryPolicy.retryOn: 5xx: ` + ringPort + `ignore them: ` + grpcOnly + `, and gRPC itself retries a call that never left the client; Envoy callers honour them`,
		ring + `spec.retryPolicy.numRetries: 6: ` + ringPort + `make at most 5 attempts (4 retries): gRPC caps a call's attempts at 5; Envoy callers make every retry`,
		ring + `spec.retryPolicy.perTryTimeout: 1s: ` + ringPort + `ignore it: a retry may take what is left of the call's deadline; Envoy callers honour it`,
		`Retry shop/to-od (document 8, line 62): spec.retryPolicy.retryOn: connect-failure: proxyless gRPC callers of Service od's grpc port "grpc" retry nothing: ` + grpcOnly + `, and gRPC itself retries a call that never left the client; add unavailable to retry their calls too; Envoy callers honour them`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	// MeshConfig's defaults: outlier detection that proxyless callers
	// ignore is said, naming the Services with grpc ports; and the field
	// rules' warnings (a default retry of what may have run) are too.
	res = applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  resilience:
    retry: {retryOn: [connect-failure, 5xx]}
    outlierDetection: {interval: 5s}
`)
	got = nil
	for _, r := range res.Results {
		got = append(got, r.Warnings...)
	}
	want = []string{
		`MeshConfig mesh (document 1, line 1): spec.resilience.retry.retryOn: 5xx retry calls a backend may already have run, and this is every call in the mesh: a call that is not idempotent (a POST that pays) may run twice; keep the mesh's default to connect-failure, refused-stream, reset-before-request and retry more per Service with a BackendTrafficPolicy`,
		`MeshConfig mesh (document 1, line 1): spec.resilience.outlierDetection: consecutiveGatewayErrors only: proxyless gRPC callers of the grpc ports of Services shop/od, shop/ring and shop/web eject no backend: they eject by successRate and failurePercentage only (gRFC A50), counting every failed call; add failurePercentage, such as {threshold: 50, minHosts: 2} (minHosts: how many backends must have had requestVolume calls), to eject for them too; Envoy callers eject by consecutiveGatewayErrors`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MeshConfig warnings (-want +got):\n%s", diff)
	}
}
