package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

var (
	web = Service{Namespace: "default", Name: "web"}
	db  = Service{Namespace: "default", Name: "db"}
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func eps(addrs ...string) []Endpoint {
	out := []Endpoint{}
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		out = append(out, Endpoint{IP: ap.Addr(), Port: ap.Port()})
	}
	return out
}

// render writes an event as one comparable string.
func render(ev Event) string {
	switch {
	case ev.Health != nil && ev.Health.Healthy:
		return "healthy"
	case ev.Health != nil:
		return "unhealthy: " + ev.Health.Message
	case ev.Deleted:
		return ev.Service.String() + " deleted"
	}
	var a []string
	for _, e := range ev.Endpoints {
		a = append(a, e.String())
	}
	return ev.Service.String() + " = [" + strings.Join(a, " ") + "]"
}

// recorder is a Watch call's receiver that records events and can hold
// the sender on an event until released.
type recorder struct {
	mu      sync.Mutex
	got     []string
	arrived chan struct{} // signalled on every event
	hold    chan struct{} // when non-nil, send waits on it once
}

func newRecorder() *recorder { return &recorder{arrived: make(chan struct{}, 1)} }

func (r *recorder) send(ev Event) error {
	r.mu.Lock()
	r.got = append(r.got, render(ev))
	hold := r.hold
	r.hold = nil
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	if hold != nil {
		<-hold
	}
	return nil
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// waitEvents waits until the recorded events equal want.
func (r *recorder) waitEvents(t *testing.T, want ...string) {
	t.Helper()
	r.waitUntil(t, func(got []string) string { return cmp.Diff(want, got) })
}

// waitUntil waits until cond of the recorded events returns "".
func (r *recorder) waitUntil(t *testing.T, cond func([]string) string) {
	t.Helper()
	deadline := time.After(testwait.Bound(t))
	for {
		reason := cond(r.events())
		if reason == "" {
			return
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("watch events: %s", reason)
		}
	}
}

// watch starts a Watch call on s and returns its recorder; the call ends
// with the test. ready is closed once the watcher is subscribed.
func watch(t *testing.T, s *State, r *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	before := s.watcherCount()
	go func() { done <- s.Watch(ctx, r.send) }()
	testwait.For(t, "watcher subscribed", func() bool { return s.watcherCount() > before })
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch = %v after its context ended; want nil", err)
		}
	})
}

func (s *State) watcherCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

func TestStateListsOnlyAfterTheFirstCompleteRead(t *testing.T) {
	ctx := t.Context()
	s := NewState(testLog(t))
	s.SetEndpoints(web, eps("192.0.2.1:80"))
	if _, err := s.ListServices(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ListServices before ReplaceAll = %v; want ErrUnavailable", err)
	}
	s.SetUnhealthy(errors.New("backend down; check it"))
	if _, err := s.ListEndpoints(ctx, web); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "backend down; check it") {
		t.Fatalf("ListEndpoints before ReplaceAll = %v; want ErrUnavailable with the health message", err)
	}
	if n := s.ReplaceAll(map[Service][]Endpoint{web: eps("192.0.2.1:80"), db: nil}); n != 1 {
		t.Errorf("ReplaceAll changed %d services; want 1 (db; web is unchanged)", n)
	}
	got, err := s.ListServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Service{db, web}, got); diff != "" {
		t.Errorf("ListServices (-want +got):\n%s", diff)
	}
	if e, err := s.ListEndpoints(ctx, db); err != nil || e == nil || len(e) != 0 {
		t.Errorf("ListEndpoints(db) = %#v, %v; want an empty list", e, err)
	}
	if _, err := s.ListEndpoints(ctx, Service{Namespace: "default", Name: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListEndpoints(unknown) = %v; want ErrNotFound", err)
	}
}

// ReplaceAllWithHealth sets a read's endpoints and its problems in one
// step: the first complete read with problems is listed (not "no complete
// read yet") and its health is the problems; a clean read clears them.
func TestStateReplaceAllWithHealth(t *testing.T) {
	ctx := t.Context()
	s := NewState(testLog(t))
	s.ReplaceAllWithHealth(map[Service][]Endpoint{web: eps("192.0.2.1:80")}, errors.New("db: bad tag; fix it"))
	if got, err := s.ListServices(ctx); err != nil || len(got) != 1 {
		t.Errorf("ListServices after a read with problems = %v, %v; want [web]", got, err)
	}
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "db: bad tag; fix it") {
		t.Errorf("Health = %v; want the read's problems", err)
	}
	s.ReplaceAllWithHealth(map[Service][]Endpoint{web: eps("192.0.2.1:80"), db: eps("192.0.2.2:5432")}, nil)
	if err := s.Health(); err != nil {
		t.Errorf("Health after a clean read = %v; want healthy", err)
	}
}

func TestStateListReturnsCopies(t *testing.T) {
	s := NewState(testLog(t))
	in := []Endpoint{{IP: netip.MustParseAddr("192.0.2.1"), Port: 80, Labels: map[string]string{"v": "1"}}}
	s.ReplaceAll(map[Service][]Endpoint{web: in})
	got, _ := s.ListEndpoints(t.Context(), web)
	got[0].Labels["v"] = "changed"
	got[0].Port = 1
	again, _ := s.ListEndpoints(t.Context(), web)
	if again[0].Port != 80 || again[0].Labels["v"] != "1" {
		t.Errorf("a caller's change to a listed endpoint reached the state: %+v", again[0])
	}
}

func TestStateSendsOnlyChanges(t *testing.T) {
	s := NewState(testLog(t))
	s.ReplaceAll(map[Service][]Endpoint{web: eps("192.0.2.1:80")})
	r := newRecorder()
	watch(t, s, r)
	if s.SetEndpoints(web, eps("192.0.2.1:80")) {
		t.Error("SetEndpoints with the same endpoints reported a change")
	}
	if s.DeleteService(db) {
		t.Error("DeleteService of an unknown service reported a change")
	}
	s.SetHealthy() // already healthy
	s.SetEndpoints(web, eps("192.0.2.2:80"))
	// The only event is the one change: had the no-ops sent anything, it
	// would come first.
	r.waitEvents(t, "default/web = [192.0.2.2:80]")
}

// TestStateCoalescesForASlowWatcher holds one watcher on its first event
// while the driver makes many changes: the driver is never blocked, a
// fast watcher sees every change at once, and the slow one then gets only
// the latest state of each service it is owed.
func TestStateCoalescesForASlowWatcher(t *testing.T) {
	s := NewState(testLog(t))
	s.ReplaceAll(map[Service][]Endpoint{})
	slow, fast := newRecorder(), newRecorder()
	release := make(chan struct{})
	slow.hold = release
	watch(t, s, slow)
	watch(t, s, fast)

	s.SetEndpoints(web, eps("192.0.2.1:80"))
	slow.waitEvents(t, "default/web = [192.0.2.1:80]") // and now held in send
	for i := 2; i <= 100; i++ {
		s.SetEndpoints(web, eps(fmt.Sprintf("192.0.2.%d:80", i))) // returns: never blocked by the held watcher
	}
	s.SetEndpoints(db, eps("192.0.2.200:5432"))
	s.DeleteService(db)
	s.SetUnhealthy(errors.New("flapping"))
	s.SetHealthy()
	// The fast watcher is not held up by the slow one: it reaches the
	// latest state (coalescing what it could not keep up with).
	fast.waitUntil(t, func(got []string) string {
		if !slices.Contains(got, "default/web = [192.0.2.100:80]") || !slices.Contains(got, "default/db deleted") || got[len(got)-1] == "unhealthy: flapping" {
			return fmt.Sprintf("fast watcher got %q; want web at .100, db deleted, healthy", got)
		}
		return ""
	})

	close(release)
	// Health first, then services in order, each at its latest state.
	slow.waitEvents(t, "default/web = [192.0.2.1:80]", "healthy", "default/db deleted", "default/web = [192.0.2.100:80]")
}

func TestStateDeleteThenReAdd(t *testing.T) {
	s := NewState(testLog(t))
	s.ReplaceAll(map[Service][]Endpoint{web: eps("192.0.2.1:80")})
	r := newRecorder()
	watch(t, s, r)
	s.DeleteService(web)
	r.waitEvents(t, "default/web deleted")
	if _, err := s.ListEndpoints(t.Context(), web); !errors.Is(err, ErrNotFound) {
		t.Errorf("ListEndpoints after delete = %v; want ErrNotFound", err)
	}
	s.SetEndpoints(web, eps("192.0.2.2:80"))
	r.waitEvents(t, "default/web deleted", "default/web = [192.0.2.2:80]")

	// Deleted and re-added before the watcher ran: it hears the end state.
	release := make(chan struct{})
	r.mu.Lock()
	r.hold = release
	r.mu.Unlock()
	s.SetEndpoints(web, eps("192.0.2.3:80"))
	r.waitEvents(t, "default/web deleted", "default/web = [192.0.2.2:80]", "default/web = [192.0.2.3:80]")
	s.DeleteService(web)
	s.SetEndpoints(web, eps("192.0.2.4:80"))
	close(release)
	r.waitEvents(t, "default/web deleted", "default/web = [192.0.2.2:80]", "default/web = [192.0.2.3:80]", "default/web = [192.0.2.4:80]")
}

func TestStateHealth(t *testing.T) {
	s := NewState(testLog(t))
	s.ReplaceAll(map[Service][]Endpoint{web: eps("192.0.2.1:80")})
	r := newRecorder()
	watch(t, s, r)
	s.SetUnhealthy(errors.New("API down; the last endpoints stay"))
	s.SetUnhealthy(errors.New("API down; the last endpoints stay")) // a repeat: no event
	r.waitEvents(t, "unhealthy: API down; the last endpoints stay")
	if err := s.Health(); err == nil || err.Error() != "API down; the last endpoints stay" {
		t.Errorf("Health() = %v", err)
	}
	if got, err := s.ListEndpoints(t.Context(), web); err != nil || len(got) != 1 {
		t.Errorf("ListEndpoints while unhealthy = %v, %v; want the last good endpoint", got, err)
	}
	// A new watcher hears the health first.
	late := newRecorder()
	watch(t, s, late)
	late.waitEvents(t, "unhealthy: API down; the last endpoints stay")

	s.SetUnhealthy(errors.New("token expired; renew it"))
	r.waitEvents(t, "unhealthy: API down; the last endpoints stay", "unhealthy: token expired; renew it")
	s.SetUnhealthy(nil) // the same as SetHealthy
	r.waitEvents(t, "unhealthy: API down; the last endpoints stay", "unhealthy: token expired; renew it", "healthy")
	if err := s.Health(); err != nil {
		t.Errorf("Health() = %v; want nil", err)
	}
}

// fakeDriver is a Driver whose Run is given by the test.
type fakeDriver struct {
	configureErr error
	run          func(ctx context.Context, s *State) error
}

func (d *fakeDriver) Describe() Info { return Info{Name: "fake", Version: "v0"} }

func (d *fakeDriver) Configure(context.Context, string, []byte) error { return d.configureErr }

func (d *fakeDriver) Run(ctx context.Context, s *State) error { return d.run(ctx, s) }

func TestPluginConfigureWaitsForTheFirstRead(t *testing.T) {
	read := make(chan struct{})
	p := NewPlugin(testLog(t), &fakeDriver{run: func(ctx context.Context, s *State) error {
		<-read
		s.ReplaceAll(map[Service][]Endpoint{web: eps("192.0.2.1:80")})
		<-ctx.Done()
		return nil
	}})
	t.Cleanup(func() { p.Close() })
	done := make(chan error, 1)
	go func() { done <- p.Configure(t.Context(), "test", nil) }()
	select {
	case err := <-done:
		t.Fatalf("Configure returned %v before the first read", err)
	case <-time.After(50 * time.Millisecond): // a check that it waits, not synchronisation
	}
	close(read)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := p.ListServices(t.Context()); err != nil || !cmp.Equal(got, []Service{web}) {
		t.Errorf("ListServices right after Configure = %v, %v; want [%s]", got, err, web)
	}
	if err := p.Configure(t.Context(), "again", nil); err == nil || !strings.Contains(err.Error(), "already configured") {
		t.Errorf("second Configure = %v; want already configured", err)
	}
}

func TestPluginConfigureReturnsOnAFailureAndOnTimeout(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		p := NewPlugin(testLog(t), &fakeDriver{run: func(ctx context.Context, s *State) error {
			s.SetUnhealthy(errors.New("credentials refused; renew them"))
			<-ctx.Done()
			return nil
		}})
		t.Cleanup(func() { p.Close() })
		if err := p.Configure(t.Context(), "test", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ListServices(t.Context()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "credentials refused") {
			t.Errorf("ListServices = %v; want ErrUnavailable naming the failure", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		read := make(chan struct{})
		p := NewPlugin(testLog(t), &fakeDriver{run: func(ctx context.Context, s *State) error {
			select {
			case <-read:
				s.ReplaceAll(nil)
			case <-ctx.Done():
			}
			<-ctx.Done()
			return nil
		}})
		p.FirstReadWait = 10 * time.Millisecond
		t.Cleanup(func() { p.Close() })
		if err := p.Configure(t.Context(), "test", nil); err != nil {
			t.Fatal(err)
		}
		if err := p.State().Health(); err == nil || !strings.Contains(err.Error(), "no complete read of the backend within 10ms") {
			t.Errorf("health after the first-read wait = %v; want it to say the read is late", err)
		}
		close(read)
		testwait.For(t, "healthy once the first read came", func() bool { return p.State().Health() == nil })
	})
}

func TestPluginRunEnding(t *testing.T) {
	t.Run("before the first read: Configure fails", func(t *testing.T) {
		p := NewPlugin(testLog(t), &fakeDriver{run: func(context.Context, *State) error { return errors.New("cannot start the watch") }})
		t.Cleanup(func() { p.Close() })
		if err := p.Configure(t.Context(), "test", nil); err == nil || !strings.Contains(err.Error(), "cannot start the watch") {
			t.Errorf("Configure = %v; want Run's error", err)
		}
	})
	t.Run("later: Watch ends with why", func(t *testing.T) {
		stop := make(chan struct{})
		p := NewPlugin(testLog(t), &fakeDriver{run: func(_ context.Context, s *State) error {
			s.ReplaceAll(nil)
			<-stop
			return nil
		}})
		t.Cleanup(func() { p.Close() })
		if err := p.Configure(t.Context(), "test", nil); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Watch(t.Context(), func(Event) error { return nil }) }()
		close(stop)
		if err := <-done; err == nil || !strings.Contains(err.Error(), `provider fake instance "test" stopped following its backend`) {
			t.Errorf("Watch = %v; want an error saying the driver stopped", err)
		}
	})
	t.Run("configure error: not configured, may try again", func(t *testing.T) {
		d := &fakeDriver{configureErr: fmt.Errorf("%w: file is missing", ErrInvalidConfig), run: func(ctx context.Context, s *State) error {
			s.ReplaceAll(nil)
			<-ctx.Done()
			return nil
		}}
		p := NewPlugin(testLog(t), d)
		t.Cleanup(func() { p.Close() })
		if err := p.Configure(t.Context(), "test", nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Configure = %v; want ErrInvalidConfig", err)
		}
		if _, err := p.ListServices(t.Context()); !errors.Is(err, ErrNotConfigured) {
			t.Errorf("ListServices = %v; want ErrNotConfigured", err)
		}
		if err := p.Watch(t.Context(), func(Event) error { return nil }); !errors.Is(err, ErrNotConfigured) {
			t.Errorf("Watch = %v; want ErrNotConfigured", err)
		}
		d.configureErr = nil
		if err := p.Configure(t.Context(), "test", nil); err != nil {
			t.Errorf("Configure after a failed one = %v; want nil", err)
		}
	})
}
