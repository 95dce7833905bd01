package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// buildBinaries returns the directory holding osm-server, the static
// plugin and osm-agent, laid out as `make build` lays them out. They are
// built once per test binary (TestMain removes them); tests must not
// change the directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = os.MkdirTemp("", "osm-server-test-bin-")
		if binaries.err != nil {
			return
		}
		for out, pkg := range map[string]string{
			"osm-server":          "github.com/osm-vm/osm-vm/cmd/osm-server",
			"osm-provider-static": "github.com/osm-vm/osm-vm/providers/static",
			"osm-agent":           "github.com/osm-vm/osm-vm/cmd/osm-agent",
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binaries.dir, out), pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				binaries.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
				return
			}
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.dir
}

var binaries struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return testaddr.Free(t)
}

type runningServer struct {
	cmd    *exec.Cmd
	base   string
	log    string
	exited chan error
}

// startServer runs osm-server from bin with two static providers reading
// one endpoints file, and waits until it is ready.
func startServer(t *testing.T, bin string) *runningServer {
	t.Helper()
	dir := t.TempDir()
	endpoints := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(endpoints, []byte("services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.5, port: 14001}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	debug := freeAddr(t)
	s := launchServer(t, bin, dir, fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s\napiAddress: 127.0.0.1:0\nxdsAddress: 127.0.0.1:0\nproviders:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n  - {name: second, plugin: osm-provider-static, config: {file: %s}}\n",
		filepath.Join(dir, "data"), bin, debug, endpoints, endpoints))
	s.base = "http://" + debug
	testwait.Until(t, "osm-server ready", func() (bool, string) {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return s
}

// launchServer starts osm-server from bin with config (written to dir),
// its output in dir/server.log; the test's end kills it and, if the test
// failed, logs that file.
func launchServer(t *testing.T, bin, dir, config string) *runningServer {
	t.Helper()
	configFile := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "server.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	cmd := exec.Command(filepath.Join(bin, "osm-server"), "serve", "--config", configFile)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &runningServer{cmd: cmd, log: logFile, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("server log:\n%s", s.output())
		}
	})
	return s
}

// output returns what the server has logged so far.
func (s *runningServer) output() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

func (s *runningServer) pluginPIDs(t *testing.T) []int {
	t.Helper()
	resp, err := http.Get(s.base + "/api/v1/providers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Providers []struct {
			Name string
			PID  int
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range body.Providers {
		if p.PID == 0 {
			t.Fatalf("provider %s has no pid", p.Name)
		}
		pids = append(pids, p.PID)
	}
	if len(pids) != 2 {
		t.Fatalf("got %d providers, want 2", len(pids))
	}
	return pids
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound(t))
	for _, pid := range pids {
		for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				t.Errorf("plugin pid %d still running after the server stopped", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestServeEndToEnd(t *testing.T) {
	bin := buildBinaries(t)

	t.Run("serves the static provider's endpoints", func(t *testing.T) {
		s := startServer(t, bin)
		resp, err := http.Get(s.base + "/api/v1/services/default/bookstore/endpoints")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Endpoints []struct {
				IP       string
				Port     int
				Provider string
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		var summary []string
		for _, e := range got.Endpoints {
			summary = append(summary, fmt.Sprintf("%s:%d@%s", e.IP, e.Port, e.Provider))
		}
		if want := "10.0.0.5:14001@onprem,10.0.0.5:14001@second"; strings.Join(summary, ",") != want {
			t.Errorf("endpoints = %v, want %s", summary, want)
		}
	})

	t.Run("xDS waits for the providers' first lists", func(t *testing.T) {
		dir := t.TempDir()
		endpoints := filepath.Join(dir, "endpoints.yaml") // written later
		xds := freeAddr(t)
		srv := launchServer(t, bin, dir, fmt.Sprintf("dataDir: %s\npluginDir: %s\ndebugAddress: %s\napiAddress: 127.0.0.1:0\nxdsAddress: %s\nproviders:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n",
			filepath.Join(dir, "data"), bin, freeAddr(t), xds, endpoints))
		serverLog := srv.output
		dials := func() bool {
			c, err := net.DialTimeout("tcp", xds, time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		testwait.For(t, "the server says xDS waits for the providers", func() bool {
			return strings.Contains(serverLog(), "xDS waits for every provider's first list")
		})
		time.Sleep(time.Second)
		if dials() {
			t.Fatal("xDS accepts connections before the provider has listed any endpoint")
		}
		if err := os.WriteFile(endpoints, []byte("services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.5, port: 14001}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "xDS serves once the provider has listed", dials)
		if !strings.Contains(serverLog(), "every provider has listed its endpoints; serving xDS") {
			t.Error("the server did not log that it serves xDS after the providers listed")
		}
	})

	t.Run("SIGKILL of the server leaves no plugin running", func(t *testing.T) {
		s := startServer(t, bin)
		pids := s.pluginPIDs(t)
		if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-s.exited
		s.exited <- nil
		waitGone(t, pids)
	})

	t.Run("SIGTERM stops the server and its plugins cleanly", func(t *testing.T) {
		s := startServer(t, bin)
		pids := s.pluginPIDs(t)
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			if err != nil {
				t.Errorf("osm-server exited with %v after SIGTERM; want status 0", err)
			}
		case <-time.After(testwait.Bound(t)):
			t.Fatal("osm-server did not exit after SIGTERM")
		}
		waitGone(t, pids)
	})
}

func TestServeRejectsBadConfig(t *testing.T) {
	path := writeConfig(t, "providers:\n  - {name: a, plugin: ../x}\n")
	cmd := newRootCmd(&strings.Builder{}, &strings.Builder{})
	cmd.SetArgs([]string{"serve", "--config", path})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "providers[0].plugin") {
		t.Errorf("serve with a bad config: %v; want an error naming providers[0].plugin", err)
	}
}

// TestServeConsulUnreachable starts `serve --store consul` with nothing but
// CONSUL_HTTP_ADDR set, at an address nothing listens on: it must fail at
// once, naming the store, the address and the variable to fix.
func TestServeConsulUnreachable(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("CONSUL_HTTP_ADDR", addr)
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	cmd := newRootCmd(&strings.Builder{}, &strings.Builder{})
	cmd.SetArgs([]string{"serve", "--store", "consul", "--data-dir", t.TempDir(), "--debug-address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--xds-address", "127.0.0.1:0"})
	err := cmd.Execute()
	for _, want := range []string{"store.backend consul", "http://" + addr, "connection refused", "CONSUL_HTTP_ADDR"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve --store consul without Consul: %v; want an error containing %q", err, want)
		}
	}
}

// waitingProviders is a plugin host whose named providers have not sent
// their first list.
type waitingProviders []string

func (w *waitingProviders) Waiting() []string { return *w }

// TestHasEndpointsWaitsForProviders: apply's unserved-service warnings
// say nothing while a provider has not listed its endpoints (right after
// a start every service would look unserved), then follow the catalog.
func TestHasEndpointsWaitsForProviders(t *testing.T) {
	cat := catalog.New()
	waiting := &waitingProviders{"onprem"}
	has := hasEndpoints(cat, waiting)
	store := mesh.MeshService{Namespace: "default", Name: "bookstore"}
	if !has(store) {
		t.Errorf("a service counted as unserved while provider onprem has not listed yet")
	}
	*waiting = nil
	if has(store) {
		t.Errorf("bookstore counted as served with no endpoint, every provider listed")
	}
	cat.SetEndpoints("onprem", store, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.5"), Port: 14001}})
	if !has(store) {
		t.Errorf("bookstore counted as unserved with an endpoint")
	}
}
