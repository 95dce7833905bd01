package resilienceview_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
	"github.com/osm-vm/osm-vm/internal/store"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// shopMesh: web and batch may call db (permissive); db has an HTTP, a
// tcp and a gRPC port; policies set parts at each level of precedence.
const shopMesh = `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  traffic: {permissive: true}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  ports: [{name: http, port: 8080, appProtocol: http}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: batch, namespace: shop}
spec:
  ports: [{name: http, port: 8081, appProtocol: http}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  ports:
    - {name: web, port: 80, appProtocol: http}
    - {name: sql, port: 5432, appProtocol: tcp}
    - {name: api, port: 9090, appProtocol: grpc}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: db, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: db}]
  timeouts: {connect: 2s, idle: 1m}
  outlierDetection: {consecutiveGatewayErrors: 3, baseEjectionTime: 20s, maxEjectionPercent: 34}
  loadBalancer: {type: LeastRequest}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: db-api, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: db, sectionName: api}]
  timeouts: {request: 3s}
  faultInjection:
    abort: {grpcStatus: 14, percentage: 10}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: db, namespace: shop}
spec:
  host: db.shop.svc.cluster.local
  connectionSettings:
    http: {maxRequests: 100}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: web-retry, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: web, namespace: shop}
  destinations: [{kind: Service, name: db, namespace: shop}]
  retryPolicy: {retryOn: "5xx", perTryTimeout: 1s, numRetries: 3, retryBackoffBaseInterval: 100ms}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: db-slow, namespace: shop}
spec:
  parentRefs: [{group: "", kind: Service, name: db, port: 80}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /report}}]
      timeouts: {request: 30s}
      backendRefs: [{name: db, port: 80}]
    - backendRefs: [{name: db, port: 80}]
`

func newSpec(t *testing.T, docs string) *spec.Spec {
	t.Helper()
	s, err := spec.New(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := spec.ParseFiles([]spec.File{{Source: "shop.yaml", Data: docs}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), parsed, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestOf(t *testing.T) {
	s := newSpec(t, shopMesh)
	view, ok := resilienceview.Of(s.Snapshot(), mesh.MeshService{Namespace: "shop", Name: "db"})
	if !ok {
		t.Fatal("Of(shop/db): not found")
	}
	// The parts that show each level of precedence, checked here as well
	// as in the golden file, so that -update cannot hide a wrong source.
	part := func(parts []resilienceview.Part, name string) resilienceview.Part {
		for _, p := range parts {
			if p.Part == name {
				return p
			}
		}
		t.Fatalf("no part %s in %+v", name, parts)
		return resilienceview.Part{}
	}
	call := func(caller string, port int) resilienceview.Call {
		for _, c := range view.Calls {
			if c.Caller == caller && c.Port == port {
				return c
			}
		}
		t.Fatalf("no call from %s to port %d in %+v", caller, port, view.Calls)
		return resilienceview.Call{}
	}
	for _, c := range []struct {
		name string
		got  resilienceview.Part
		want resilienceview.Part
	}{
		{"connect timeout from the policy", part(view.Cluster, resilienceview.PartConnectTimeout), resilienceview.Part{Part: "connectTimeout", Setting: "2s", Source: "BackendTrafficPolicy shop/db"}},
		{"circuit breaker from the UpstreamTrafficSetting", part(view.Cluster, resilienceview.PartCircuitBreaker),
			resilienceview.Part{Part: "circuitBreaker", Setting: "maxConnections unlimited, maxPendingRequests unlimited, maxRequests 100, maxRetries unlimited", Source: "UpstreamTrafficSetting shop/db"}},
		{"retry budget by default", part(view.Cluster, resilienceview.PartRetryBudget), resilienceview.Part{Part: "retryBudget", Setting: "20% of requests in flight, at least 3", Source: "MeshConfig default"}},
		{"web's retry from its Retry", part(call("shop/web", 80).Parts, resilienceview.PartRetry),
			resilienceview.Part{Part: "retry", Setting: "3 on 5xx, backoff 100ms to 1s, each try 1s", Source: "Retry shop/web-retry"}},
		{"batch's retry by default", part(call("shop/batch", 80).Parts, resilienceview.PartRetry),
			resilienceview.Part{Part: "retry", Setting: "2 on connect-failure,refused-stream, backoff 25ms to 250ms", Source: "MeshConfig default"}},
		{"the port's policy wins on the grpc port", part(call("shop/batch", 9090).Parts, resilienceview.PartRequestTimeout),
			resilienceview.Part{Part: "requestTimeout", Setting: "3s", Source: "BackendTrafficPolicy shop/db-api"}},
		{"the default request timeout on the http port", part(call("shop/batch", 80).Parts, resilienceview.PartRequestTimeout),
			resilienceview.Part{Part: "requestTimeout", Setting: "15s", Source: "MeshConfig default"}},
		{"fault only on the grpc port", part(call("shop/web", 80).Parts, resilienceview.PartFault), resilienceview.Part{Part: "faultInjection", Setting: "none"}},
	} {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	if got := call("shop/web", 5432).Parts; len(got) != 0 {
		t.Errorf("tcp port: parts %+v, want none", got)
	}
	if got, want := call("shop/web", 80).Routes, []string{"HTTPRoute shop/db-slow"}; !cmp.Equal(got, want) {
		t.Errorf("routes on port 80 = %q, want %q", got, want)
	}
	if got := call("shop/web", 9090).Routes; got != nil {
		t.Errorf("routes on port 9090 = %q, want none", got)
	}

	b, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "db.json.golden", append(b, '\n'))
	var buf bytes.Buffer
	if err := resilienceview.WriteTable(&buf, view); err != nil {
		t.Fatal(err)
	}
	golden(t, "db.table.golden", buf.Bytes())
}

func TestCallers(t *testing.T) {
	// Not permissive: only what a TrafficTarget allows calls, and a
	// Service's own account is no caller.
	s := newSpec(t, `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  ports: [{port: 8080, appProtocol: tcp}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: thief, namespace: shop}
spec:
  ports: [{port: 8080, appProtocol: tcp}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  ports: [{port: 5432, appProtocol: tcp}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db-replica, namespace: shop}
spec:
  serviceAccount: db
  ports: [{port: 5432, appProtocol: tcp}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: sql, namespace: shop}
spec: {matches: {ports: [5432]}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: db, namespace: shop}
spec:
  destination: {kind: ServiceAccount, name: db, namespace: shop}
  rules: [{kind: TCPRoute, name: sql}]
  sources: [{kind: ServiceAccount, name: web, namespace: shop}]
`)
	var got []string
	for _, c := range resilienceview.Callers(s.Snapshot(), mesh.MeshService{Namespace: "shop", Name: "db"}) {
		got = append(got, c.Service.String())
	}
	if want := []string{"shop/web"}; !cmp.Equal(got, want) {
		t.Errorf("Callers(shop/db) = %q, want %q", got, want)
	}
	if _, ok := resilienceview.Of(s.Snapshot(), mesh.MeshService{Namespace: "shop", Name: "nope"}); ok {
		t.Error("Of(shop/nope): found, want not found")
	}
}
