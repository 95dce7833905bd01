package spec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// manyServices is n Services named prefix0..prefixN-1, with an annotation
// each; over store.MaxTxnOps/2 of them (a document and a VIP each) need
// more than one transaction.
func manyServices(t *testing.T, prefix string, n int) []Document {
	t.Helper()
	pad := strings.Repeat("x", 200)
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s%d, annotations: {pad: %s}}\nspec: {ports: [{port: 80}]}\n", prefix, i, pad)
	}
	return mustParse(t, b.String())
}

// watchingStore checks, after every transaction that commits, that a fresh
// reader sees one of the allowed document counts and every Service with a
// VIP of its own.
type watchingStore struct {
	*store.Memory
	t *testing.T

	mu      sync.Mutex
	allowed map[int]bool
	txns    int
	failAt  int // the failAt-th transaction (1-based) fails: a writer dying
}

func (w *watchingStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	w.mu.Lock()
	w.txns++
	fail := w.failAt != 0 && w.txns == w.failAt
	w.mu.Unlock()
	if fail {
		return false, errors.New("writer killed")
	}
	ok, err := w.Memory.Txn(ctx, ops...)
	if ok && err == nil {
		w.check(ctx)
	}
	return ok, err
}

func (w *watchingStore) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	nv, ok, err := w.Memory.CompareAndSwap(ctx, key, version, value)
	if ok && err == nil {
		w.check(ctx)
	}
	return nv, ok, err
}

func (w *watchingStore) check(ctx context.Context) {
	r, err := New(ctx, discard(), w.Memory)
	if err != nil {
		w.t.Errorf("a reader during the write: %v", err)
		return
	}
	snap := r.Snapshot()
	w.mu.Lock()
	allowed := w.allowed
	w.mu.Unlock()
	if n := len(snap.Objects()); !allowed[n] {
		w.t.Errorf("a reader during the write sees %d documents, want one of %v (old or new, never half)", n, allowed)
	}
	vips := map[string]mesh.MeshService{}
	for _, info := range snap.Services() {
		if other, dup := vips[info.VIP.String()]; dup {
			t := w.t
			t.Errorf("VIP %s held by %s and %s", info.VIP, other, info.Service)
		}
		vips[info.VIP.String()] = info.Service
	}
}

func (w *watchingStore) allow(counts ...int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.allowed = map[int]bool{}
	for _, c := range counts {
		w.allowed[c] = true
	}
}

// TestLargeApplyAtomicForReaders: a batch larger than one store
// transaction (here 100 Services, 200 entries, in a store that refuses a
// transaction over store.MaxTxnOps or store.MaxTxnBytes, as Consul does) is stored in several transactions, and a reader reading
// after any of them sees the old specification or the new one, never
// part of it. Deleting it is the same.
func TestLargeApplyAtomicForReaders(t *testing.T) {
	st := &watchingStore{Memory: store.NewMemory(), t: t}
	st.allow(0, 3)
	s := newTestSpec(t, st)
	if _, err := s.Apply(t.Context(), manyServices(t, "base", 3), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	st.allow(3, 103)
	before := st.txns
	if _, err := s.Apply(t.Context(), manyServices(t, "big", 100), ApplyOptions{}); err != nil {
		t.Fatalf("Apply of 100 Services: %v", err)
	}
	if st.txns-before < 3 {
		t.Errorf("the large apply took %d transactions; want several (it cannot fit in one)", st.txns-before)
	}
	if got := len(s.Snapshot().Objects()); got != 103 {
		t.Errorf("%d documents after the apply, want 103", got)
	}
	var keys []Key
	for i := range 100 {
		keys = append(keys, Key{Kind: KindService, Namespace: "default", Name: fmt.Sprintf("big%d", i)})
	}
	if _, err := s.Delete(t.Context(), keys, false); err != nil {
		t.Fatalf("Delete of 100 Services: %v", err)
	}
	if got := len(s.Snapshot().Objects()); got != 3 {
		t.Errorf("%d documents after the delete, want 3", got)
	}
	// Superseded entries are collected: what is left is one entry per
	// live item (3 documents, 3 VIPs) and the head.
	kvs, err := st.Memory.List(t.Context(), "spec/v2/")
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) > 1+6+100*2 {
		t.Errorf("%d keys stored after the delete; superseded entries are not collected", len(kvs))
	}
	st.allow(3, 4)
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("fresh")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	after, _ := st.Memory.List(t.Context(), "spec/v2/")
	if len(after) != 1+8 {
		t.Errorf("%d keys stored after the next change (was %d), want 9 (the head, 4 documents, 4 VIPs): the deleted items' entries are collected", len(after), len(kvs))
	}
}

// TestWriterDyingMidwayLeavesNothingVisible: a writer that stops after
// some of its transactions (its process killed) leaves the specification
// as it was for every reader; the next writer cleans up what it left and
// commits its own change whole.
func TestWriterDyingMidwayLeavesNothingVisible(t *testing.T) {
	for _, failAt := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("dies at transaction %d", failAt), func(t *testing.T) {
			st := &watchingStore{Memory: store.NewMemory(), t: t}
			st.allow(0, 3)
			s := newTestSpec(t, st)
			if _, err := s.Apply(t.Context(), manyServices(t, "base", 3), ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			st.allow(3)
			st.mu.Lock()
			st.failAt = st.txns + failAt
			st.mu.Unlock()
			if _, err := s.Apply(t.Context(), manyServices(t, "big", 100), ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "writer killed") {
				t.Fatalf("Apply with the store failing: %v, want the failure", err)
			}
			// Another replica's writer.
			st.allow(3, 73)
			other := newTestSpec(t, st)
			if _, err := other.Apply(t.Context(), manyServices(t, "other", 70), ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			r := newTestSpec(t, st.Memory)
			if got := len(r.Snapshot().Objects()); got != 73 {
				t.Errorf("%d documents, want 73 (3 + the second writer's 70, none of the dead writer's)", got)
			}
			kvs, _ := st.Memory.List(t.Context(), "spec/v2/e/doc/Service/default/big")
			if len(kvs) != 0 {
				t.Errorf("%d entries of the dead writer left after the next change, want 0", len(kvs))
			}
		})
	}
}

// TestConcurrentWritersOnOneStore: replicas applying at once on one store
// never lose a change and never give two Services one VIP.
func TestConcurrentWritersOnOneStore(t *testing.T) {
	st := store.NewMemory()
	const writers, each = 3, 6
	var wg sync.WaitGroup
	for w := range writers {
		s := newTestSpec(t, st)
		wg.Go(func() {
			for i := range each {
				docs := manyServices(t, fmt.Sprintf("w%d-", w), i+1)[i:]
				if i == each-1 {
					docs = manyServices(t, fmt.Sprintf("w%dbig", w), 40)
				}
				if _, err := s.Apply(t.Context(), docs, ApplyOptions{}); err != nil {
					t.Errorf("writer %d apply %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	r := newTestSpec(t, st)
	if got, want := len(r.Snapshot().Objects()), writers*(each-1+40); got != want {
		t.Errorf("%d documents, want %d", got, want)
	}
	seen := map[string]bool{}
	for _, info := range r.Snapshot().Services() {
		if seen[info.VIP.String()] {
			t.Errorf("VIP %s held twice", info.VIP)
		}
		seen[info.VIP.String()] = true
	}
}

// TestVersion1SpecificationMigrates: a store written by an older
// osm-server (the whole specification in one value) is read as it is, and
// the first change stores it as one entry per document, dropping the old
// value, without a version going backwards.
func TestVersion1SpecificationMigrates(t *testing.T) {
	st := store.NewMemory()
	old := `{"objects":[{"apiVersion":"osm-vm.io/v1alpha1","kind":"Service","metadata":{"name":"legacy","namespace":"default"},"spec":{"ports":[{"port":80}]}}],"vips":{"default/legacy":"127.77.0.7"}}`
	for range 5 { // a version above 1
		if ok, err := st.Txn(t.Context(), store.Set("spec/v1/state", store.AnyVersion, []byte(old))); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	s := newTestSpec(t, st)
	v1 := s.Snapshot().Version()
	if info, ok := s.Snapshot().Service(mesh.MeshService{Namespace: "default", Name: "legacy"}); !ok || info.VIP.String() != "127.77.0.7" {
		t.Fatalf("legacy Service: %+v, %v; want it with VIP 127.77.0.7", info, ok)
	}
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("new")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := s.Snapshot().Version(); v <= v1 {
		t.Errorf("version after the migrating apply %d, want above %d", v, v1)
	}
	if _, ver, _ := st.Get(t.Context(), "spec/v1/state"); ver != 0 {
		t.Errorf("the version-1 value is still stored after the first change")
	}
	r := newTestSpec(t, st)
	if info, ok := r.Snapshot().Service(mesh.MeshService{Namespace: "default", Name: "legacy"}); !ok || info.VIP.String() != "127.77.0.7" {
		t.Errorf("legacy Service after migration: %+v, %v; want it with its VIP", info, ok)
	}
	if got := len(r.Snapshot().Objects()); got != 2 {
		t.Errorf("%d documents after migration, want 2", got)
	}
}
