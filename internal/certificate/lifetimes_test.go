package certificate

import (
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// fakeLifetimes is a LifetimeSource whose lifetimes the test sets.
type fakeLifetimes struct {
	mu             sync.Mutex
	service, proxy time.Duration
	notify         chan struct{}
}

func (f *fakeLifetimes) Subscribe() (<-chan struct{}, func()) { return f.notify, func() {} }

func (f *fakeLifetimes) Lifetimes() (service, proxy time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.service, f.proxy
}

func (f *fakeLifetimes) set(service, proxy time.Duration) {
	f.mu.Lock()
	f.service, f.proxy = service, proxy
	f.mu.Unlock()
	f.notify <- struct{}{}
}

// Run follows Options.Lifetimes: the source's lifetimes at start and
// after each change; one under a second is refused and the previous ones
// stay.
func TestRunFollowsLifetimes(t *testing.T) {
	src := &fakeLifetimes{service: 2 * time.Hour, proxy: 3 * time.Hour, notify: make(chan struct{})}
	m := newTestManager(t, store.NewMemory(), Options{ServiceLifetime: 30 * time.Hour, ProxyLifetime: 40 * time.Hour, Lifetimes: src})
	runManager(t, m)
	want := func(what string, service, proxy time.Duration) {
		t.Helper()
		testwait.Until(t, what, func() (bool, string) {
			s, p := m.Lifetimes()
			return s == service && p == proxy, "Lifetimes() = " + s.String() + ", " + p.String()
		})
	}
	want("the source's lifetimes at start", 2*time.Hour, 3*time.Hour)
	src.set(4*time.Hour, 5*time.Hour)
	want("the changed lifetimes", 4*time.Hour, 5*time.Hour)
	src.set(time.Millisecond, 6*time.Hour)
	src.set(4*time.Hour, 5*time.Hour) // taken once the refused change was handled
	if s, p := m.Lifetimes(); s != 4*time.Hour || p != 5*time.Hour {
		t.Errorf("Lifetimes() = %s, %s after a refused change, want 4h, 5h", s, p)
	}
}
