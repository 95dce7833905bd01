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
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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

// Breaker is a Backend that can also make the provider's source fail (an
// API that refuses calls, a file that no longer parses) and repair it.
// The health cases run only for Backends that implement it.
type Breaker interface {
	// Break makes every read of the source fail until Repair.
	Break(ctx context.Context) error
	// Repair undoes Break; the source says what it said before.
	Repair(ctx context.Context) error
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
		{"ListAllMatchesTheLists", testListAll},
		{"ReplaceEndpoints", testReplaceEndpoints},
		{"UnknownServiceIsNotFound", testUnknownService},
		{"WatchSeesUpdate", testWatchUpdate},
		{"WatchSeesDelete", testWatchDelete},
		{"TwoWatchers", testTwoWatchers},
		{"WatchEndsOnCancel", testWatchCancel},
		{"TwoServicesIndependent", testTwoServices},
		{"SlowWatcherGetsLatestState", testSlowWatcher},
		{"DeleteThenReAdd", testDeleteThenReAdd},
		{"HealthTransitions", testHealth},
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
	// svcProbe is changed to learn that a watcher is subscribed.
	svcProbe = provider.Service{Namespace: "conformance", Name: "probe"}
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

// allLister is the host's view of a plugin: ListAll is the plugin
// boundary's (provider.GRPCClient), as a Provider started with
// StartPlugin has it.
type allLister interface {
	ListAll(ctx context.Context, each func(provider.Service, []provider.Endpoint) error) error
}

// ServeGRPC serves what register registers on a loopback port until the
// test ends and returns a connection to it.
func ServeGRPC(t testing.TB, register func(grpc.ServiceRegistrar)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func testListAll(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	l, ok := p.(allLister)
	if !ok {
		// In-process: the SDK's gRPC server answers ListAll from p's
		// lists, over a real loopback connection.
		l = provider.NewGRPCClient(ServeGRPC(t, func(s grpc.ServiceRegistrar) { provider.RegisterServer(s, p) }))
	}
	set(ctx, t, b, svcA, ep("192.0.2.10", 8080), ep("192.0.2.11", 8080))
	set(ctx, t, b, svcB, ep("192.0.2.20", 9090))
	eventually(ctx, t, "svc-a visible", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.10", 8080), ep("192.0.2.11", 8080))))
	eventually(ctx, t, "svc-b visible", endpointsAre(ctx, t, p, svcB, want(ep("192.0.2.20", 9090))))
	// What ListServices and ListEndpoints say (the backend holds still).
	lists := map[provider.Service][]string{}
	svcs, err := p.ListServices(ctx)
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	for _, s := range svcs {
		eps, err := p.ListEndpoints(ctx, s)
		if err != nil {
			t.Fatalf("ListEndpoints(%s): %v", s, err)
		}
		lists[s] = addrs(t, eps)
	}
	all := map[provider.Service][]string{}
	if err := l.ListAll(ctx, func(s provider.Service, eps []provider.Endpoint) error {
		if _, twice := all[s]; twice {
			t.Errorf("ListAll sent %s twice", s)
		}
		all[s] = addrs(t, eps)
		return nil
	}); err != nil {
		t.Fatalf("ListAll: %v", err)
	}
	for _, s := range []provider.Service{svcA, svcB} {
		if _, ok := all[s]; !ok {
			t.Errorf("ListAll left out %s", s)
		}
	}
	if fmt.Sprint(all) != fmt.Sprint(lists) {
		t.Errorf("ListAll says %v; ListServices and ListEndpoints say %v", all, lists)
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
	exited chan struct{} // closed when the Watch call has returned
	// hold, when set, is where the receiver waits after recording the
	// first event for holdFor: a slow watcher.
	hold    chan struct{}
	holdFor provider.Service
}

func startWatch(ctx context.Context, t *testing.T, p provider.Provider) *watcher {
	return startWatchHolding(ctx, t, p, nil, provider.Service{})
}

// startWatchHolding starts a watcher that, when hold is not nil, stops
// receiving after its first event for svc until hold is closed. The test
// ends only once the Watch call has returned (ctx must end with the test),
// so nothing the provider logs reaches a finished test.
func startWatchHolding(ctx context.Context, t *testing.T, p provider.Provider, hold chan struct{}, svc provider.Service) *watcher {
	w := &watcher{done: make(chan error, 1), exited: make(chan struct{}), hold: hold, holdFor: svc}
	t.Cleanup(func() { <-w.exited })
	go func() {
		defer close(w.exited)
		w.done <- p.Watch(ctx, func(ev provider.Event) error {
			w.mu.Lock()
			w.events = append(w.events, ev)
			hold := w.hold
			if hold != nil && ev.Health == nil && ev.Service == w.holdFor {
				w.hold = nil
			} else {
				hold = nil
			}
			w.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil
		})
	}()
	return w
}

// subscribed waits until the watchers receive changes: it changes a probe
// service until each has seen a change of it. (A conforming provider must
// not lose changes made after Watch started; this is how the suite knows
// it started, across a plugin boundary too.)
func subscribed(ctx context.Context, t *testing.T, b Backend, ws ...*watcher) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		probes.Lock()
		probes.n++
		e := ep("192.0.2.250", uint16(probes.n))
		probes.Unlock()
		set(ctx, t, b, svcProbe, e)
		// Wait a while for the change; a watcher that subscribed after it
		// was made never sees it, so then change the probe again.
		retry := time.Now().Add(Timeout / 10)
		for {
			seen := 0
			for _, w := range ws {
				if last, _ := w.lastFor(svcProbe); last != nil {
					seen++
				}
			}
			switch {
			case seen == len(ws):
				return
			case time.Now().After(deadline) || ctx.Err() != nil:
				t.Fatalf("watch not subscribed within %v: %d of %d watchers saw a change of %s", Timeout, seen, len(ws), svcProbe)
			}
			if time.Now().After(retry) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

var probes struct {
	sync.Mutex
	n int
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

func testWatchUpdate(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startWatch(wctx, t, p)
	subscribed(ctx, t, b, w)
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
	w := startWatch(wctx, t, p)
	subscribed(ctx, t, b, w)
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
	w1, w2 := startWatch(wctx, t, p), startWatch(wctx, t, p)
	subscribed(ctx, t, b, w1, w2)
	eps := []provider.Endpoint{ep("192.0.2.40", 9000)}
	set(ctx, t, b, svcA, eps...)
	eventually(ctx, t, "first watcher sees the update", w1.saw(t, svcA, false, want(eps...)))
	eventually(ctx, t, "second watcher sees the update", w2.saw(t, svcA, false, want(eps...)))
}

func testWatchCancel(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	wctx, cancel := context.WithCancel(ctx)
	w := startWatch(wctx, t, p)
	subscribed(ctx, t, b, w)
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

// lastFor returns the last event w received for svc, and how many it
// received for svc.
func (w *watcher) lastFor(svc provider.Service) (last *provider.Event, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, ev := range w.events {
		if ev.Health == nil && ev.Service == svc {
			last, n = &w.events[i], n+1
		}
	}
	return last, n
}

// endsWith returns "" once the last event w received for svc says svc has
// exactly eps.
func (w *watcher) endsWith(t *testing.T, svc provider.Service, eps []string) func() string {
	return func() string {
		last, _ := w.lastFor(svc)
		switch {
		case last == nil:
			return fmt.Sprintf("no event for %s", svc)
		case last.Deleted:
			return fmt.Sprintf("last event for %s says deleted; want %v", svc, eps)
		}
		if got := addrs(t, last.Endpoints); !slices.Equal(got, eps) {
			return fmt.Sprintf("last event for %s has %v; want %v", svc, got, eps)
		}
		return ""
	}
}

// testSlowWatcher holds one watcher on its first event for a service while
// the service changes several times: the provider must not block on it (the
// changes show in List and reach a second watcher), and once it reads again
// it must be given the latest state. In-process, where nothing buffers
// between the provider and the receiver, it must also be given no more
// than that: the intermediate states coalesce.
func testSlowWatcher(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	slow, fast := startWatchHolding(wctx, t, p, release, svcA), startWatch(wctx, t, p)
	subscribed(ctx, t, b, slow, fast)
	set(ctx, t, b, svcA, ep("192.0.2.60", 80))
	eventually(ctx, t, "slow watcher receives an event for the service (and is then held)", func() string {
		if last, _ := slow.lastFor(svcA); last == nil {
			return "no event for " + svcA.String()
		}
		return ""
	})
	var last []provider.Endpoint
	for i := 1; i <= 4; i++ {
		last = []provider.Endpoint{ep("192.0.2.60", 80), ep(fmt.Sprintf("192.0.2.%d", 60+i), 80)}
		set(ctx, t, b, svcA, last...)
	}
	eventually(ctx, t, "the latest change listed while a watcher is held", endpointsAre(ctx, t, p, svcA, want(last...)))
	eventually(ctx, t, "a second watcher sees the latest change while the first is held", fast.endsWith(t, svcA, want(last...)))
	close(release)
	eventually(ctx, t, "the slow watcher is given the latest state", slow.endsWith(t, svcA, want(last...)))
	if _, remote := p.(*provider.GRPCClient); remote {
		return // gRPC buffers the intermediate events: the count says nothing
	}
	if _, n := slow.lastFor(svcA); n > 2 {
		t.Errorf("the slow watcher received %d events for %s; want at most 2 (the one it was held on, then the latest state)", n, svcA)
	}
}

// testDeleteThenReAdd deletes a service and adds it back, once after the
// deletion was seen and once at once: the end state is the re-added one.
func testDeleteThenReAdd(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	set(ctx, t, b, svcA, ep("192.0.2.70", 80))
	eventually(ctx, t, "set endpoints visible", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.70", 80))))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startWatch(wctx, t, p)
	subscribed(ctx, t, b, w)
	if err := b.DeleteService(ctx, svcA); err != nil {
		t.Fatalf("backend DeleteService: %v", err)
	}
	eventually(ctx, t, "watch event for the delete", w.saw(t, svcA, true, nil))
	set(ctx, t, b, svcA, ep("192.0.2.71", 80))
	eventually(ctx, t, "re-added service listed", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.71", 80))))
	eventually(ctx, t, "watch event for the re-added service", w.endsWith(t, svcA, want(ep("192.0.2.71", 80))))

	if err := b.DeleteService(ctx, svcA); err != nil {
		t.Fatalf("backend DeleteService: %v", err)
	}
	set(ctx, t, b, svcA, ep("192.0.2.72", 80))
	eventually(ctx, t, "service deleted and at once re-added is listed", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.72", 80))))
	eventually(ctx, t, "the last watch event for it is the re-added state", w.endsWith(t, svcA, want(ep("192.0.2.72", 80))))
}

// health returns "" once w's last health event matches healthy (and, when
// unhealthy, has a message).
func (w *watcher) health(healthy bool) func() string {
	return func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		var last *provider.Health
		for _, ev := range w.events {
			if ev.Health != nil {
				last = ev.Health
			}
		}
		switch {
		case last == nil:
			return "no health event"
		case last.Healthy != healthy:
			return fmt.Sprintf("last health event %+v; want healthy=%v", *last, healthy)
		case !healthy && last.Message == "":
			return "unhealthy event without a message; it must say what failed and the fix"
		}
		return ""
	}
}

// testHealth breaks the source (when the Backend is a Breaker): the
// provider reports unhealthy with a message, keeps serving the last good
// endpoints, tells a new watcher at once, and after the repair reports
// healthy and follows the source again.
func testHealth(ctx context.Context, t *testing.T, p provider.Provider, b Backend) {
	br, ok := b.(Breaker)
	if !ok {
		t.Skipf("the Backend (%T) cannot break its source (implement providertest.Breaker)", b)
	}
	set(ctx, t, b, svcA, ep("192.0.2.80", 80))
	eventually(ctx, t, "set endpoints visible", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.80", 80))))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := startWatch(wctx, t, p)
	subscribed(ctx, t, b, w)
	if err := br.Break(ctx); err != nil {
		t.Fatalf("backend Break: %v", err)
	}
	eventually(ctx, t, "unhealthy reported", w.health(false))
	eventually(ctx, t, "the last good endpoints still listed", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.80", 80))))
	late := startWatch(wctx, t, p)
	eventually(ctx, t, "a new watcher told at once that the provider is unhealthy", late.health(false))
	if err := br.Repair(ctx); err != nil {
		t.Fatalf("backend Repair: %v", err)
	}
	eventually(ctx, t, "healthy again", w.health(true))
	set(ctx, t, b, svcA, ep("192.0.2.81", 80))
	eventually(ctx, t, "a change after the repair is listed", endpointsAre(ctx, t, p, svcA, want(ep("192.0.2.81", 80))))
	eventually(ctx, t, "a change after the repair is watched", w.endsWith(t, svcA, want(ep("192.0.2.81", 80))))
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
