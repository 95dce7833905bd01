package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
	"github.com/osm-vm/osm-vm/internal/spec/spechttp"
	"github.com/osm-vm/osm-vm/internal/store"
)

const testAdminToken = "s3cret"

func newSpecTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := spec.New(t.Context(), log, store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	h := spechttp.NewHandler(log, s, spechttp.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testAdminToken {
			http.Error(w, `{"reason":"Unauthorized","error":"missing or wrong admin token"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runCmd runs one spec command against srv and returns stdout, stderr, error.
func runCmd(t *testing.T, srv *httptest.Server, stdin string, newCmd func() *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	cmd := newCmd()
	var out, errw bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errw)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append(args, "--server", srv.URL, "--data-dir", "", "--admin-token", testAdminToken))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errw.String(), err
}

var bookstoreFile = filepath.Join("..", "..", "examples", "bookstore", "mesh.yaml")

func TestApplyGetDiffDeleteCommands(t *testing.T) {
	srv := newSpecTestServer(t)

	out, _, err := runCmd(t, srv, "", newApplyCmd, "-f", bookstoreFile)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	want := `meshconfig/mesh created
service/bookbuyer created
service/bookthief created
service/bookstore created
service/bookstore-v1 created
service/bookstore-v2 created
service/bookwarehouse created
httproutegroup/bookstore-service-routes created
traffictarget/bookstore created
httproutegroup/bookwarehouse-service-routes created
traffictarget/bookstore-access-bookwarehouse created
trafficsplit/bookstore-split created
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("apply output (-want +got):\n%s", diff)
	}

	out, _, err = runCmd(t, srv, "", newApplyCmd, "-f", bookstoreFile)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if got, want := strings.Count(out, " unchanged\n"), 12; got != want {
		t.Errorf("second apply: %d unchanged, want %d:\n%s", got, want, out)
	}

	// diff: no change exits cleanly; a change returns errDiffFound.
	if out, _, err := runCmd(t, srv, "", newDiffCmd, "-f", bookstoreFile); err != nil || out != "" {
		t.Errorf("diff of applied file = %q, %v; want no output, nil", out, err)
	}
	data, err := os.ReadFile(bookstoreFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(data), "weight: 20", "weight: 30", 1)
	out, _, err = runCmd(t, srv, changed, newDiffCmd, "-f", "-")
	if !errors.Is(err, errDiffFound) || !strings.Contains(out, "-      weight: 20\n+      weight: 30\n") {
		t.Errorf("diff of changed file: err %v, output:\n%s", err, out)
	}

	out, _, err = runCmd(t, srv, "", newGetCmd, "services", "-o", "json")
	if err != nil {
		t.Fatalf("get services: %v", err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct{ VIP string }
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("get -o json output: %v\n%s", err, out)
	}
	if got, want := len(list.Items), 6; got != want {
		t.Errorf("services = %d, want %d", got, want)
	}
	for _, it := range list.Items {
		if !strings.HasPrefix(it.Status.VIP, "127.77.") {
			t.Errorf("service %s vip = %q, want one in 127.77.0.0/16", it.Metadata.Name, it.Status.VIP)
		}
	}

	out, _, err = runCmd(t, srv, "", newGetCmd, "policies")
	if err != nil {
		t.Fatalf("get policies: %v", err)
	}
	wantTable := `KIND             NAMESPACE   NAME
HTTPRouteGroup   default     bookstore-service-routes
HTTPRouteGroup   default     bookwarehouse-service-routes
TrafficTarget    default     bookstore
TrafficTarget    default     bookstore-access-bookwarehouse
TrafficSplit     default     bookstore-split
`
	if diff := cmp.Diff(wantTable, out); diff != "" {
		t.Errorf("get policies (-want +got):\n%s", diff)
	}

	out, _, err = runCmd(t, srv, "", newGetCmd, "trafficsplit", "bookstore-split", "-o", "yaml")
	if err != nil || !strings.Contains(out, "service: bookstore\n") {
		t.Errorf("get trafficsplit -o yaml = %v\n%s", err, out)
	}

	// One document by kind and name; a Service still used by the split is a conflict.
	if _, _, err := runCmd(t, srv, "", newDeleteCmd, "service", "bookstore-v2"); err == nil || !strings.Contains(err.Error(), "is used by TrafficSplit default/bookstore-split") {
		t.Errorf("delete service bookstore-v2: %v, want a conflict", err)
	}
	if out, _, err := runCmd(t, srv, "", newDeleteCmd, "trafficsplit", "bookstore-split", "-n", "default"); err != nil || out != "trafficsplit/bookstore-split deleted\n" {
		t.Errorf("delete trafficsplit = %q, %v", out, err)
	}
	if _, _, err := runCmd(t, srv, "", newDeleteCmd, "trafficsplit", "bookstore-split"); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("second delete: %v, want not found", err)
	}

	// delete -f removes the rest (the split is already gone).
	rest := strings.Split(string(data), "---\n")
	out, _, err = runCmd(t, srv, strings.Join(rest[:len(rest)-1], "---\n"), newDeleteCmd, "-f", "-")
	if err != nil || strings.Count(out, " deleted\n") != 11 {
		t.Errorf("delete -f = %v\n%s", err, out)
	}
	if out, _, err := runCmd(t, srv, "", newGetCmd, "all"); err != nil || out != "No resources found.\n" {
		t.Errorf("get all after delete = %q, %v", out, err)
	}
}

func TestApplyCommandErrors(t *testing.T) {
	srv := newSpecTestServer(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80, appProtocol: htp}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"invalid file", []string{"-f", bad}, "1 problem(s) in the mesh specification; nothing was changed\n  Service default/web (" + bad + ` document 1, line 1): spec.ports[0].appProtocol: unsupported appProtocol "htp": want http, tcp or grpc (did you mean "http"?)`},
		{"directory", []string{"-f", dir}, "1 problem(s) in the mesh specification; nothing was changed\n  Service default/web (" + bad + ` document 1, line 1): spec.ports[0].appProtocol: unsupported appProtocol "htp": want http, tcp or grpc (did you mean "http"?)`},
		{"no input", nil, "no input: pass -f FILE, -f DIR or -f -"},
		{"missing file", []string{"-f", filepath.Join(dir, "nope.yaml")}, "-f " + filepath.Join(dir, "nope.yaml") + ": stat " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, srv, "", newApplyCmd, tc.args...)
			if err == nil {
				t.Fatal("apply succeeded, want an error")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
	cmd := newApplyCmd()
	cmd.SetArgs([]string{"-f", bad, "--server", srv.URL, "--data-dir", "", "--admin-token", "wrong"})
	cmd.SetOut(io.Discard)
	if err := cmd.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "missing or wrong admin token") {
		t.Errorf("apply with a wrong token: %v, want the server's 401", err)
	}
}

// A file written for OSM with its failure-handling policies applies with
// `osm-server apply -f`, and `get` lists them by kind and as policies.
func TestApplyGetResiliencePolicies(t *testing.T) {
	srv := newSpecTestServer(t)
	file := filepath.Join(t.TempDir(), "osm.yaml")
	osm := `apiVersion: v1
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
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: httpbin
  namespace: httpbin
spec:
  host: httpbin.httpbin.svc.cluster.local
  connectionSettings:
    tcp:
      maxConnections: 1
    http:
      maxPendingRequests: 1
      maxRequestsPerConnection: 1
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
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: httpbin, namespace: httpbin}
spec:
  targetRefs: [{group: "", kind: Service, name: httpbin}]
  outlierDetection: {consecutiveGatewayErrors: 3}
`
	if err := os.WriteFile(file, []byte(osm), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCmd(t, srv, "", newApplyCmd, "-f", file)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, stderr)
	}
	want := `service/httpbin -n httpbin created
service/curl -n curl created
upstreamtrafficsetting/httpbin -n httpbin created
retry/retry -n curl created
backendtrafficpolicy/httpbin -n httpbin created
`
	if diff := cmp.Diff(want, out); diff != "" || stderr != "" {
		t.Errorf("apply output (-want +got):\n%s\nstderr: %s", diff, stderr)
	}
	for _, tc := range []struct{ kind, want string }{
		{"upstreamtrafficsettings", "KIND                     NAMESPACE   NAME\nUpstreamTrafficSetting   httpbin     httpbin\n"},
		{"retries", "KIND    NAMESPACE   NAME\nRetry   curl        retry\n"},
		{"backendtrafficpolicies", "KIND                   NAMESPACE   NAME\nBackendTrafficPolicy   httpbin     httpbin\n"},
		{"policies", "KIND                     NAMESPACE   NAME\nUpstreamTrafficSetting   httpbin     httpbin\nRetry                    curl        retry\nBackendTrafficPolicy     httpbin     httpbin\n"},
	} {
		out, _, err := runCmd(t, srv, "", newGetCmd, tc.kind)
		if err != nil {
			t.Fatalf("get %s: %v", tc.kind, err)
		}
		if diff := cmp.Diff(tc.want, out); diff != "" {
			t.Errorf("get %s (-want +got):\n%s", tc.kind, diff)
		}
	}
	out, _, err = runCmd(t, srv, "", newGetCmd, "retries", "retry", "-n", "curl", "-o", "yaml")
	if err != nil {
		t.Fatalf("get retry -o yaml: %v", err)
	}
	if !strings.Contains(out, "retryBackoffBaseInterval: 1s") || !strings.Contains(out, "apiVersion: policy.openservicemesh.io/v1alpha1") {
		t.Errorf("get retry -o yaml:\n%s\nwant OSM's fields as applied", out)
	}
}

func TestGetResilienceCommand(t *testing.T) {
	srv := newSpecTestServer(t)
	mesh := `apiVersion: osm-vm.io/v1alpha1
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
metadata: {name: db, namespace: shop}
spec:
  ports: [{name: api, port: 9090, appProtocol: grpc}, {name: sql, port: 5432, appProtocol: tcp}]
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: db, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: db}]
  outlierDetection: {consecutiveGatewayErrors: 3}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: web-retry, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: web, namespace: shop}
  destinations: [{kind: Service, name: db, namespace: shop}]
  retryPolicy: {retryOn: "unavailable", perTryTimeout: 0s, numRetries: 3, retryBackoffBaseInterval: 100ms}
`
	if _, stderr, err := runCmd(t, srv, mesh, newApplyCmd, "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, stderr)
	}

	out, _, err := runCmd(t, srv, "", newGetCmd, "resilience", "db", "-n", "shop")
	if err != nil {
		t.Fatalf("get resilience: %v", err)
	}
	want := `Service shop/db: every caller's proxy
PART               SETTING                                                                                      SOURCE
connectTimeout     5s                                                                                           MeshConfig default
circuitBreaker     unlimited                                                                                    MeshConfig default
retryBudget        20% of requests in flight, at least 3                                                        MeshConfig default
outlierDetection   3 consecutive gateway errors; every 10s, ejected 30s (at most 5m), at most 10% of backends   BackendTrafficPolicy shop/db
loadBalancer       RoundRobin                                                                                   -

Calls to shop/db, per caller and port (a route's own timeouts and retry win for the calls it matches):
CALLER     PORT              REQUEST-TIMEOUT             IDLE-TIMEOUT       RETRY                                                          FAULT-INJECTION   HASH-POLICY   ROUTES
shop/web   9090 (api)/grpc   none [MeshConfig default]   unset (Envoy 5m)   3 on unavailable, backoff 100ms to 1s [Retry shop/web-retry]   none              none          -
shop/web   5432 (sql)/tcp    -                           -                  -                                                              -                 -             -
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("get resilience (-want +got):\n%s", diff)
	}

	out, _, err = runCmd(t, srv, "", newGetCmd, "resilience", "db", "-n", "shop", "-o", "json")
	if err != nil {
		t.Fatalf("get resilience -o json: %v", err)
	}
	var view resilienceview.Service
	if err := json.Unmarshal([]byte(out), &view); err != nil {
		t.Fatalf("get resilience -o json: %v\n%s", err, out)
	}
	if got, want := view.Calls[0].Parts[2], (resilienceview.Part{Part: "retry", Setting: "3 on unavailable, backoff 100ms to 1s", Source: "Retry shop/web-retry"}); got != want {
		t.Errorf("-o json: web's retry on port 9090 = %+v, want %+v", got, want)
	}
	out, _, err = runCmd(t, srv, "", newGetCmd, "resilience", "db", "-n", "shop", "-o", "yaml")
	if err != nil || !strings.Contains(out, "source: BackendTrafficPolicy shop/db") {
		t.Errorf("get resilience -o yaml: %v\n%s\nwant the outlier detection's source", err, out)
	}

	if _, _, err := runCmd(t, srv, "", newGetCmd, "resilience", "dbb", "-n", "shop"); err == nil || !strings.Contains(err.Error(), `Service "dbb" not found in namespace "shop"`) || !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("get resilience dbb: %v, want Service not found", err)
	}
	if _, _, err := runCmd(t, srv, "", newGetCmd, "resilience"); err == nil || !strings.Contains(err.Error(), "name the Service") {
		t.Errorf("get resilience without a name: %v, want an error saying to name the Service", err)
	}
}
