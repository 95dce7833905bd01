package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// pluginDir holds the real static provider plugin, built once for the tests.
var pluginDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "pluginhost-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		build := exec.Command("go", "build", "-o", filepath.Join(dir, "osm-provider-static"), "github.com/osm-vm/osm-vm/providers/static")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build the static provider plugin:", err)
			return 1
		}
		pluginDir = dir
		return m.Run()
	}())
}

var bookstore = mesh.MeshService{Namespace: "default", Name: "bookstore"}

// writeFile atomically replaces path with content.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func endpointsFile(t *testing.T, dir, name string, addrs ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	writeFile(t, path, staticYAML(addrs...))
	return path
}

func staticYAML(addrs ...string) string {
	var b strings.Builder
	b.WriteString("services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n")
	for _, a := range addrs {
		ip, port, _ := strings.Cut(a, ":")
		fmt.Fprintf(&b, "      - {ip: %s, port: %s}\n", ip, port)
	}
	return b.String()
}

func staticInstance(name, file string) Instance {
	conf, _ := json.Marshal(map[string]string{"file": file})
	return Instance{Name: name, Plugin: "osm-provider-static", Config: conf}
}

type harness struct {
	host *Host
	cat  *catalog.Catalog
	log  *testlog.Buffer // the host's log, also in the test's output
	stop func()
}

// start runs a host over instances until the test ends; the host's Run must
// have returned (every plugin stopped) by then.
func start(t *testing.T, opts Options) *harness {
	t.Helper()
	opts.PluginDir = cmpOr(opts.PluginDir, pluginDir)
	opts.MinBackoff = cmpOr(opts.MinBackoff, 100*time.Millisecond)
	cat := catalog.New()
	buf := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, buf), &slog.HandlerOptions{Level: slog.LevelDebug}))
	host := New(log, opts, cat)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := host.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(testwait.Bound(t)):
				t.Errorf("host.Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return &harness{host: host, cat: cat, log: buf, stop: stop}
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (h *harness) addrs(svc mesh.MeshService) []string {
	se, ok := h.cat.Snapshot().Endpoints(svc)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range se.Endpoints {
		out = append(out, e.AddrPort().String()+"@"+e.Provider)
	}
	return out
}

func (h *harness) endpointsAre(svc mesh.MeshService, want ...string) func() (bool, string) {
	return func() (bool, string) {
		if diff := cmp.Diff(want, h.addrs(svc)); diff != "" {
			return false, "endpoints (-want +got):\n" + diff
		}
		return true, ""
	}
}

func (h *harness) status(name string) Status {
	for _, s := range h.host.Status() {
		if s.Name == name {
			return s
		}
	}
	return Status{}
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestTwoInstancesContributeToOneService(t *testing.T) {
	dir := t.TempDir()
	a := endpointsFile(t, dir, "a.yaml", "10.0.0.1:80")
	b := endpointsFile(t, dir, "b.yaml", "10.0.0.2:80", "10.0.0.3:80")
	h := start(t, Options{Instances: []Instance{staticInstance("site-a", a), staticInstance("site-b", b)}})
	testwait.Until(t, "both providers' endpoints", h.endpointsAre(bookstore, "10.0.0.1:80@site-a", "10.0.0.2:80@site-b", "10.0.0.3:80@site-b"))
	select {
	case <-h.host.Listed():
	case <-time.After(testwait.Bound(t)):
		t.Fatalf("Listed() not closed after both providers listed (waiting: %v)", h.host.Waiting())
	}
	if w := h.host.Waiting(); len(w) != 0 {
		t.Errorf("Waiting() = %v after both providers listed, want none", w)
	}
	// An edit to one file changes only that provider's share.
	writeFile(t, b, staticYAML("10.0.0.2:80"))
	testwait.Until(t, "edit visible", h.endpointsAre(bookstore, "10.0.0.1:80@site-a", "10.0.0.2:80@site-b"))
}

func TestKilledPluginKeepsEndpointsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	h := start(t, Options{Instances: []Instance{staticInstance("onprem", file)}})
	testwait.Until(t, "first sync", h.endpointsAre(bookstore, "10.0.0.1:80@onprem"))
	pid := h.status("onprem").PID
	if pid == 0 {
		t.Fatal("status has no plugin PID")
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "host notices the death", func() (bool, string) {
		if s := h.status("onprem"); s.StaleSince == nil {
			return false, fmt.Sprintf("status %+v has no staleSince", s)
		}
		return true, ""
	})
	// The last good endpoints are still served while the plugin is down.
	if diff := cmp.Diff([]string{"10.0.0.1:80@onprem"}, h.addrs(bookstore)); diff != "" {
		t.Errorf("endpoints while plugin is down (-want +got):\n%s", diff)
	}

	testwait.Until(t, "plugin back and fresh", func() (bool, string) {
		s := h.status("onprem")
		if s.State != StateRunning || s.StaleSince != nil || s.PID == 0 || s.PID == pid || s.Restarts != 1 {
			return false, fmt.Sprintf("status %+v", s)
		}
		return true, ""
	})
	if s := h.status("onprem"); !strings.Contains(s.LastError, "watch") && !strings.Contains(s.LastError, "exited") {
		t.Errorf("LastError = %q; want it to say the plugin's stream broke or it exited", s.LastError)
	}
	// The new process serves edits.
	writeFile(t, file, staticYAML("10.0.0.9:80"))
	testwait.Until(t, "edit after restart", h.endpointsAre(bookstore, "10.0.0.9:80@onprem"))
}

func TestStallIsNotAHang(t *testing.T) {
	// A server busy with a reconnect storm can read a health answer
	// seconds late; a plugin that answers late, or not for a few seconds,
	// must not be killed. 4 s is past the old bound (three checks in a row
	// unanswered within 750 ms each, ~3 s), within the default HangTimeout.
	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	h := start(t, Options{Instances: []Instance{staticInstance("onprem", file)}})
	testwait.Until(t, "first sync", h.endpointsAre(bookstore, "10.0.0.1:80@onprem"))
	pid := h.status("onprem").PID

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the stall itself: the plugin answers nothing for 4 s
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the plugin answers in time again", func() (bool, string) {
		if !strings.Contains(h.log.String(), "provider plugin answers its health checks in time again") {
			return false, "not logged yet"
		}
		return true, ""
	})
	if s := h.status("onprem"); s.PID != pid || s.Restarts != 0 || s.StaleSince != nil {
		t.Errorf("after a 4 s stall: status %+v; want the same plugin (pid %d) still running", s, pid)
	}
	if !strings.Contains(h.log.String(), "kill_after=15s") {
		t.Errorf("the late answer's warning does not say when the plugin would be killed:\n%s", h.log.String())
	}
	writeFile(t, file, staticYAML("10.0.0.2:80"))
	testwait.Until(t, "edit after the stall", h.endpointsAre(bookstore, "10.0.0.2:80@onprem"))
}

func TestHungPluginIsKilledAndRestarted(t *testing.T) {
	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	h := start(t, Options{Instances: []Instance{staticInstance("onprem", file)}, HangTimeout: 2 * time.Second})
	testwait.Until(t, "first sync", h.endpointsAre(bookstore, "10.0.0.1:80@onprem"))
	pid := h.status("onprem").PID

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// No check is answered for HangTimeout (2 s).
	testwait.Until(t, "host notices the hang", func() (bool, string) {
		if s := h.status("onprem"); s.StaleSince == nil {
			return false, fmt.Sprintf("status %+v has no staleSince", s)
		}
		return true, ""
	})
	if s := h.status("onprem"); !strings.Contains(s.LastError, "health check") {
		t.Errorf("LastError = %q; want it to name the failed health check", s.LastError)
	}
	testwait.Until(t, "plugin replaced", func() (bool, string) {
		s := h.status("onprem")
		if s.State != StateRunning || s.PID == pid || s.PID == 0 {
			return false, fmt.Sprintf("status %+v", s)
		}
		return true, ""
	})
	testwait.Until(t, "hung process killed", func() (bool, string) {
		if !processGone(pid) {
			return false, fmt.Sprintf("pid %d still exists", pid)
		}
		return true, ""
	})
}

func TestMalformedEditKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	h := start(t, Options{Instances: []Instance{staticInstance("onprem", file)}})
	testwait.Until(t, "first sync", h.endpointsAre(bookstore, "10.0.0.1:80@onprem"))

	writeFile(t, file, staticYAML("10.0.0.1:80", "10.0.0.2:99999"))
	testwait.Until(t, "malformed file reported", func() (bool, string) {
		s := h.status("onprem")
		if s.State != StateUnhealthy || !strings.Contains(s.LastError, "endpoints.yaml") {
			return false, fmt.Sprintf("status %+v", s)
		}
		return true, ""
	})
	if diff := cmp.Diff([]string{"10.0.0.1:80@onprem"}, h.addrs(bookstore)); diff != "" {
		t.Errorf("endpoints after malformed edit (-want +got):\n%s", diff)
	}

	writeFile(t, file, staticYAML("10.0.0.2:80"))
	testwait.Until(t, "fixed file applied", h.endpointsAre(bookstore, "10.0.0.2:80@onprem"))
	testwait.Until(t, "healthy again", func() (bool, string) {
		if s := h.status("onprem"); s.State != StateRunning {
			return false, fmt.Sprintf("status %+v", s)
		}
		return true, ""
	})
}

func TestStartErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	good := staticInstance("good", file)
	missing := Instance{Name: "missing", Plugin: "osm-provider-nope", Config: []byte("{}")}
	badConfig := Instance{Name: "badconfig", Plugin: "osm-provider-static", Config: []byte(`{"fiel": "x"}`)}
	h := start(t, Options{Instances: []Instance{good, missing, badConfig}})
	testwait.Until(t, "good provider syncs", h.endpointsAre(bookstore, "10.0.0.1:80@good"))
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"missing", []string{"osm-provider-nope", "install the plugin"}},
		{"badconfig", []string{`provider "badconfig"`, "fiel"}},
	} {
		testwait.Until(t, tc.name+" error", func() (bool, string) {
			s := h.status(tc.name)
			for _, w := range tc.want {
				if !strings.Contains(s.LastError, w) {
					return false, fmt.Sprintf("LastError %q does not mention %q", s.LastError, w)
				}
			}
			return true, ""
		})
	}
	if w := h.host.Waiting(); !slices.Equal(w, []string{"missing", "badconfig"}) {
		t.Errorf("Waiting() = %v, want the two providers that never listed: [missing badconfig]", w)
	}
	select {
	case <-h.host.Listed():
		t.Errorf("Listed() closed while providers %v never listed", h.host.Waiting())
	default:
	}
}

// TestNoProvidersAreListedAtOnce: a host without instances waits for none.
func TestNoProvidersAreListedAtOnce(t *testing.T) {
	select {
	case <-New(slog.New(slog.DiscardHandler), Options{}, catalog.New()).Listed():
	default:
		t.Error("Listed() not closed for a host without providers")
	}
}

func TestSHA256Pin(t *testing.T) {
	f, err := os.Open(filepath.Join(pluginDir, "osm-provider-static"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	_, _ = io.Copy(sum, f)
	f.Close()
	good := hex.EncodeToString(sum.Sum(nil))
	bad := strings.Repeat("0", 64)

	dir := t.TempDir()
	file := endpointsFile(t, dir, "endpoints.yaml", "10.0.0.1:80")
	pinned, wrong := staticInstance("pinned", file), staticInstance("wrong", file)
	pinned.SHA256, wrong.SHA256 = good, bad
	h := start(t, Options{Instances: []Instance{pinned, wrong}})
	testwait.Until(t, "pinned plugin runs", h.endpointsAre(bookstore, "10.0.0.1:80@pinned"))
	testwait.Until(t, "wrong pin refused", func() (bool, string) {
		s := h.status("wrong")
		if !strings.Contains(s.LastError, good) || !strings.Contains(s.LastError, bad) || s.PID != 0 {
			return false, fmt.Sprintf("status %+v; want an error naming both hashes and no process", s)
		}
		return true, ""
	})
}

func TestNoPluginOutlivesTheHost(t *testing.T) {
	dir := t.TempDir()
	var instances []Instance
	for _, name := range []string{"a", "b", "c"} {
		instances = append(instances, staticInstance(name, endpointsFile(t, dir, name+".yaml", "10.0.0.1:80")))
	}
	h := start(t, Options{Instances: instances})
	testwait.Until(t, "all running", func() (bool, string) {
		if w := h.host.Waiting(); len(w) != 0 {
			return false, fmt.Sprintf("waiting for %v", w)
		}
		return true, ""
	})
	var pids []int
	for _, s := range h.host.Status() {
		pids = append(pids, s.PID)
	}
	h.stop()
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("plugin pid %d still running after Run returned", pid)
		}
	}
	if slices.Contains(pids, 0) {
		t.Errorf("some instance had no PID: %v", pids)
	}
}
