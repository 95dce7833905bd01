package presence

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// fakeRemote records the sets a sharer hands the model.
type fakeRemote struct {
	mu   sync.Mutex
	sets map[string]Set
}

func (f *fakeRemote) SetRemotePresence(replica string, set map[mesh.MeshService][]netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sets == nil {
		f.sets = map[string]Set{}
	}
	if set == nil {
		delete(f.sets, replica)
		return
	}
	f.sets[replica] = set
}

// wait polls until the sets handed over equal want.
func (f *fakeRemote) wait(t *testing.T, what string, want map[string]Set) {
	t.Helper()
	sorted := cmpopts.SortSlices(func(a, b netip.Addr) bool { return a.Less(b) })
	testwait.Until(t, what, func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		diff := cmp.Diff(want, f.sets, sorted, addrs, cmpopts.EquateEmpty())
		return diff == "", "remote sets (-want +got):\n" + diff
	})
}

// countingStore counts the transactions tried.
type countingStore struct {
	*store.Memory
	txns atomic.Int64
}

func (c *countingStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	c.txns.Add(1) // before it commits: counted before any watcher sees it
	return c.Memory.Txn(ctx, ops...)
}

func run(t *testing.T, s *Sharer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	return stop
}

func waitKey(t *testing.T, st store.Store, key string, present bool) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("key %s present = %v", key, present), func() (bool, string) {
		v, _, err := st.Get(t.Context(), key)
		return err == nil && (v != nil) == present, fmt.Sprintf("present = %v (err %v)", v != nil, err)
	})
}

var (
	addrs     = cmpopts.EquateComparable(netip.Addr{})
	bookstore = mesh.MeshService{Namespace: "default", Name: "bookstore"}
	bookbuyer = mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
	ip5, ip6  = netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
)

// TestSharersShareAcrossReplicas: two replicas on one store each hand the
// other's connected set to their model; a disconnect reaches the other,
// and a replica that stops cleanly deletes its record, so the other counts
// nothing of it.
func TestSharersShareAcrossReplicas(t *testing.T) {
	st := store.NewMemory()
	ra, rb := &fakeRemote{}, &fakeRemote{}
	a := New(slog.Default(), st, "a", ra, 20*time.Millisecond)
	b := New(slog.Default(), st, "b", rb, 20*time.Millisecond)
	run(t, a)
	stopB := run(t, b)

	a.ProxyConnected(bookstore, ip5)
	b.ProxyConnected(bookbuyer, ip6)
	b.ProxyConnected(bookbuyer, ip6) // an Envoy and a gRPC app of one machine
	rb.wait(t, "b after a's connect", map[string]Set{"a": {bookstore: {ip5}}})
	ra.wait(t, "a after b's connects", map[string]Set{"b": {bookbuyer: {ip6}}})

	b.ProxyDisconnected(bookbuyer, ip6)
	a.ProxyDisconnected(bookstore, ip5)
	rb.wait(t, "b after a's disconnect", map[string]Set{})
	waitKey(t, st, Prefix+"a", false) // an empty set is no record
	ra.wait(t, "a after one of b's two proxies left", map[string]Set{"b": {bookbuyer: {ip6}}})

	stopB()
	waitKey(t, st, Prefix+"b", false)
	ra.wait(t, "a after b stopped", map[string]Set{})
}

// TestSharerCoalesces: a burst of 10,000 connects costs a handful of
// writes, a connect undone at most two, and nothing is written at rest.
func TestSharerCoalesces(t *testing.T) {
	st := &countingStore{Memory: store.NewMemory()}
	other := &fakeRemote{}
	const interval = 250 * time.Millisecond
	s := New(slog.Default(), st, "a", &fakeRemote{}, interval)
	watcher := New(slog.Default(), st, "w", other, interval)
	run(t, s)
	run(t, watcher)
	waitKey(t, st, Prefix+"a", false)
	testwait.For(t, "each sharer's first write at start", func() bool { return st.txns.Load() >= 2 })
	before := st.txns.Load()

	want := Set{}
	start := time.Now()
	for i := range 10_000 {
		svc := mesh.MeshService{Namespace: "default", Name: fmt.Sprintf("svc-%d", i%1000)}
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		s.ProxyConnected(svc, addr)
		want[svc] = append(want[svc], addr)
	}
	burst := time.Since(start)
	other.wait(t, "the other replica after 10,000 connects", map[string]Set{"a": want})
	storm := st.txns.Load() - before
	// One write per interval while the burst lasts, and one after it.
	bound := 2 + int64(burst/interval)
	t.Logf("10,000 connects in %v: %d writes", burst.Round(time.Millisecond), storm)
	if storm > bound {
		t.Errorf("10,000 connects in %v cost %d writes, want at most %d (one per %v)", burst, storm, bound, interval)
	}

	// Connected and gone again: at most the connect's write (the first
	// change after a quiet interval goes out at once) and the one undoing
	// it; none when both fall within one interval. Then, once the store
	// holds every change, nothing at rest over four intervals (a
	// measurement, not a wait for a condition: the claim is that nothing
	// happens).
	before = st.txns.Load()
	s.ProxyConnected(bookstore, ip5)
	s.ProxyDisconnected(bookstore, ip5)
	testwait.For(t, "the store to hold every change", s.settled)
	if n := st.txns.Load() - before; n > 2 {
		t.Errorf("a connect undone cost %d writes, want at most 2", n)
	}
	before = st.txns.Load()
	time.Sleep(time.Second)
	if n := st.txns.Load() - before; n != 0 {
		t.Errorf("%d writes at rest, want 0", n)
	}
}

// TestSharerCleanStop: the record is written at start (replacing what a
// killed predecessor of the same replica left) and deleted at a clean stop.
func TestSharerCleanStop(t *testing.T) {
	st := store.NewMemory()
	stale, err := Encode(Set{bookstore: {ip5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(t.Context(), store.Set(Prefix+"a", store.AnyVersion, stale)); err != nil {
		t.Fatal(err)
	}
	s := New(slog.Default(), st, "a", &fakeRemote{}, 20*time.Millisecond)
	s.ProxyConnected(bookbuyer, ip6)
	stop := run(t, s)
	testwait.Until(t, "this replica's set, not the stale one, written at start", func() (bool, string) {
		v, _, err := st.Get(t.Context(), Prefix+"a")
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(v)
		return err == nil && cmp.Equal(got, Set{bookbuyer: {ip6}}, addrs), fmt.Sprintf("record %v (%v)", got, err)
	})
	stop()
	if v, _, err := st.Get(t.Context(), Prefix+"a"); err != nil || v != nil {
		t.Errorf("record after a clean stop: %q, %v; want none", v, err)
	}
}

// TestSharerIgnoresBadRecords: another replica's record that does not
// decode is logged and ignored (that replica keeps its last good set), and
// the sharer goes on following the others.
func TestSharerIgnoresBadRecords(t *testing.T) {
	st := store.NewMemory()
	good, err := Encode(Set{bookstore: {ip5}})
	if err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	remote := &fakeRemote{}
	s := New(slog.New(slog.NewTextHandler(&logs, nil)), st, "a", remote, 20*time.Millisecond)
	run(t, s)
	if _, err := st.Txn(t.Context(), store.Set(Prefix+"b", store.AnyVersion, good)); err != nil {
		t.Fatal(err)
	}
	remote.wait(t, "b's good record", map[string]Set{"b": {bookstore: {ip5}}})
	for _, bad := range [][]byte{[]byte("not gzip"), mustGzip(t, "{not json"), mustGzip(t, `{"services":{"nons":["10.0.0.1"]}}`), mustGzip(t, `{"services":{"a/b":["10.0.0.300"]}}`)} {
		if _, err := st.Txn(t.Context(), store.Set(Prefix+"b", store.AnyVersion, bad), store.Set(Prefix+"c", store.AnyVersion, good)); err != nil {
			t.Fatal(err)
		}
		remote.wait(t, fmt.Sprintf("after b's record became %q", bad), map[string]Set{"b": {bookstore: {ip5}}, "c": {bookstore: {ip5}}})
		if _, err := st.Txn(t.Context(), store.Delete(Prefix+"c", store.AnyVersion)); err != nil {
			t.Fatal(err)
		}
		remote.wait(t, "c's record deleted", map[string]Set{"b": {bookstore: {ip5}}})
	}
	if n := strings.Count(logs.String(), "does not decode"); n != 4 {
		t.Errorf("%d warnings about records that do not decode, want 4:\n%s", n, logs.String())
	}
}

func mustGzip(t *testing.T, s string) []byte {
	t.Helper()
	b, err := gzipBytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecordSize measures a record of 10,000 proxies over 1,000 services
// (the figure docs/operator-guide.md quotes): it must fit one transaction.
func TestRecordSize(t *testing.T) {
	set := Set{}
	for i := range 10_000 {
		svc := mesh.MeshService{Namespace: "default", Name: fmt.Sprintf("service-%d", i%1000)}
		set[svc] = append(set[svc], netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	b, err := Encode(set)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 proxies over 1,000 services: %d bytes compressed", len(b))
	if err := store.CheckLimits([]store.Op{store.Set(Prefix+"https:%2F%2F10.0.0.1:15443", store.AnyVersion, b)}); err != nil {
		t.Error(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	sorted := cmpopts.SortSlices(func(a, b netip.Addr) bool { return a.Less(b) })
	if d := cmp.Diff(set, got, sorted, addrs); d != "" {
		t.Errorf("decoded set (-want +got):\n%s", d)
	}
}
