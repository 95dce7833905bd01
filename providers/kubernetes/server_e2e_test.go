//go:build k8sintegration && linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
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

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debug := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	config := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: 127.0.0.1:0
xdsAddress: 127.0.0.1:0
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
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := endpoints()
			if err == nil && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /api/v1/services/default/web/endpoints = %q (%v); want %q", got, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	writeAll(ctx, t, cp, service(ns, "web", svcPort("http", 80, intstr.FromInt32(8080))),
		slice(ns, "web-1", "web", ports(slicePortOf("http", 8080)), endpoint("192.0.2.1"), endpoint("192.0.2.2")))
	waitEndpoints("192.0.2.1:8080@cluster-a,192.0.2.2:8080@cluster-a")

	// A scale-in in the cluster reaches the server's API within a second.
	writeAll(ctx, t, cp, slice(ns, "web-1", "web", ports(slicePortOf("http", 8080)), endpoint("192.0.2.2")))
	start := time.Now()
	waitEndpoints("192.0.2.2:8080@cluster-a")
	if took := time.Since(start); took > time.Second {
		t.Errorf("scale-in took %v to reach the server's API; want under 1s", took)
	}
}
