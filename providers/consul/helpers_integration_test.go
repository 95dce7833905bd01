//go:build consulintegration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/provider"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// apiClient is a Consul client for the test's own writes, with token.
func apiClient(t testing.TB, a *consultest.Agent, token string) *api.Client {
	t.Helper()
	ac := api.DefaultConfig()
	ac.Address, ac.Token = a.HTTPAddr, token
	c, err := api.NewClient(ac)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startProvider configures an in-process provider with cfg (address set
// to the agent's unless given).
func startProvider(ctx context.Context, t *testing.T, a *consultest.Agent, cfg map[string]any) *provider.Plugin {
	t.Helper()
	if _, ok := cfg["address"]; !ok {
		cfg["address"] = a.HTTPAddr
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(testLogger(t))
	t.Cleanup(func() { p.Close() })
	if err := p.Configure(ctx, "it", raw); err != nil {
		t.Fatalf("Configure(%s): %v", raw, err)
	}
	return p
}

// instanceSpec is one service instance registered through the agent API
// with a TTL check.
type instanceSpec struct {
	service, id, addr string
	port              int
	tags              []string
	meta              map[string]string
}

// register registers in with a TTL check ("check-<id>") in status.
func register(t testing.TB, c *api.Client, in instanceSpec, status string) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: in.id, Name: in.service, Address: in.addr, Port: in.port, Tags: in.tags, Meta: in.meta,
		Check: &api.AgentServiceCheck{CheckID: "check-" + in.id, TTL: "30m", Status: status},
	})
	if err != nil {
		t.Fatalf("register %s (%s): %v", in.id, in.service, err)
	}
}

// setTTL moves an instance's TTL check to status.
func setTTL(t testing.TB, c *api.Client, id, status string) {
	t.Helper()
	if err := c.Agent().UpdateTTL("check-"+id, "set by the test", status); err != nil {
		t.Fatalf("update TTL check of %s to %s: %v", id, status, err)
	}
}

// eventLog folds a provider's Watch events into the state they describe.
type eventLog struct {
	mu     sync.Mutex
	state  map[string][]string // mesh service -> "ip:port label=value ..." sorted
	health []provider.Health
}

func watchEvents(ctx context.Context, t *testing.T, p provider.Provider) *eventLog {
	t.Helper()
	l := &eventLog{state: map[string][]string{}}
	// Seed from a list, then fold events (an event after the list wins).
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		p.Watch(wctx, func(ev provider.Event) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			switch {
			case ev.Health != nil:
				l.health = append(l.health, *ev.Health)
			case ev.Deleted:
				delete(l.state, ev.Service.String())
			default:
				l.state[ev.Service.String()] = describeEndpoints(ev.Endpoints)
			}
			return nil
		})
	}()
	svcs, err := p.ListServices(ctx)
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	for _, s := range svcs {
		eps, err := p.ListEndpoints(ctx, s)
		if err != nil {
			t.Fatalf("ListEndpoints(%s): %v", s, err)
		}
		l.mu.Lock()
		if _, ok := l.state[s.String()]; !ok {
			l.state[s.String()] = describeEndpoints(eps)
		}
		l.mu.Unlock()
	}
	return l
}

func describeEndpoints(eps []provider.Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		parts := []string{e.String()}
		for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
			if k == labelNode || k == labelDatacenter || k == labelServiceID || k == labelService {
				continue // checked once, in TestLabels; they would clutter every want
			}
			parts = append(parts, k+"="+e.Labels[k])
		}
		out = append(out, strings.Join(parts, " "))
	}
	slices.Sort(out)
	return out
}

func (l *eventLog) snapshot() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.state)
}

func (l *eventLog) lastHealth() *provider.Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.health) == 0 {
		return nil
	}
	h := l.health[len(l.health)-1]
	return &h
}

// waitFor waits until cond returns "", failing with its last complaint.
func waitFor(t testing.TB, what string, cond func() string) {
	t.Helper()
	testwait.Until(t, what, func() (bool, string) { reason := cond(); return reason == "", reason })
}

// stateIs returns a condition: the log's state equals want.
func (l *eventLog) stateIs(want map[string][]string) func() string {
	return func() string {
		got := l.snapshot()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return ""
		}
		return fmt.Sprintf("state %v; want %v", got, want)
	}
}

// healthIs returns a condition: the last health event says healthy (and,
// when unhealthy, contains every one of parts).
func (l *eventLog) healthIs(healthy bool, parts ...string) func() string {
	return func() string {
		h := l.lastHealth()
		if h == nil {
			return "no health event"
		}
		if h.Healthy != healthy {
			return fmt.Sprintf("last health event %+v; want healthy=%v", *h, healthy)
		}
		for _, p := range parts {
			if !strings.Contains(h.Message, p) {
				return fmt.Sprintf("health message %q does not contain %q", h.Message, p)
			}
		}
		return ""
	}
}

// binaries holds osm-server and this plugin, built once per test binary
// (a build can wait long on a machine whose module cache others lock).
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

// buildBinaries returns the directory holding osm-server and
// osm-provider-consul, building them on first use.
func buildBinaries(t testing.TB) string {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = os.MkdirTemp("", "osm-provider-consul-test-")
		if binaries.err != nil {
			return
		}
		for out, pkg := range map[string]string{
			"osm-server":          "github.com/osm-vm/osm-vm/cmd/osm-server",
			"osm-provider-consul": ".",
		} {
			if b, err := exec.Command("go", "build", "-o", filepath.Join(binaries.dir, out), pkg).CombinedOutput(); err != nil {
				binaries.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.dir
}
