//go:build azurefake && linux

package main

import (
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
)

// TestThroughOSMServer runs the real osm-server with this plugin built in
// its fake-ARM test mode, as an operator's staging setup would, and checks
// that scale sets and their changes appear in the server's API, and that a
// credential failure shows in the provider status while the last good
// endpoints stay.
func TestThroughOSMServer(t *testing.T) {
	bin := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"osm-server", "github.com/osm-vm/osm-vm/cmd/osm-server", ""},
		{"osm-provider-azure", ".", "azurefake"},
	} {
		args := []string{"build", "-o", filepath.Join(bin, b.out)}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		if out, err := exec.Command("go", append(args, b.pkg)...).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	dir := t.TempDir()
	fixture := filepath.Join(dir, "fixture.json")
	writeFixture := func(content string) {
		t.Helper()
		tmp := fixture + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, fixture); err != nil {
			t.Fatal(err)
		}
	}
	scaleSet := func(instances string, extra string) string {
		return `{"scaleSets": [{"resourceGroup": "rg-a", "name": "bookstore", "mode": "Uniform",
			"tags": {"osm-service": "bookstore.default", "osm-port": "8080"}, "instances": [` + instances + `]}]` + extra + `}`
	}
	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}, {"name": "1", "privateIP": "10.1.0.5", "powerState": "deallocated"}`, ""))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debug := ln.Addr().String()
	ln.Close()
	config := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: 127.0.0.1:0
xdsAddress: 127.0.0.1:0
providers:
  - name: azure-fake
    plugin: osm-provider-azure
    config: {subscriptionId: 6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b, testFixture: %s, pollInterval: 100ms}
`, filepath.Join(dir, "data"), bin, debug, fixture)
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

	getJSON := func(path string, v any) error {
		resp, err := http.Get("http://" + debug + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	endpoints := func() (string, error) {
		var body struct {
			Endpoints []struct {
				IP     string
				Port   int
				Labels map[string]string
			}
		}
		if err := getJSON("/api/v1/services/default/bookstore/endpoints", &body); err != nil {
			return "", err
		}
		var out []string
		for _, e := range body.Endpoints {
			if !strings.Contains(e.Labels["azure-resource-id"], "/virtualMachineScaleSets/bookstore") {
				return "", fmt.Errorf("endpoint %s has azure-resource-id %q", e.IP, e.Labels["azure-resource-id"])
			}
			out = append(out, fmt.Sprintf("%s:%d", e.IP, e.Port))
		}
		slices.Sort(out)
		return strings.Join(out, ","), nil
	}
	wait := func(what string, cond func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, state := cond()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s; last state: %s", what, state)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	endpointsAre := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, err := endpoints()
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		}
	}

	wait("running instance served, deallocated one left out", endpointsAre("10.1.0.4:8080"))

	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}, {"name": "1", "privateIP": "10.1.0.5"}, {"name": "2", "privateIP": "10.1.0.6"}`, ""))
	wait("scale-out", endpointsAre("10.1.0.4:8080,10.1.0.5:8080,10.1.0.6:8080"))

	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}`, `, "credentialError": "AADSTS7000215: invalid client secret"`))
	wait("credential failure in provider status", func() (bool, string) {
		var body struct {
			Providers []struct{ State, LastError string }
		}
		if err := getJSON("/api/v1/providers", &body); err != nil || len(body.Providers) != 1 {
			return false, fmt.Sprint(body, err)
		}
		p := body.Providers[0]
		return p.State == "unhealthy" && strings.Contains(p.LastError, "AADSTS7000215"), fmt.Sprintf("%+v", p)
	})
	if got, err := endpoints(); err != nil || got != "10.1.0.4:8080,10.1.0.5:8080,10.1.0.6:8080" {
		t.Errorf("endpoints during the credential failure = %q (%v); want the last good three", got, err)
	}
}
