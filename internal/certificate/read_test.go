package certificate

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// callCounter counts the reads (Get) and value listings (List) of the
// keys under prefix: on Consul each is a round trip.
type callCounter struct {
	*store.Memory
	prefix string

	mu          sync.Mutex
	gets, lists int
}

func (c *callCounter) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if strings.HasPrefix(key, c.prefix) {
		c.mu.Lock()
		c.gets++
		c.mu.Unlock()
	}
	return c.Memory.Get(ctx, key)
}

func (c *callCounter) List(ctx context.Context, prefix string) ([]store.KV, error) {
	if strings.HasPrefix(prefix, c.prefix) {
		c.mu.Lock()
		c.lists++
		c.mu.Unlock()
	}
	return c.Memory.List(ctx, prefix)
}

// calls returns the counts so far and starts them again.
func (c *callCounter) calls() (gets, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gets, lists = c.gets, c.lists
	c.gets, c.lists = 0, 0
	return gets, lists
}

func (m *Manager) knownProxies() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.proxies)
}

// A replica starting on a store of many proxy records reads them in one
// listing, not one round trip each; later syncs read a few changes one by
// one, and many deletions by another replica are seen with one listing.
func TestManyProxyRecordsAreReadInOneListing(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMemory()
	m1 := newTestManager(t, mem, Options{})
	const n = 40
	cns := make([]string, n)
	for i := range cns {
		_, cns[i] = issueProxy(t, m1)
	}

	st := &callCounter{Memory: mem, prefix: proxyPrefix}
	m2 := newTestManager(t, st, Options{})
	if got := m2.knownProxies(); got != n {
		t.Fatalf("a new manager knows %d proxy records, want %d", got, n)
	}
	if gets, lists := st.calls(); gets != 0 || lists != 1 {
		t.Errorf("a new manager on %d records read them with %d reads and %d listings, want 0 and 1", n, gets, lists)
	}

	for range 3 {
		issueProxy(t, m1)
	}
	if err := m2.syncProxies(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := m2.knownProxies(); got != n+3 {
		t.Errorf("after 3 more: %d known, want %d", got, n+3)
	}
	if gets, lists := st.calls(); gets != 3 || lists != 0 {
		t.Errorf("3 new records were read with %d reads and %d listings, want 3 and 0", gets, lists)
	}

	for _, cn := range cns[:30] {
		_, ver, err := mem.Get(ctx, proxyKey(cn))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := mem.Txn(ctx, store.Delete(proxyKey(cn), ver)); err != nil || !ok {
			t.Fatalf("delete %s: %v %v", cn, ok, err)
		}
	}
	if err := m2.syncProxies(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := m2.knownProxies(); got != n+3-30 {
		t.Errorf("after 30 deletions: %d known, want %d", got, n+3-30)
	}
	if gets, lists := st.calls(); gets != 0 || lists != 1 {
		t.Errorf("30 deletions were checked with %d reads and %d listings, want 0 and 1", gets, lists)
	}
}

// The same for service certificates: a replica starting where many
// service accounts have one reads them in one listing.
func TestManyServiceCertificatesAreReadInOneListing(t *testing.T) {
	mem := store.NewMemory()
	m1 := newTestManager(t, mem, Options{})
	const n = 20
	for i := range n {
		sa := bookstoreSA
		sa.Name = sa.Name + "-" + string(rune('a'+i))
		if _, err := m1.ServiceCertificate(t.Context(), sa); err != nil {
			t.Fatal(err)
		}
	}
	st := &callCounter{Memory: mem, prefix: servicePrefix}
	m2 := newTestManager(t, st, Options{})
	m2.mu.Lock()
	known := len(m2.services)
	m2.mu.Unlock()
	if known != n {
		t.Fatalf("a new manager knows %d service certificates, want %d", known, n)
	}
	if gets, lists := st.calls(); gets != 0 || lists != 1 {
		t.Errorf("a new manager on %d service certificates read them with %d reads and %d listings, want 0 and 1", n, gets, lists)
	}
}

// slowListing is a store whose listings of the keys under prefix take
// cost on clock, as a large listing on Consul takes real time.
type slowListing struct {
	*store.Memory
	prefix string
	clock  *clock
	cost   time.Duration
}

func (s *slowListing) List(ctx context.Context, prefix string) ([]store.KV, error) {
	if strings.HasPrefix(prefix, s.prefix) {
		s.clock.Advance(s.cost)
	}
	return s.Memory.List(ctx, prefix)
}

func (s *slowListing) ListVersions(ctx context.Context, prefix string) ([]store.KV, error) {
	if strings.HasPrefix(prefix, s.prefix) {
		s.clock.Advance(s.cost)
	}
	return s.Memory.ListVersions(ctx, prefix)
}

// A sync paces the next by what it cost: when every listing takes a
// second (on the clock the syncs are timed with), Run waits at least
// syncPace seconds after another replica's commit before it lists again
// (a fast listing keeps syncDelay), and then reads the commit.
func TestASlowListingPacesTheNextSync(t *testing.T) {
	mem := store.NewMemory()
	m1 := newTestManager(t, mem, Options{})
	issueProxy(t, m1)

	stopwatch := newClock()
	m2 := newTestManager(t, &slowListing{Memory: mem, clock: stopwatch, cost: time.Second}, Options{})
	m2.stopwatch = stopwatch.Now
	delays := make(chan time.Duration, 64)
	m2.after = func(d time.Duration) <-chan time.Time {
		delays <- d
		c := make(chan time.Time, 1)
		c <- time.Now()
		return c
	}
	runManager(t, m2)
	issueProxy(t, m1)
	want := syncPace * time.Second
	select {
	case d := <-delays:
		if d < want {
			t.Fatalf("after listings that took 1s, the next sync waits %v, want at least %v", d, want)
		}
	case <-time.After(time.Minute):
		t.Fatal("no sync was asked for within a minute of another replica's commit")
	}
	testwait.For(t, "the other replica's proxy record read", func() bool { return m2.knownProxies() == 2 })
	if got := syncDelayAfter(time.Millisecond); got != syncDelay {
		t.Errorf("after a 1ms listing the next sync waits %v, want syncDelay (%v)", got, syncDelay)
	}
}
