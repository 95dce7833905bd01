package certificate

import (
	"context"
	"crypto/elliptic"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// touchingStore rewrites the proxy record touch, unchanged, just before
// the first transaction that deletes a proxy record, as a renewal by
// another replica would between the prune's read and its delete.
type touchingStore struct {
	*store.Memory
	touch string // a CN; "" once done
}

func (s *touchingStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	if s.touch != "" && slices.ContainsFunc(ops, func(op store.Op) bool { return op.Kind == store.OpDelete }) {
		key := proxyKey(s.touch)
		s.touch = ""
		val, ver, err := s.Memory.Get(ctx, key)
		if err != nil || ver == 0 {
			return false, errors.New("touch: no record " + key)
		}
		if ok, err := s.Memory.Txn(ctx, store.Set(key, ver, val)); !ok || err != nil {
			return false, errors.New("touch: rewrite of " + key + " failed")
		}
	}
	return s.Memory.Txn(ctx, ops...)
}

// storedCNs returns the CNs of the proxy records in st.
func storedCNs(t *testing.T, st Store) []string {
	t.Helper()
	kvs, err := st.ListVersions(context.Background(), proxyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, strings.TrimPrefix(kv.Key, proxyPrefix))
	}
	return out
}

// knownCNs returns the CNs m keeps in memory.
func knownCNs(m *Manager) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.proxies))
}

// names maps CNs to the test's names for them, sorted, for readable diffs.
func names(cns []string, name map[string]string) []string {
	out := make([]string, 0, len(cns))
	for _, cn := range cns {
		if n, ok := name[cn]; ok {
			out = append(out, n)
		} else {
			out = append(out, cn)
		}
	}
	slices.Sort(out)
	return out
}

// Which records a prune deletes: those whose every certificate expired
// the retention or more ago, revoked or not; and not one rewritten after
// it was read.
func TestPruneProxies(t *testing.T) {
	const (
		lifetime  = 24 * time.Hour
		retention = 48 * time.Hour
	)
	ctx := t.Context()
	clk := newClock()
	t0 := clk.Now()
	st := &touchingStore{Memory: store.NewMemory()}
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: retention})
	name := map[string]string{}
	issue := func(n string) string {
		_, cn := issueProxy(t, m)
		name[cn] = n
		return cn
	}
	// The check is at t0+73h; a certificate issued at t issues expires
	// at t+24h and may be deleted from t+72h.
	issue("expired long ago")
	revokedOld := issue("revoked, expired long ago")
	if err := m.RevokeProxy(ctx, revokedOld); err != nil {
		t.Fatal(err)
	}
	touched := issue("expired long ago, rewritten before the delete")
	st.touch = touched

	// A MeshConfig shortened the lifetime at a renewal: the earlier
	// certificate, still in the overlap, outlives the current one.
	if err := m.SetLifetimes(0, 10*lifetime); err != nil {
		t.Fatal(err)
	}
	first, _ := issueProxy(t, m)
	name[first.Subject.CommonName] = "current expired long ago, previous not"
	if err := m.SetLifetimes(0, time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := m.RenewProxy(ctx, first, csrFor(t, ecKey(t, elliptic.P256()), nil)); err != nil {
		t.Fatal(err)
	}
	if err := m.SetLifetimes(0, lifetime); err != nil {
		t.Fatal(err)
	}
	issue("expired exactly the retention ago") // at t0+1h
	clk.Advance(time.Second)
	issue("a second short of the retention")
	clk.Set(t0.Add(40 * time.Hour))
	issue("expired recently")
	clk.Set(t0.Add(72 * time.Hour))
	revokedValid := issue("revoked, certificate valid")
	if err := m.RevokeProxy(ctx, revokedValid); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(73 * time.Hour))

	n, err := m.pruneProxies(ctx)
	if err != nil {
		t.Fatalf("pruneProxies: %v", err)
	}
	want := []string{
		"a second short of the retention",
		"current expired long ago, previous not",
		"expired long ago, rewritten before the delete",
		"expired recently",
		"revoked, certificate valid",
	}
	if diff := cmp.Diff(want, names(storedCNs(t, st), name)); diff != "" {
		t.Errorf("records left in the store (-want +got):\n%s", diff)
	}
	if n != len(name)-len(want) {
		t.Errorf("pruneProxies = %d, want %d", n, len(name)-len(want))
	}
	if diff := cmp.Diff(want, names(knownCNs(m), name)); diff != "" {
		t.Errorf("records the manager knows (-want +got):\n%s", diff)
	}

	// Once the rewrite is seen, the next pass deletes the record.
	if err := m.syncProxies(ctx, false); err != nil {
		t.Fatal(err)
	}
	if n, err := m.pruneProxies(ctx); err != nil || n != 1 {
		t.Errorf("second pruneProxies = %d, %v; want 1 (the rewritten record)", n, err)
	}
	if _, err := m.Proxy(ctx, touched); !errors.Is(err, ErrNotFound) {
		t.Errorf("Proxy(rewritten record) after the second pass: err = %v, want ErrNotFound", err)
	}
}

// A deleted record is forgotten with its pending claim by the replica that
// deleted it, and by another at its next sync, whether it syncs directly
// or from Run.
func TestPrunedProxyForgottenByReplicas(t *testing.T) {
	const lifetime, retention = time.Hour, 2 * time.Hour
	ctx := t.Context()
	clk := newClock()
	st := store.NewMemory()
	m1 := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: retention})
	_, old := issueProxy(t, m1)
	clk.Advance(lifetime + retention)
	_, fresh := issueProxy(t, m1)
	// Replicas that would not prune it themselves.
	long := Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: 100 * retention}
	m2 := newTestManager(t, st, long)
	m3 := newTestManager(t, st, long)
	runManager(t, m3)
	for _, m := range []*Manager{m1, m2} {
		m.claimMu.Lock()
		m.claims[old] = pendingClaim{at: clk.Now()}
		m.claimMu.Unlock()
	}
	want := []string{fresh}
	for i, m := range []*Manager{m1, m2, m3} {
		if got := knownCNs(m); len(got) != 2 {
			t.Fatalf("replica %d knows %v before the prune, want both records", i+1, got)
		}
	}

	if n, err := m1.pruneProxies(ctx); err != nil || n != 1 {
		t.Fatalf("pruneProxies = %d, %v; want 1", n, err)
	}
	if diff := cmp.Diff(want, knownCNs(m1)); diff != "" {
		t.Errorf("pruning replica knows (-want +got):\n%s", diff)
	}
	if err := m2.syncProxies(ctx, true); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, knownCNs(m2)); diff != "" {
		t.Errorf("other replica after its sync knows (-want +got):\n%s", diff)
	}
	for i, m := range []*Manager{m1, m2} {
		if got := m.pendingClaims(); len(got) != 0 {
			t.Errorf("replica %d still holds claims %v of the deleted record", i+1, got)
		}
		if list, err := m.ListProxies(ctx); err != nil || len(list) != 1 || list[0].CN != fresh {
			t.Errorf("replica %d ListProxies = %v, %v; want only %s", i+1, list, err, fresh)
		}
	}
	testwait.For(t, "the running replica to forget the deleted record", func() bool {
		return cmp.Equal(knownCNs(m3), want)
	})
}

// listHookStore calls afterList once, after a listing of proxy record
// versions and before it is returned.
type listHookStore struct {
	*store.Memory
	afterList func()
}

func (s *listHookStore) ListVersions(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := s.Memory.ListVersions(ctx, prefix)
	if f := s.afterList; f != nil && prefix == proxyPrefix {
		s.afterList = nil
		f()
	}
	return kvs, err
}

// A record created after a sync's listing is missing from it but not
// deleted: the sync must not forget it.
func TestSyncKeepsRecordCreatedAfterListing(t *testing.T) {
	st := &listHookStore{Memory: store.NewMemory()}
	m := newTestManager(t, st, Options{})
	_, before := issueProxy(t, m)
	var after string
	st.afterList = func() { _, after = issueProxy(t, m) }
	if err := m.syncProxies(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if after == "" {
		t.Fatal("the listing hook did not run")
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values([]string{before, after})), knownCNs(m)); diff != "" {
		t.Errorf("known after the sync (-want +got):\n%s", diff)
	}
}

// Run prunes at start, retries a failed pass, logs what it deleted, and
// prunes again an hour later.
func TestRunPrunesProxies(t *testing.T) {
	const lifetime, retention = time.Hour, 2 * time.Hour
	clk := newClock()
	st := newHeldStore()
	var logs testlog.Buffer
	m, err := New(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)), st, Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: retention})
	if err != nil {
		t.Fatal(err)
	}
	_, old := issueProxy(t, m)
	clk.Advance(lifetime + retention)
	_, fresh := issueProxy(t, m)

	st.setFail(errors.New("disk full"))
	runManager(t, m)
	testwait.For(t, "the failed prune to be logged", func() bool {
		l := logs.String()
		return strings.Contains(l, "level=ERROR") && strings.Contains(l, "prune proxy records") && strings.Contains(l, "disk full")
	})
	if got := storedCNs(t, st); len(got) != 2 {
		t.Fatalf("records while the store fails writes: %v, want both", got)
	}
	st.setFail(nil)
	testwait.For(t, "the expired record to be deleted by the retry", func() bool {
		return cmp.Equal(storedCNs(t, st), []string{fresh})
	})
	testwait.For(t, "the deletion to be logged", func() bool {
		return strings.Contains(logs.String(), "msg=\"deleted proxy records whose certificates all expired\" deleted=1")
	})
	if _, err := m.Proxy(t.Context(), old); !errors.Is(err, ErrNotFound) {
		t.Errorf("Proxy(deleted record): err = %v, want ErrNotFound", err)
	}

	// An hour (or more) later, the next pass.
	clk.Advance(lifetime + retention)
	m.wake()
	testwait.For(t, "the next pass to delete the record that expired since", func() bool {
		return len(storedCNs(t, st)) == 0
	})
	if got := knownCNs(m); len(got) != 0 {
		t.Errorf("known after both passes: %v, want none", got)
	}
}

func TestProxyRecordRetentionOption(t *testing.T) {
	if _, err := New(t.Context(), nil, store.NewMemory(), Options{ProxyRecordRetention: -time.Hour}); err == nil || !strings.Contains(err.Error(), "proxy record retention -1h0m0s is negative") {
		t.Errorf("New with a negative retention: err = %v, want it refused", err)
	}
	m := newTestManager(t, store.NewMemory(), Options{})
	if m.opts.ProxyRecordRetention != DefaultProxyRecordRetention {
		t.Errorf("default retention %s, want %s", m.opts.ProxyRecordRetention, DefaultProxyRecordRetention)
	}
}

// More expired records than one transaction may hold are deleted in
// transactions within the store's limits.
func TestPruneManyProxies(t *testing.T) {
	const lifetime, retention = time.Hour, 2 * time.Hour
	clk := newClock()
	st := store.NewMemory()
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: retention})
	const n = 2*store.MaxTxnOps + 3
	for range n {
		issueProxy(t, m)
	}
	clk.Advance(lifetime + retention)
	if got, err := m.pruneProxies(t.Context()); err != nil || got != n {
		t.Fatalf("pruneProxies = %d, %v; want %d, nil", got, err, n)
	}
	if got := storedCNs(t, st); len(got) != 0 {
		t.Errorf("%d records left, want none", len(got))
	}
}

// heldDuty is a Duty the test hands to the manager and takes away.
type heldDuty struct{ take chan context.Context }

func (d heldDuty) Run(ctx context.Context, fn func(context.Context) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case hold := <-d.take:
			hctx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(hold, cancel)
			_ = fn(hctx)
			stop()
			cancel()
		}
	}
}

// Proxy records are pruned only by the replica holding the duty, and
// from the moment it holds it.
func TestPruneOnlyWhileHoldingDuty(t *testing.T) {
	const lifetime, retention = time.Hour, 2 * time.Hour
	clk := newClock()
	st := store.NewMemory()
	duty := heldDuty{take: make(chan context.Context)}
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: lifetime, ProxyRecordRetention: retention, Duty: duty})
	issueProxy(t, m)
	clk.Advance(lifetime + retention)
	runManager(t, m)
	// Not holding the duty: a sync pass runs, the record stays.
	m.wake()
	if err := m.syncProxies(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if got := storedCNs(t, st); len(got) != 1 {
		t.Fatalf("records while another replica holds the duty: %v, want the expired one kept", got)
	}
	hold, lose := context.WithCancel(t.Context())
	defer lose()
	duty.take <- hold
	testwait.For(t, "the duty's holder to delete the expired record", func() bool { return len(storedCNs(t, st)) == 0 })
}
