package certificate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// heldStore is a Memory store whose transactions can be held or failed,
// and counted.
type heldStore struct {
	*store.Memory
	mu      sync.Mutex
	hold    chan struct{} // non-nil: Txn waits until it is closed
	fail    error
	txns    int
	entered chan struct{} // a held Txn has started
}

func newHeldStore() *heldStore { return heldOver(store.NewMemory()) }

func heldOver(m *store.Memory) *heldStore {
	return &heldStore{Memory: m, entered: make(chan struct{}, 1000)}
}

func (s *heldStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	s.mu.Lock()
	s.txns++
	hold, fail := s.hold, s.fail
	s.mu.Unlock()
	if hold != nil {
		s.entered <- struct{}{}
		<-hold
	}
	if fail != nil {
		return false, fail
	}
	return s.Memory.Txn(ctx, ops...)
}

// holdTxns holds every transaction from now until the returned function
// is called (also at the end of the test).
func (s *heldStore) holdTxns(t *testing.T) (release func()) {
	s.mu.Lock()
	hold := make(chan struct{})
	s.hold = hold
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.hold = nil
			s.mu.Unlock()
			close(hold)
		})
	}
	t.Cleanup(release)
	return release
}

func (s *heldStore) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *heldStore) txnCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txns
}

// stored returns the proxy record as the store holds it, bypassing the
// manager.
func stored(t *testing.T, st *store.Memory, cn string) ProxyRecord {
	t.Helper()
	raw, ver, err := st.Get(context.Background(), proxyKey(cn))
	if err != nil || ver == 0 {
		t.Fatalf("store record of %s: version %d, %v", cn, ver, err)
	}
	var e proxyEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return e.ProxyRecord
}

// claimReturns runs ClaimProxy and fails the test if it does not return
// (it is waiting for something it should not).
func claimReturns(t *testing.T, m *Manager, cn string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.ClaimProxy(context.Background(), cn) }()
	select {
	case err := <-done:
		return err
	case <-time.After(testwait.Bound(t)):
		t.Fatalf("ClaimProxy(%s) did not return while the store's transactions were held: it waits for the write", cn)
		return nil
	}
}

// With Run running, a claim is checked before ClaimProxy returns and
// written after: the connecting proxy does not wait for the fsync. Until
// it is written, this replica's readers see it.
func TestClaimWrittenAfterReturn(t *testing.T) {
	clk := newClock()
	st := newHeldStore()
	m := newTestManager(t, st, Options{Now: clk.Now})
	_, cn := issueProxy(t, m)
	runManager(t, m)
	ch, cancel := m.Subscribe()
	defer cancel()
	clk.Advance(time.Minute)

	release := st.holdTxns(t)
	if err := claimReturns(t, m, cn); err != nil {
		t.Fatalf("ClaimProxy: %v", err)
	}
	<-st.entered // the writer is committing it
	if got := stored(t, st.Memory, cn); got.State != StateUnclaimed {
		t.Fatalf("store state %s before the write was let through", got.State)
	}
	rec, err := m.Proxy(t.Context(), cn)
	if err != nil || rec.State != StateClaimed || !rec.LastSeen.Equal(clk.Now()) {
		t.Errorf("Proxy while the claim is pending = %s last seen %s, %v; want claimed at %s", rec.State, rec.LastSeen, err, clk.Now())
	}
	list, err := m.ListProxies(t.Context())
	if err != nil || len(list) != 1 || list[0].State != StateClaimed || !list[0].LastSeen.Equal(clk.Now()) {
		t.Errorf("ListProxies while the claim is pending = %+v, %v; want it claimed", list, err)
	}
	for _, a := range drain(ch) {
		if a.Kind == ProxyClaimed {
			t.Errorf("ProxyClaimed announced before the claim was written")
		}
	}

	release()
	if a := nextAnnouncement(t, ch, ProxyClaimed); a.ProxyCN != cn {
		t.Errorf("ProxyClaimed = %+v", a)
	}
	if got := stored(t, st.Memory, cn); got.State != StateClaimed || !got.LastSeen.Equal(clk.Now()) {
		t.Errorf("stored after the write: %s last seen %s; want claimed at %s", got.State, got.LastSeen, clk.Now())
	}

	// Reconnects write nothing, however far apart: a fleet reconnecting
	// costs the store nothing.
	before := st.txnCount()
	for range 3 {
		clk.Advance(time.Hour)
		if err := m.ClaimProxy(t.Context(), cn); err != nil {
			t.Fatal(err)
		}
	}
	m.kickClaims()
	if err := m.flushAllClaims(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.txnCount() - before; got != 0 {
		t.Errorf("three reconnects an hour apart took %d transactions, want 0", got)
	}
}

// Claims that arrive while a claim is being written are written together,
// in transactions within the store's limits (store.Memory refuses more
// than store.MaxTxnOps ops, as Consul does).
func TestClaimsCoalesce(t *testing.T) {
	for _, tc := range []struct {
		claims, txns int // txns: the first claim alone, then full batches
		maxOps       int // the store's transaction limit
	}{
		{40, 2, store.MaxTxnOps},
		{3*store.MaxTxnOps + 7, 1 + 4, store.MaxTxnOps}, // 198 after the first: 64+64+64+6
		// A store that takes larger transactions (bbolt: 1,024 ops) takes
		// the 198 in one: one fsync instead of four.
		{3*store.MaxTxnOps + 7, 1 + 1, 1024},
	} {
		t.Run(fmt.Sprintf("%d in %d", tc.claims, tc.maxOps), func(t *testing.T) {
			st := heldOver(store.NewMemoryWithLimits(tc.maxOps, store.MaxTxnBytes*16))
			m := newTestManager(t, st, Options{})
			var cns []string
			for range tc.claims {
				_, cn := issueProxy(t, m)
				cns = append(cns, cn)
			}
			runManager(t, m)
			release := st.holdTxns(t)
			before := st.txnCount()
			if err := claimReturns(t, m, cns[0]); err != nil {
				t.Fatal(err)
			}
			<-st.entered
			for _, cn := range cns[1:] {
				if err := claimReturns(t, m, cn); err != nil {
					t.Fatal(err)
				}
			}
			release()
			testwait.For(t, "every claim written", func() bool {
				for _, cn := range cns {
					if stored(t, st.Memory, cn).State != StateClaimed {
						return false
					}
				}
				return true
			})
			if got := st.txnCount() - before; got != tc.txns {
				t.Errorf("%d claims took %d transactions, want %d (the first, then the rest that came while it was written, %d at most at once)", tc.claims, got, tc.txns, tc.maxOps)
			}
		})
	}
}

// Revocation is checked against the store when the proxy claims, not
// against what this replica has followed so far: a proxy another replica
// revoked a moment ago is refused at once.
func TestClaimRefusedRightAfterRevocation(t *testing.T) {
	st := store.NewMemory()
	serving := newTestManager(t, st, Options{})
	admin := newTestManager(t, st, Options{})
	runManager(t, serving)
	_, cn := issueProxy(t, admin)
	peer, other := issueProxy(t, admin)

	if err := admin.RevokeProxy(t.Context(), cn); err != nil {
		t.Fatal(err)
	}
	if err := serving.ClaimProxy(t.Context(), cn); !errors.Is(err, ErrRevoked) {
		t.Errorf("ClaimProxy right after another replica revoked: err = %v, want ErrRevoked", err)
	}
	if err := serving.ClaimProxy(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if err := serving.RevokeProxy(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if err := serving.ClaimProxy(t.Context(), other); !errors.Is(err, ErrRevoked) {
		t.Errorf("ClaimProxy after revocation: err = %v, want ErrRevoked", err)
	}
	if rec, err := serving.VerifyProxy(t.Context(), peer); !errors.Is(err, ErrRevoked) {
		t.Errorf("VerifyProxy after revocation = %+v, %v; want ErrRevoked", rec, err)
	}
	if rec, _ := serving.Proxy(t.Context(), other); rec.State != StateRevoked {
		t.Errorf("Proxy after revocation with a claim pending: state %s, want revoked", rec.State)
	}
}

// A claim whose write is overtaken by a revocation does not undo it.
func TestPendingClaimDoesNotUndoRevocation(t *testing.T) {
	st := newHeldStore()
	m := newTestManager(t, st, Options{})
	_, cn := issueProxy(t, m)
	runManager(t, m)
	release := st.holdTxns(t)
	if err := claimReturns(t, m, cn); err != nil {
		t.Fatal(err)
	}
	<-st.entered // the writer read the unclaimed record and is committing
	// Another replica revokes the proxy meanwhile (straight to the store).
	other := newTestManager(t, st.Memory, Options{})
	if err := other.RevokeProxy(t.Context(), cn); err != nil {
		t.Fatal(err)
	}
	release()
	testwait.For(t, "the claim to be dropped", func() bool { return len(m.pendingClaims()) == 0 })
	if got := stored(t, st.Memory, cn); got.State != StateRevoked {
		t.Errorf("stored state %s, want revoked: the pending claim overwrote the revocation", got.State)
	}
	if rec, _ := m.Proxy(t.Context(), cn); rec.State != StateRevoked {
		t.Errorf("Proxy state %s, want revoked", rec.State)
	}
}

// A failed claim write is logged with the proxy named, kept visible and
// retried.
func TestFailedClaimWriteRetried(t *testing.T) {
	st := newHeldStore()
	var logs testlog.Buffer
	m, err := New(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)), st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, cn := issueProxy(t, m)
	runManager(t, m)
	ch, cancel := m.Subscribe()
	defer cancel()

	st.setFail(errors.New("disk full"))
	if err := m.ClaimProxy(t.Context(), cn); err != nil {
		t.Fatalf("ClaimProxy with the store failing writes: %v (the write is the writer's to retry)", err)
	}
	testwait.For(t, "the failed write to be logged", func() bool {
		l := logs.String()
		return strings.Contains(l, "disk full") && strings.Contains(l, cn)
	})
	if rec, _ := m.Proxy(t.Context(), cn); rec.State != StateClaimed {
		t.Errorf("Proxy while the write fails: state %s, want claimed", rec.State)
	}
	st.setFail(nil)
	nextAnnouncement(t, ch, ProxyClaimed)
	if got := stored(t, st.Memory, cn); got.State != StateClaimed {
		t.Errorf("stored state after the retry: %s, want claimed", got.State)
	}
}

// Run writes the pending claims before it returns; from then on
// ClaimProxy writes before it returns.
func TestRunWritesClaimsBeforeReturning(t *testing.T) {
	st := newHeldStore()
	m := newTestManager(t, st, Options{})
	_, first := issueProxy(t, m)
	_, second := issueProxy(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitClaimWriter(t, m)

	release := st.holdTxns(t)
	if err := claimReturns(t, m, first); err != nil {
		t.Fatal(err)
	}
	<-st.entered
	// Shut down while the write is in progress: it fails with Run's
	// context, and Run writes the claim again before returning.
	cancel()
	release()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := stored(t, st.Memory, first); got.State != StateClaimed {
		t.Errorf("stored state after Run returned: %s, want claimed", got.State)
	}
	if err := m.ClaimProxy(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, st.Memory, second); got.State != StateClaimed {
		t.Errorf("stored state of a claim made after Run returned: %s, want it written before ClaimProxy returned", got.State)
	}
}

// A record that no longer decodes loses its claim, logged with the proxy
// named; the other claims, and later ones, are written without delay, and
// the proxy is refused when it connects again.
func TestUnreadableRecordDropsOnlyItsClaim(t *testing.T) {
	st := newHeldStore()
	var logs testlog.Buffer
	m, err := New(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)), st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, first := issueProxy(t, m)
	_, good := issueProxy(t, m)
	_, bad := issueProxy(t, m)
	runManager(t, m)
	release := st.holdTxns(t)
	if err := claimReturns(t, m, first); err != nil {
		t.Fatal(err)
	}
	<-st.entered
	for _, cn := range []string{good, bad} {
		if err := claimReturns(t, m, cn); err != nil {
			t.Fatal(err)
		}
	}
	// bad's record is damaged before the writer reads it.
	if _, err := st.Memory.Txn(t.Context(), store.Set(proxyKey(bad), store.AnyVersion, []byte("{not json"))); err != nil {
		t.Fatal(err)
	}
	release()
	testwait.For(t, "the good claims to be written", func() bool {
		return stored(t, st.Memory, first).State == StateClaimed && stored(t, st.Memory, good).State == StateClaimed
	})
	testwait.For(t, "the unreadable record to be logged", func() bool {
		return strings.Contains(logs.String(), "proxy record "+bad+" does not decode")
	})
	if got := m.pendingClaims(); len(got) != 0 {
		t.Errorf("pending claims = %v, want none: the unreadable one is dropped", got)
	}
	// Later claims are not held back by it, and the proxy itself is refused.
	_, later := issueProxy(t, m)
	if err := claimReturns(t, m, later); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a later claim to be written", func() bool { return stored(t, st.Memory, later).State == StateClaimed })
	if err := m.ClaimProxy(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Errorf("ClaimProxy of the unreadable record = %v, want a refusal naming it", err)
	}
}

// ClaimVerifiedProxy claims from the record VerifyProxyChain returned
// when the stream opened, without reading it again: a revoked record is
// refused, and a revocation made after the record was read is not undone
// by the claim's write.
func TestClaimVerifiedProxy(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{})
	runManager(t, m)
	peer, cn := issueProxy(t, m)
	rec, err := m.VerifyProxy(t.Context(), peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ClaimVerifiedProxy(t.Context(), rec); err != nil {
		t.Fatalf("ClaimVerifiedProxy: %v", err)
	}
	testwait.For(t, "the claim written", func() bool { return stored(t, st, cn).State == StateClaimed })

	peer, cn = issueProxy(t, m)
	rec, err = m.VerifyProxy(t.Context(), peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RevokeProxy(t.Context(), cn); err != nil {
		t.Fatal(err)
	}
	// The record read before the revocation still says unclaimed: the
	// claim is taken, and its write must find the revocation.
	if err := m.ClaimVerifiedProxy(t.Context(), rec); err != nil {
		t.Fatalf("ClaimVerifiedProxy of the record read before the revocation: %v", err)
	}
	testwait.For(t, "the pending claim dropped", func() bool { return len(m.pendingClaims()) == 0 })
	if got := stored(t, st, cn); got.State != StateRevoked {
		t.Errorf("stored state after the claim's write: %s, want revoked", got.State)
	}
	revoked, err := m.Proxy(t.Context(), cn)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ClaimVerifiedProxy(t.Context(), revoked); !errors.Is(err, ErrRevoked) {
		t.Errorf("ClaimVerifiedProxy of a revoked record: err = %v, want ErrRevoked", err)
	}
}

// A claim of the record VerifyProxyChain returned is written on condition
// of the version it was read at, without reading the record again, and
// read back once: one read of the record from the connection to the
// written claim, besides the verification's own (there were three).
func TestVerifiedClaimReadsTheRecordOnce(t *testing.T) {
	st := &readCounter{Memory: store.NewMemory(), prefix: proxyPrefix}
	m, ch, peer, cn := runningWithProxy(t, st)
	rec, err := m.VerifyProxy(t.Context(), peer)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version == 0 {
		t.Fatal("VerifyProxy returned no record version")
	}
	st.reads()
	if err := m.ClaimVerifiedProxy(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch, ProxyClaimed)
	if got := stored(t, st.Memory, cn); got.State != StateClaimed {
		t.Fatalf("stored state %s, want claimed", got.State)
	}
	if n := st.reads(); n != 1 {
		t.Errorf("claiming a verified record read it %d times, want 1: the read-back", n)
	}
}

// The claim writer gathers claims for Options.ClaimGather before writing
// (proxies joining one after another share a commit), writes a
// transaction's worth at once without waiting that long, and writes what
// is still gathered when Run returns.
func TestClaimsGathered(t *testing.T) {
	st := heldOver(store.NewMemory()) // store.MaxTxnOps to a transaction
	m := newTestManager(t, st, Options{ClaimGather: time.Hour, ClaimMaxWait: time.Hour})
	var cns []string
	for range store.MaxTxnOps + 10 {
		_, cn := issueProxy(t, m)
		cns = append(cns, cn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitClaimWriter(t, m)
	claimed := func(cns []string) bool {
		for _, cn := range cns {
			if stored(t, st.Memory, cn).State != StateClaimed {
				return false
			}
		}
		return true
	}
	before := st.txnCount()
	full, rest := cns[:store.MaxTxnOps], cns[store.MaxTxnOps:]
	for _, cn := range full {
		if err := claimReturns(t, m, cn); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "a transaction's worth of claims written, not an hour later", func() bool { return claimed(full) })
	if got := st.txnCount() - before; got != 1 {
		t.Errorf("%d claims one after another took %d transactions, want 1", len(full), got)
	}
	for _, cn := range rest {
		if err := claimReturns(t, m, cn); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !claimed(rest) {
		t.Errorf("claims gathered when Run returned were not written")
	}
	if got := st.txnCount() - before; got != 2 {
		t.Errorf("%d claims took %d transactions, want 2 (a full one, then the rest as Run returned)", len(cns), got)
	}
}

// While claims keep coming, the writer waits on for them (a commit among
// joins slows the joins beside it), but not past Options.ClaimMaxWait.
func TestClaimsWrittenByMaxWait(t *testing.T) {
	st := newHeldStore()
	m := newTestManager(t, st, Options{ClaimGather: time.Hour, ClaimMaxWait: time.Millisecond})
	_, cn := issueProxy(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitClaimWriter(t, m)
	if err := claimReturns(t, m, cn); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the claim written by ClaimMaxWait, although claims could still come for an hour", func() bool {
		return stored(t, st.Memory, cn).State == StateClaimed
	})
}

func TestClaimWait(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const quiet, maxWait = 100 * time.Millisecond, 5 * time.Second
	for _, tc := range []struct {
		name             string
		start, last, now int
		want             time.Duration
	}{
		{"one claim: quiet from it", 0, 0, 0, 100 * time.Millisecond},
		{"the quiet passed", 0, 0, 100, 0},
		{"a claim since: quiet from the last", 0, 80, 100, 80 * time.Millisecond},
		{"claims keep coming: the max wait", 0, 4950, 4960, 40 * time.Millisecond},
		{"past the max wait", 0, 5100, 5100, -100 * time.Millisecond},
	} {
		if got := claimWait(at(tc.start), at(tc.last), at(tc.now), quiet, maxWait); got != tc.want {
			t.Errorf("%s: claimWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}
