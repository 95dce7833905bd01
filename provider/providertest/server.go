package providertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a real osm-server started for a test, running provider
// plugins from a directory as real subprocesses, as an operator's would.
type Server struct {
	// DebugAddr is the host:port of its debug API (the read-only
	// /api/v1/services and /api/v1/providers).
	DebugAddr string
}

// StartServer starts the osm-server executable serverBin with pluginDir
// and providers, the YAML list that goes under `providers:` (each item
// indented by two spaces, as "  - name: x\n    plugin: y\n    config: {...}"),
// with every listener on a free loopback port and a fresh data directory.
// It is killed at the end of the test; when the test failed its log is
// shown.
func StartServer(t testing.TB, serverBin, pluginDir, providers string) *Server {
	t.Helper()
	debug, err := freeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s\napiAddress: 127.0.0.1:0\nxdsAddress: 127.0.0.1:0\nproviders:\n%s",
		filepath.Join(dir, "data"), pluginDir, debug, providers)
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	server := exec.Command(serverBin, "serve", "--config", filepath.Join(dir, "server.yaml"))
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		logFile.Close()
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
	return &Server{DebugAddr: debug}
}

// freeLoopbackAddr returns a 127.0.0.1 address free now, its port below
// the kernel's ephemeral range (32768-60999 by default): the server binds
// its API and xDS listeners on port 0, and a port picked there (by
// listening on port 0 and closing) could come back as one of them. (The
// plugin SDK imports nothing of the server's, so not internal/testaddr,
// which picks ports so for osm-vm's own tests.)
func freeLoopbackAddr() (string, error) {
	for range 200 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(22000))))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr, nil
	}
	return "", errors.New("providertest: no free port on 127.0.0.1 between 10000 and 31999 in 200 tries")
}

// GetJSON decodes the body of GET path on the debug API into v; a status
// other than 200 is an error.
func (s *Server) GetJSON(path string, v any) error {
	resp, err := http.Get("http://" + s.DebugAddr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// ServerEndpoint is one endpoint as the server's API lists it.
type ServerEndpoint struct {
	IP       string
	Port     int
	Labels   map[string]string
	Provider string
}

// Endpoints returns the endpoints the server lists for svc
// ("namespace/name"), sorted by ip:port.
func (s *Server) Endpoints(svc string) ([]ServerEndpoint, error) {
	var body struct{ Endpoints []ServerEndpoint }
	if err := s.GetJSON("/api/v1/services/"+svc+"/endpoints", &body); err != nil {
		return nil, err
	}
	slices.SortFunc(body.Endpoints, func(a, b ServerEndpoint) int {
		return strings.Compare(fmt.Sprintf("%s:%05d", a.IP, a.Port), fmt.Sprintf("%s:%05d", b.IP, b.Port))
	})
	return body.Endpoints, nil
}

// Addrs returns the "ip:port" of the endpoints of svc, sorted, joined by
// commas: a string to compare with a want.
func (s *Server) Addrs(svc string) (string, error) {
	eps, err := s.Endpoints(svc)
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = fmt.Sprintf("%s:%d", e.IP, e.Port)
	}
	slices.Sort(out)
	return strings.Join(out, ","), err
}

// ProviderStatus returns the state ("running", "unhealthy", ...) and last
// error of the provider instance name.
func (s *Server) ProviderStatus(name string) (state, lastError string, err error) {
	var body struct {
		Providers []struct{ Name, State, LastError string }
	}
	if err := s.GetJSON("/api/v1/providers", &body); err != nil {
		return "", "", err
	}
	for _, p := range body.Providers {
		if p.Name == name {
			return p.State, p.LastError, nil
		}
	}
	return "", "", fmt.Errorf("no provider %q in %+v", name, body.Providers)
}

// WaitServer polls cond until it returns true or within passes, then fails
// with what and the last state cond described.
func WaitServer(t testing.TB, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, within, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
