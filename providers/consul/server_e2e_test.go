//go:build consulintegration && linux

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

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
)

// osmServer is a real osm-server running this plugin as a real
// subprocess, with the debug API on a free loopback port.
type osmServer struct {
	debug string
}

// startServer starts osm-server from bin with one Consul provider
// instance named "consul-dc1" configured by pluginConfig (YAML flow).
func startServer(t testing.TB, bin, pluginConfig string) osmServer {
	t.Helper()
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
  - name: consul-dc1
    plugin: osm-provider-consul
    config: %s
`, filepath.Join(dir, "data"), bin, debug, pluginConfig)
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	server := exec.Command(filepath.Join(bin, "osm-server"), "serve", "--config", filepath.Join(dir, "server.yaml"))
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			if len(b) > 16<<10 {
				b = b[len(b)-16<<10:]
			}
			t.Logf("osm-server log (tail):\n%s", b)
		}
	})
	return osmServer{debug: debug}
}

func (s osmServer) getJSON(path string, v any) error {
	resp, err := http.Get("http://" + s.debug + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// endpoints returns the sorted "ip:port" of a mesh service in the API.
func (s osmServer) endpoints(svc string) (string, error) {
	var body struct {
		Endpoints []struct {
			IP     string
			Port   int
			Labels map[string]string
		}
	}
	if err := s.getJSON("/api/v1/services/"+svc+"/endpoints", &body); err != nil {
		return "", err
	}
	var out []string
	for _, e := range body.Endpoints {
		out = append(out, fmt.Sprintf("%s:%d", e.IP, e.Port))
	}
	slices.Sort(out)
	return strings.Join(out, ","), nil
}

// provider returns the state and last error of the Consul instance.
func (s osmServer) provider() (state, lastError string, err error) {
	var body struct {
		Providers []struct{ Name, State, LastError string }
	}
	if err := s.getJSON("/api/v1/providers", &body); err != nil {
		return "", "", err
	}
	for _, p := range body.Providers {
		if p.Name == "consul-dc1" {
			return p.State, p.LastError, nil
		}
	}
	return "", "", fmt.Errorf("no provider consul-dc1 in %+v", body.Providers)
}

// TestThroughOSMServer runs the real osm-server with this plugin against a
// real Consul, as an operator would: instances registered with TTL checks
// appear in the server's endpoints API, a check turning critical removes
// its instance, and a Consul outage shows in the provider's status while
// the last good endpoints stay.
func TestThroughOSMServer(t *testing.T) {
	agent := consultest.StartDev(t)
	c := apiClient(t, agent, "")
	register(t, c, instanceSpec{service: "web", id: "web-1", addr: "192.0.2.1", port: 8080}, api.HealthPassing)
	register(t, c, instanceSpec{service: "web", id: "web-2", addr: "192.0.2.2", port: 8080}, api.HealthPassing)
	srv := startServer(t, buildBinaries(t), fmt.Sprintf("{address: %q}", agent.HTTPAddr))

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
			time.Sleep(20 * time.Millisecond)
		}
	}
	endpointsAre := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, err := srv.endpoints("default/web")
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		}
	}
	wait("registered instances served", endpointsAre("192.0.2.1:8080,192.0.2.2:8080"))

	setTTL(t, c, "web-1", api.HealthCritical)
	wait("a critical instance leaves", endpointsAre("192.0.2.2:8080"))
	register(t, c, instanceSpec{service: "web", id: "web-3", addr: "192.0.2.3", port: 8080}, api.HealthPassing)
	wait("a new instance joins", endpointsAre("192.0.2.2:8080,192.0.2.3:8080"))

	agent.Stop()
	wait("Consul down: provider unhealthy with the cause", func() (bool, string) {
		state, lastError, err := srv.provider()
		return err == nil && state == "unhealthy" && strings.Contains(lastError, "connection refused"), fmt.Sprintf("%s %q (%v)", state, lastError, err)
	})
	if got, err := srv.endpoints("default/web"); err != nil || got != "192.0.2.2:8080,192.0.2.3:8080" {
		t.Errorf("endpoints while Consul is down = %q (%v); want the last good ones", got, err)
	}
	agent.Restart(t)
	c = apiClient(t, agent, "")
	register(t, c, instanceSpec{service: "web", id: "web-4", addr: "192.0.2.4", port: 8080}, api.HealthPassing)
	wait("Consul back (empty, then web-4): healthy and current", func() (bool, string) {
		state, lastError, err := srv.provider()
		got, gerr := srv.endpoints("default/web")
		return err == nil && gerr == nil && state != "unhealthy" && got == "192.0.2.4:8080", fmt.Sprintf("%s %q %q (%v %v)", state, lastError, got, err, gerr)
	})
}
