package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

const pluginEnv = "OSM_TEST_STATIC_PLUGIN"

// TestMain doubles as the plugin: run with pluginEnv set, the test binary
// serves the static provider over go-plugin (the helper-process pattern).
func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) == "1" {
		log := provider.Logger()
		provider.Serve(provider.NewPlugin(log, newStaticDriver(log)))
		return
	}
	os.Exit(m.Run())
}

// fileBackend is the conformance suite's Backend: it rewrites the YAML
// file atomically, as an operator's tooling would.
type fileBackend struct {
	mu    sync.Mutex
	path  string
	state map[provider.Service][]provider.Endpoint
}

func (b *fileBackend) SetEndpoints(_ context.Context, svc provider.Service, eps []provider.Endpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state[svc] = eps
	return b.write()
}

func (b *fileBackend) DeleteService(_ context.Context, svc provider.Service) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.state, svc)
	return b.write()
}

// Break writes a file that does not parse; Repair writes the content again.
func (b *fileBackend) Break(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return writeAtomic(b.path, "services: [\n")
}

func (b *fileBackend) Repair(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.write()
}

func (b *fileBackend) write() error {
	var sb strings.Builder
	sb.WriteString("services:\n")
	for svc, eps := range b.state {
		fmt.Fprintf(&sb, "  - name: %s\n    namespace: %s\n    endpoints:\n", svc.Name, svc.Namespace)
		for _, e := range eps {
			fmt.Fprintf(&sb, "      - {ip: %q, port: %d}\n", e.IP, e.Port)
		}
	}
	return writeAtomic(b.path, sb.String())
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func newBackend(t *testing.T) *fileBackend {
	t.Helper()
	b := &fileBackend{path: filepath.Join(t.TempDir(), "endpoints.yaml"), state: map[provider.Service][]provider.Endpoint{}}
	if err := b.write(); err != nil {
		t.Fatal(err)
	}
	return b
}

func configFor(path string) []byte {
	b, _ := json.Marshal(map[string]string{"file": path})
	return b
}

type inProcess struct{}

func (inProcess) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	b := newBackend(t)
	p := newTestProvider(t)
	if err := p.Configure(ctx, "test", configFor(b.path)); err != nil {
		t.Fatal(err)
	}
	return p, b
}

type subprocess struct{}

func (subprocess) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	b := newBackend(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), pluginEnv+"=1")
	p := providertest.StartPlugin(t, cmd)
	if err := p.Configure(ctx, "test", configFor(b.path)); err != nil {
		t.Fatal(err)
	}
	return p, b
}

// testProvider is the static provider in-process, with its driver at hand.
type testProvider struct {
	*provider.Plugin
	driver *staticDriver
}

func newTestProvider(t *testing.T) testProvider {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	d := newStaticDriver(log)
	// The tests' waits are bounded only by the test's deadline: an edit
	// they wait for must come by the watch, not by the safety-net re-read.
	d.poll = time.Hour
	p := provider.NewPlugin(log, d)
	t.Cleanup(func() { p.Close() })
	return testProvider{p, d}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func TestConformanceInProcess(t *testing.T) { providertest.Run(t, inProcess{}) }

func TestConformanceSubprocess(t *testing.T) { providertest.Run(t, subprocess{}) }

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"bad port", "services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.5, port: 70000}\n",
			"endpoints.yaml:5: service default/bookstore endpoint 1: port 70000 is out of range 1-65535"},
		{"bad ip", "services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.300, port: 80}\n",
			`endpoints.yaml:5: service default/bookstore endpoint 1: ip "10.0.0.300" is not an IPv4 or IPv6 address`},
		{"unknown key", "services:\n  - name: bookstore\n    namespace: default\n    endpoint: []\n",
			`line 4: unknown key endpoint`},
		{"bad name", "services:\n  - name: Book_Store\n    namespace: default\n",
			`endpoints.yaml:2: service 1: service name "Book_Store" is not a DNS-1123 label`},
		{"missing namespace", "services:\n  - name: bookstore\n",
			`endpoints.yaml:2: service 1: namespace is empty`},
		{"duplicate service", "services:\n  - {name: a, namespace: default}\n  - {name: a, namespace: default}\n",
			"endpoints.yaml:3: service default/a is listed twice (first at line 2)"},
		{"duplicate endpoint", "services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: 80}\n      - {ip: 10.0.0.1, port: 80}\n",
			"endpoints.yaml:6: service default/a endpoint 2: 10.0.0.1:80 is listed twice (first at line 5)"},
		{"not yaml", "services: [\n", "endpoints.yaml"},
		{"not a mapping", "0\n", "line 1: cannot unmarshal !!int `0` into the file (a mapping with the key services)"},
		{"services not a list", "services: x\n", "into the services list (a list of services)"},
		{"wrong type", "services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: eighty}\n", "line 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFile("/etc/osm/endpoints.yaml", []byte(tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseFile error = %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseValid(t *testing.T) {
	for name, content := range map[string]string{
		"empty":            "",
		"no services":      "services: []\n",
		"service, no eps":  "services:\n  - {name: a, namespace: default}\n",
		"ipv6 with labels": "services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: \"2001:db8::1\", port: 80, labels: {zone: a}}\n",
	} {
		if _, err := parseFile("endpoints.yaml", []byte(content)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestConfigureErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("services:\n  - {name: a, namespace: default, endpoints: [{ip: x, port: 1}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"no file key", `{}`, "`file` is missing"},
		{"unknown key", `{"path": "/x"}`, `unknown field "path"`},
		{"missing file", fmt.Sprintf(`{"file": %q}`, filepath.Join(dir, "nope.yaml")), "nope.yaml"},
		{"malformed file", fmt.Sprintf(`{"file": %q}`, bad), "bad.yaml:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newTestProvider(t).Configure(context.Background(), "onprem", []byte(tc.config))
			if !errors.Is(err, provider.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Configure error = %v; want ErrInvalidConfig containing %q", err, tc.want)
			}
		})
	}
}

// events collects Watch events.
type events struct {
	mu  sync.Mutex
	got []provider.Event
}

func (e *events) add(ev provider.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return nil
}

func (e *events) snapshot() []provider.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func TestBadEditKeepsLastGoodThenRecovers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	good := "services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: 80}\n"
	if err := writeAtomic(path, good); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t)
	if err := p.Configure(ctx, "onprem", configFor(path)); err != nil {
		t.Fatal(err)
	}
	var evs events
	go func() { _ = p.Watch(ctx, evs.add) }()
	time.Sleep(100 * time.Millisecond)

	if err := writeAtomic(path, strings.Replace(good, "port: 80", "port: 0", 1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "unhealthy event", func() bool {
		for _, ev := range evs.snapshot() {
			if ev.Health != nil && !ev.Health.Healthy && strings.Contains(ev.Health.Message, "endpoints.yaml:5") {
				return true
			}
		}
		return false
	})
	eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "a"})
	if err != nil || len(eps) != 1 || eps[0].Port != 80 {
		t.Errorf("ListEndpoints after bad edit = %v, %v; want the last good endpoint :80", eps, err)
	}

	// Deleting the file is also reported and keeps the last good content.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "missing-file event", func() bool {
		for _, ev := range evs.snapshot() {
			if ev.Health != nil && strings.Contains(ev.Health.Message, "no such file") {
				return true
			}
		}
		return false
	})

	if err := writeAtomic(path, strings.Replace(good, "port: 80", "port: 81", 1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "healthy again with the new endpoint", func() bool {
		got := evs.snapshot()
		healthy, updated := false, false
		for _, ev := range got {
			if ev.Health != nil && ev.Health.Healthy {
				healthy = true
			}
			if ev.Health == nil && len(ev.Endpoints) == 1 && ev.Endpoints[0].Port == 81 {
				updated = true
			}
		}
		return healthy && updated
	})
}

func TestNoEventWithoutChangeAndLabelChangeIsAnEvent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	content := "services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: 80, labels: {version: v1}}\n"
	if err := writeAtomic(path, content); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t)
	if err := p.Configure(ctx, "onprem", configFor(path)); err != nil {
		t.Fatal(err)
	}
	var evs events
	go func() { _ = p.Watch(ctx, evs.add) }()
	time.Sleep(100 * time.Millisecond)

	// Same content, different formatting: no event.
	if err := writeAtomic(path, strings.Replace(content, "services:", "# comment\nservices:", 1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if got := evs.snapshot(); len(got) != 0 {
		t.Errorf("events after a no-op edit = %+v; want none", got)
	}
	if err := writeAtomic(path, strings.Replace(content, "v1", "v2", 1)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "label change event", func() bool {
		for _, ev := range evs.snapshot() {
			if len(ev.Endpoints) == 1 && ev.Endpoints[0].Labels["version"] == "v2" {
				return true
			}
		}
		return false
	})
}

func TestSymlinkSwap(t *testing.T) {
	// Kubernetes ConfigMap volumes swap a ..data symlink to a new directory.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	for i, port := range []int{80, 81} {
		d := filepath.Join(dir, fmt.Sprintf("v%d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		c := fmt.Sprintf("services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: %d}\n", port)
		if err := os.WriteFile(filepath.Join(d, "endpoints.yaml"), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("v0", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/endpoints.yaml", filepath.Join(dir, "endpoints.yaml")); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t)
	if err := p.Configure(ctx, "onprem", configFor(filepath.Join(dir, "endpoints.yaml"))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "swapped content", func() bool {
		eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "a"})
		return err == nil && len(eps) == 1 && eps[0].Port == 81
	})
}

func TestRenameIsReadAtOnceInPlaceWriteAfterDebounce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	content := func(port int) string {
		return fmt.Sprintf("services:\n  - name: a\n    namespace: default\n    endpoints:\n      - {ip: 10.0.0.1, port: %d}\n", port)
	}
	if err := writeAtomic(path, content(80)); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t)
	p.driver.debounce, p.driver.maxDelay = time.Hour, time.Hour // only a rename is read before the hour is up
	if err := p.Configure(ctx, "onprem", configFor(path)); err != nil {
		t.Fatal(err)
	}
	port := func() uint16 {
		eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "a"})
		if err != nil || len(eps) != 1 {
			t.Fatalf("ListEndpoints = %v, %v", eps, err)
		}
		return eps[0].Port
	}

	// Written in place, the file may be half-written: it waits for the
	// directory to settle.
	if err := os.WriteFile(path, []byte(content(81)), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := port(); got != 80 {
		t.Fatalf("after an in-place write, port = %d; want 80 until the debounce is over", got)
	}
	// Renamed over it, the file is complete.
	if err := writeAtomic(path, content(82)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "renamed file read", func() bool { return port() == 82 })

	// Moved out of the directory and created anew in place, the file is not complete when
	// it appears (empty here): it too waits for the debounce.
	if err := os.Rename(path, filepath.Join(t.TempDir(), "endpoints.yaml.old")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	time.Sleep(300 * time.Millisecond)
	if got := port(); got != 82 {
		t.Fatalf("after the file was moved away and created empty, port = %d; want 82 until the debounce is over", got)
	}
}
