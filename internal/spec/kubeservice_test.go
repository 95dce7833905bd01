package spec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// kubectlService is a v1 Service as `kubectl get svc -o yaml` prints it.
const kubectlService = `apiVersion: v1
kind: Service
metadata:
  name: bookstore
  namespace: bookstore
  uid: 5d1c0f4e-9b7a-4a3c-8a7e-3c1f1a2b3c4d
  resourceVersion: "1234"
  creationTimestamp: "2026-01-02T03:04:05Z"
  labels: {app: bookstore}
  annotations:
    osm-vm.io/service-account: bookstore-sa
spec:
  type: ClusterIP
  clusterIP: 10.96.0.12
  clusterIPs: [10.96.0.12]
  selector: {app: bookstore}
  sessionAffinity: None
  ports:
  - name: http
    port: 14001
    targetPort: 8080
    protocol: TCP
  - name: grpc-api
    port: 9090
  - name: metrics
    port: 9100
    appProtocol: tcp
  - name: h2
    port: 9200
    appProtocol: kubernetes.io/h2c
  - name: https
    port: 443
    targetPort: 8443
status:
  loadBalancer: {}
`

func TestKubeServiceIsAMeshService(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	res, err := s.Apply(t.Context(), mustParse(t, kubectlService), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := []string{"Service bookstore/bookstore (document 1, line 1): ignored (no meaning for machines): metadata.creationTimestamp, metadata.resourceVersion, metadata.uid, status, spec.clusterIP, spec.clusterIPs, spec.selector, spec.sessionAffinity, spec.type"}
	if diff := cmp.Diff(want, res.Results[0].Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	snap := s.Snapshot()
	info, ok := snap.Service(mesh.MeshService{Namespace: "bookstore", Name: "bookstore"})
	if !ok {
		t.Fatal("the v1 Service is not a mesh Service")
	}
	if got, want := info.ServiceAccount, (mesh.ServiceAccount{Namespace: "bookstore", Name: "bookstore-sa"}); got != want {
		t.Errorf("service account = %v, want %v (from the %s annotation)", got, want, AnnotationServiceAccount)
	}
	wantPorts := []ServicePort{
		{Name: "http", Port: 14001, TargetPort: 8080, AppProtocol: "http"},
		{Name: "grpc-api", Port: 9090, TargetPort: 9090, AppProtocol: "grpc"},
		{Name: "metrics", Port: 9100, TargetPort: 9100, AppProtocol: "tcp"},
		{Name: "h2", Port: 9200, TargetPort: 9200, AppProtocol: "grpc"},
		{Name: "https", Port: 443, TargetPort: 8443, AppProtocol: "tcp"},
	}
	if diff := cmp.Diff(wantPorts, info.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}

	// get returns the form applied (what the API server filled dropped),
	// with the VIP in status.
	o, err := snap.Object(Key{Kind: KindService, Namespace: "bookstore", Name: "bookstore"})
	if err != nil {
		t.Fatal("get: not found")
	}
	b, _ := json.Marshal(o)
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	if got["apiVersion"] != "v1" {
		t.Errorf("apiVersion = %v, want v1 (the form applied)", got["apiVersion"])
	}
	sp := got["spec"].(map[string]any)
	if sp["clusterIP"] != "10.96.0.12" || sp["type"] != "ClusterIP" || sp["selector"] == nil {
		t.Errorf("spec lost fields it was applied with: %v", sp)
	}
	md := got["metadata"].(map[string]any)
	if md["uid"] != nil || md["resourceVersion"] != nil {
		t.Errorf("metadata kept what the API server fills: %v", md)
	}
	if st, _ := got["status"].(map[string]any); st == nil || st["vip"] != info.VIP.String() {
		t.Errorf("status = %v, want vip %s", got["status"], info.VIP)
	}

	// Applying what get returned changes nothing.
	y, _ := json.Marshal(o)
	res, err = s.Apply(t.Context(), mustParse(t, string(y)), ApplyOptions{})
	if err != nil {
		t.Fatalf("apply again: %v", err)
	}
	if res.Results[0].Action != Unchanged {
		t.Errorf("re-apply of get's output: %s, want unchanged", res.Results[0].Action)
	}

	// A TrafficTarget finds its service account.
	res, err = s.Apply(t.Context(), mustParse(t, `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: tt, namespace: bookstore}
spec:
  destination: {kind: ServiceAccount, name: bookstore-sa}
  sources: [{kind: ServiceAccount, name: bookstore-sa}]
  rules: [{kind: TCPRoute, name: all}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: all, namespace: bookstore}
spec: {}
`), ApplyOptions{})
	if err != nil {
		t.Fatalf("apply TrafficTarget: %v", err)
	}
	for _, r := range res.Results {
		if len(r.Warnings) > 0 {
			t.Errorf("%s: unexpected warnings %q", r.Key, r.Warnings)
		}
	}
}

func TestKubeServiceInvalid(t *testing.T) {
	head := "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
	tests := []struct {
		name, in string
		want     []string
	}{
		{"udp", head + "spec: {ports: [{port: 53, protocol: UDP}]}\n", []string{
			"Service default/web (document 1, line 1): spec.ports[0].protocol: protocol UDP is not supported: the mesh carries TCP only (remove the port or set protocol: TCP)"}},
		{"named target port", head + "spec: {ports: [{port: 80, targetPort: http}]}\n", []string{
			`Service default/web (document 1, line 1): spec.ports[0].targetPort: "http" names a container port, which machines do not have: give the application's port number`}},
		{"unknown appProtocol", head + "spec: {ports: [{port: 80, appProtocol: mqtt}]}\n", []string{
			`Service default/web (document 1, line 1): spec.ports[0].appProtocol: unsupported appProtocol "mqtt": want http, grpc, tcp, kubernetes.io/h2c (HTTP/2, served as grpc) or https (passed through as tcp)`}},
		{"no ports", head + "spec: {selector: {app: web}}\n", []string{
			"Service default/web (document 1, line 1): spec.ports: a Service needs at least one port: add one such as {name: http, port: 8080, appProtocol: http}"}},
		{"bad service account", "apiVersion: v1\nkind: Service\nmetadata: {name: web, annotations: {osm-vm.io/service-account: Bad_SA}}\nspec: {ports: [{port: 80}]}\n", nil},
		{"typo", head + "spec: {prots: [{port: 80}]}\n", nil},
		{"wrong apiVersion", "apiVersion: v2\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n", []string{
			`Service default/web (document 1, line 1): apiVersion: Service needs apiVersion "osm-vm.io/v1alpha1" or "v1", not "v2"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "")
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			if tc.want == nil {
				if !strings.Contains(err.Error(), "Service default/web") {
					t.Errorf("error does not name the document: %v", err)
				}
				t.Log(err)
				return
			}
			if diff := cmp.Diff(strings.Join(tc.want, "\n"), err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
