// Package providertest is the conformance suite every osm-vm endpoints
// provider passes, in-process and as a real plugin subprocess:
//
//	func TestConformance(t *testing.T) { providertest.Run(t, myHarness{}) }
//
// It also starts plugin executables for tests (StartPlugin), so a provider's
// own tests exercise the real go-plugin boundary.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/osm-vm/osm-vm/provider"
)

// Harness makes providers under test and controls their source of truth.
type Harness interface {
	// MakeProvider returns a configured provider whose source holds no
	// services yet, and the Backend that changes that source. It registers
	// its own cleanup with t.Cleanup.
	MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, Backend)
}

// Backend changes what a provider's source (a file, a cluster, a cloud
// subscription) says.
type Backend interface {
	// SetEndpoints makes the source say svc is served by exactly eps.
	SetEndpoints(ctx context.Context, svc provider.Service, eps []provider.Endpoint) error
	// DeleteService removes svc from the source.
	DeleteService(ctx context.Context, svc provider.Service) error
}

// Timeout bounds how long the suite waits for a change to become visible.
// Providers whose source is polled set their test poll interval well below.
var Timeout = 10 * time.Second

// Run runs the conformance suite. Each case gets a fresh provider.
func Run(t *testing.T, h Harness) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(context.Context, *testing.T, provider.Provider, Backend)
	}{
		{"Describe", testDescribe},
		{"ListAfterSet", testListAfterSet},
		{"ReplaceEndpoints", testReplaceEndpoints},
		{"UnknownServiceIsNotFound", testUnknownService},
		{"WatchSeesUpdate", testWatchUpdate},
		{"WatchSeesDelete", testWatchDelete},
		{"TwoWatchers", testTwoWatchers},
		{"WatchEndsOnCancel", testWatchCancel},
		{"TwoServicesIndependent", testTwoServices},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*Timeout)
			defer cancel()
			p, b := h.MakeProvider(ctx, t)
			c.fn(ctx, t, p, b)
		})
	}
}

var (
	svcA = provider.Service{Namespace: "conformance", Name: "svc-a"}
	svcB = provider.Service{Namespace: "conformance", Name: "svc-b"}
)

func ep(ip string, port uint16) provider.Endpoint {
	return provider.Endpoint{IP: netip.MustParseAddr(ip), Port: port}
}

func set(ctx context.Context, t *testing.T, b Backend, svc provider.Service, eps ...provider.Endpoint) {
	t.Helper()
	if err := b.SetEndpoints(ctx, svc, eps); err != nil {
		t.Fatalf("backend SetEndpoints(%s): %v", svc, err)
	}
}

// addrs returns the sorted "ip:port" strings of eps, failing on invalid ones.
func addrs(t *testing.T, eps []provider.Endpoint) []string {
	t.Helper()
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		if err := e.Validate(); err != nil {
			t.Errorf("provider returned an invalid endpoint: %v", err)
		}
		out = append(out, e.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func want(eps ...provider.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.String()
	}
	slices.Sort(out)
	return out
}

// eventually polls cond until it returns "" or Timeout passes, then fails
// with the last reason.
func eventually(ctx context.Context, t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		reason := cond()
		if reason == "" {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %v: %s", what, Timeout, reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func listed(ctx context.Context, p provider.Provider, svc provider.Service) (bool, error) {
	svcs, err := p.ListServices(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(svcs, svc), nil
}

func endpointsAre(ctx context.Context, t *testing.T, p provider.Provider, svc provider.Service, w []string) func() string {
	return func() string {
		ok, err := listed(ctx, p, svc)
		if err != nil {
			return fmt.Sprintf("ListServices: %v", err)
		}
		if !ok {
			return fmt.Sprintf("ListServices does not include %s", svc)
		}
		eps, err := p.ListEndpoints(ctx, svc)
		if err != nil {
			return fmt.Sprintf("ListEndpoints(%s): %v", svc, err)
		}
		if got := addrs(t, eps); !slices.Equal(got, w) {
			return fmt.Sprintf("ListEndpoints(%s) = %v, want %v", svc, got, w)
		}
		return ""
	}
}

func testDescribe(ctx context.Context, t *testing.T, p provider.Provider, _ Backend) {
	info, err := p.Describe(ctx)
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if info.Name == "" || info.Version == "" {
		t.Errorf("Describe = %+v; want a name and a version", info)
	}
}

func testListAfterSet(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	eps := []provider.Endpoint{ep("192.0.2.10", 8080), ep("192.0.2.11", 8080)}
	set(ctx, t, b, svcA, eps...)
	eventually(ctx, t, "set endpoints visible", endpointsAre(ctx, t, p, svcA, want(eps...)))
	svcs, err := p.ListServices(ctx)
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	for _, s := range svcs {
		if err := s.Validate(); err != nil {
			t.Errorf("ListServices returned an invalid service %q: %v", s, err)
		}
	}
}

func testReplaceEndpoints(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	set(ctx, t, b, svcA, ep("192.0.2.10", 8080), ep("192.0.2.11", 8080))
	eventually(ctx, t, "first set visible", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.10", 8080), ep("192.0.2.11", 8080))))
	set(ctx, t, b, svcA, ep("192.0.2.11", 8080), ep("192.0.2.12", 8080))
	eventually(ctx, t, "replaced set visible (removed endpoint gone)", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.11", 8080), ep("192.0.2.12", 8080))))
}

func testUnknownService(ctx context.Context, t *testing.T, p provider.Provider, _ Backend) {
	_, err := p.ListEndpoints(ctx, provider.Service{Namespace: "conformance", Name: "no-such-service"})
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("ListEndpoints(unknown) error = %v; want one wrapping provider.ErrNotFound", err)
	}
}

// watcher collects events from one Watch call.
type watcher struct {
	mu     sync.Mutex
	events []provider.Event
	done   chan error
}

func startWatch(ctx context.Context, p provider.Provider) *watcher {
	w := &watcher{done: make(chan error, 1)}
	go func() {
		w.done <- p.Watch(ctx, func(ev provider.Event) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.events = append(w.events, ev)
			return nil
		})
	}()
	return w
}

// saw returns "" once an event for svc matching the condition arrived.
func (w *watcher) saw(t *testing.T, svc provider.Service, deleted bool, eps []string) func() string {
	return func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		var seen []string
		for _, ev := range w.events {
			if ev.Health != nil || ev.Service != svc {
				continue
			}
			if ev.Deleted {
				if deleted {
					return ""
				}
				seen = append(seen, "deleted")
				continue
			}
			got := addrs(t, ev.Endpoints)
			if !deleted && slices.Equal(got, eps) {
				return ""
			}
			if deleted && len(got) == 0 {
				return "" // an empty update also says "gone" for sources that cannot tell
			}
			seen = append(seen, strings.Join(got, ","))
		}
		if deleted {
			return fmt.Sprintf("no delete event for %s; events seen: %q", svc, seen)
		}
		return fmt.Sprintf("no event for %s with %v; events seen: %q", svc, eps, seen)
	}
}

// settle gives a Watch call time to subscribe before the source changes;
// a conforming provider must not lose changes made after Watch started, and
// the suite cannot observe "started" from outside.
func settle() { time.Sleep(200 * time.Millisecond) }

func testWatchUpdate(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startWatch(wctx, p)
	settle()
	eps := []provider.Endpoint{ep("192.0.2.20", 9000)}
	set(ctx, t, b, svcA, eps...)
	eventually(ctx, t, "watch event for the update", w.saw(t, svcA, false, want(eps...)))
	eps = append(eps, ep("192.0.2.21", 9000))
	set(ctx, t, b, svcA, eps...)
	eventually(ctx, t, "watch event for the scale-out", w.saw(t, svcA, false, want(eps...)))
}

func testWatchDelete(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	set(ctx, t, b, svcA, ep("192.0.2.30", 9000))
	eventually(ctx, t, "set endpoints visible", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.30", 9000))))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startWatch(wctx, p)
	settle()
	if err := b.DeleteService(ctx, svcA); err != nil {
		t.Fatalf("backend DeleteService: %v", err)
	}
	eventually(ctx, t, "watch event for the delete", w.saw(t, svcA, true, nil))
	eventually(ctx, t, "deleted service unlisted", func() string {
		ok, err := listed(ctx, p, svcA)
		if err != nil {
			return err.Error()
		}
		if ok {
			return "ListServices still includes " + svcA.String()
		}
		return ""
	})
}

func testTwoWatchers(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w1, w2 := startWatch(wctx, p), startWatch(wctx, p)
	settle()
	eps := []provider.Endpoint{ep("192.0.2.40", 9000)}
	set(ctx, t, b, svcA, eps...)
	eventually(ctx, t, "first watcher sees the update", w1.saw(t, svcA, false, want(eps...)))
	eventually(ctx, t, "second watcher sees the update", w2.saw(t, svcA, false, want(eps...)))
}

func testWatchCancel(ctx context.Context, t *testing.T, p provider.Provider, _ Backend) {
	wctx, cancel := context.WithCancel(ctx)
	w := startWatch(wctx, p)
	settle()
	cancel()
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("Watch returned %v after its context was cancelled; want nil", err)
		}
	case <-time.After(Timeout):
		t.Fatalf("Watch did not return within %v of its context being cancelled", Timeout)
	}
}

func testTwoServices(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	a := []provider.Endpoint{ep("192.0.2.50", 80)}
	bb := []provider.Endpoint{ep("192.0.2.51", 81), ep("192.0.2.52", 81)}
	set(ctx, t, b, svcA, a...)
	set(ctx, t, b, svcB, bb...)
	eventually(ctx, t, "service A visible", endpointsAre(ctx, t, p, svcA, want(a...)))
	eventually(ctx, t, "service B visible", endpointsAre(ctx, t, p, svcB, want(bb...)))
	if err := b.DeleteService(ctx, svcB); err != nil {
		t.Fatalf("backend DeleteService: %v", err)
	}
	eventually(ctx, t, "service B gone", func() string {
		ok, err := listed(ctx, p, svcB)
		if err != nil || ok {
			return fmt.Sprintf("ListServices still includes %s (err %v)", svcB, err)
		}
		return ""
	})
	eventually(ctx, t, "service A unaffected", endpointsAre(ctx, t, p, svcA, want(a...)))
}

// StartPlugin starts the provider plugin executable run by cmd over real
// go-plugin (gRPC, AutoMTLS), as osm-server does, and returns its Provider.
// The plugin is killed at the end of the test.
func StartPlugin(t testing.TB, cmd *exec.Cmd) provider.Provider {
	t.Helper()
	cfg := provider.ClientConfig(cmd)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: testWriter{t}, Level: hclog.Warn})
	cfg.Stderr = testWriter{t}
	client := plugin.NewClient(cfg)
	t.Cleanup(client.Kill)
	p, err := provider.Dispense(client)
	if err != nil {
		t.Fatalf("start plugin %s: %v", cmd.Path, err)
	}
	return p
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	if s := strings.TrimRight(string(b), "\n"); s != "" {
		w.t.Log("plugin: " + s)
	}
	return len(b), nil
}
