//go:build k8sintegration && linux

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// TestThroughOSMServer runs the real osm-server with this plugin against
// the real API server, as an operator would, and checks that endpoints
// written to the cluster appear in the server's API.
func TestThroughOSMServer(t *testing.T) {
	bin := t.TempDir()
	for out, pkg := range map[string]string{
		"osm-server":              "github.com/osm-vm/osm-vm/cmd/osm-server",
		"osm-provider-kubernetes": ".",
	} {
		if b, err := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	cp := startControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ns := cp.namespace(ctx, t)

	// Three distinct ports below the ephemeral range: picked on port 0
	// and closed, the debug port came back as the API's (both bound by
	// osm-server, which refused to start).
	debug, apiAddr, xdsAddr := testaddr.Free(t), testaddr.Free(t), testaddr.Free(t)
	dir := t.TempDir()
	config := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: `+apiAddr+`
xdsAddress: `+xdsAddr+`
providers:
  - name: cluster-a
    plugin: osm-provider-kubernetes
    config: {kubeconfig: %s, namespaces: [%s], namespaceMap: {%s: default}}
`, filepath.Join(dir, "data"), bin, debug, cp.kubeconfig, ns, ns)
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	server := exec.Command(filepath.Join(bin, "osm-server"), "serve", "--config", filepath.Join(dir, "server.yaml"))
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("osm-server log:\n%s", b)
		}
	})

	base := "http://" + debug
	endpoints := func() (string, error) {
		resp, err := http.Get(base + "/api/v1/services/default/web/endpoints")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %s", resp.Status)
		}
		var body struct {
			Endpoints []struct {
				IP       string
				Port     int
				Provider string
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return "", err
		}
		var out []string
		for _, e := range body.Endpoints {
			out = append(out, fmt.Sprintf("%s:%d@%s", e.IP, e.Port, e.Provider))
		}
		slices.Sort(out)
		return strings.Join(out, ","), nil
	}
	waitEndpoints := func(want string) {
		t.Helper()
		testwait.Until(t, fmt.Sprintf("GET /api/v1/services/default/web/endpoints = %q", want), func() (bool, string) {
			got, err := endpoints()
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		})
	}

	writeAll(ctx, t, cp, service(ns, "web", svcPort("http", 80, intstr.FromInt32(8080))),
		slice(ns, "web-1", "web", ports(slicePortOf("http", 8080)), endpoint("192.0.2.1"), endpoint("192.0.2.2")))
	waitEndpoints("192.0.2.1:8080@cluster-a,192.0.2.2:8080@cluster-a")

	// A VM proxy allowed to call web is sent the cluster's endpoints by EDS.
	osm := xdstest.Server{API: apiAddr, XDS: xdsAddr, DataDir: filepath.Join(dir, "data")}
	waitUp(t, "https://"+apiAddr)
	osm.Apply(t, meshForWeb)
	proxy := osm.Connect(t, osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "vm-client"}), "192.0.2.100", "default/web")
	proxy.WaitEDS(t, "default/web", []string{"192.0.2.1:8080", "192.0.2.2:8080"})

	// A scale-in in the cluster reaches the server's API within a second.
	writeAll(ctx, t, cp, slice(ns, "web-1", "web", ports(slicePortOf("http", 8080)), endpoint("192.0.2.2")))
	start := time.Now()
	waitEndpoints("192.0.2.2:8080@cluster-a")
	if took := time.Since(start); took > time.Second {
		t.Errorf("scale-in took %v to reach the server's API; want under 1s", took)
	}
	proxy.WaitEDS(t, "default/web", []string{"192.0.2.2:8080"})
}

// meshForWeb declares the cluster's web service and a VM client allowed to
// call it; endpoints are sent without a connected proxy (pods run no agent).
const meshForWeb = `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec: {traffic: {permissive: true}, endpoints: {requireConnectedProxy: false}}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{port: 80, targetPort: 8080, appProtocol: http}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: vm-client, namespace: default}
spec: {ports: [{port: 9000, appProtocol: http}]}
`

// waitUp waits until the HTTPS API answers (any status).
func waitUp(t *testing.T, base string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // reachability only
	testwait.Until(t, fmt.Sprintf("osm-server HTTPS API at %s up", base), func() (bool, string) {
		resp, err := hc.Get(base + "/api/v1/ca")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}
