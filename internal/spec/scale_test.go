package spec_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/spechttp"
	"github.com/osm-vm/osm-vm/internal/store"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// serviceBatches returns n Services (svc-<i> in namespace bench, as
// osm-bench's spec has them) as request bodies of at most
// spec.MaxRequestBytes and maxRequestNodes each (as an operator splits a large
// apply).
func serviceBatches(prefix string, n int) []string {
	var out []string
	var b strings.Builder
	// A /16 holds 65,534 VIPs.
	b.WriteString("---\napiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {outbound: {vipRange: 127.64.0.0/12}}\n")
	nodes := spec.NodeBound([]byte(b.String()))
	for i := range n {
		doc := fmt.Sprintf("---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s%06d, namespace: bench}\nspec:\n  ports: [{port: 8080, appProtocol: tcp}]\n", prefix, i)
		if b.Len()+len(doc) > spec.MaxRequestBytes || nodes+spec.NodeBound([]byte(doc)) > spec.MaxRequestNodes {
			out = append(out, b.String())
			b.Reset()
			nodes = 0
		}
		b.WriteString(doc)
		nodes += spec.NodeBound([]byte(doc))
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// postApply sends body to the handler's apply, as the CLI does.
func postApply(tb testing.TB, h http.Handler, body string) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/spec/apply", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/yaml")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("apply: %d %s", rec.Code, rec.Body.String())
	}
}

// applyCost is what one call cost: wall time, bytes allocated and the
// peak of the live heap (sampled every 200 µs).
type applyCost struct {
	wall      time.Duration
	allocated uint64
	peakHeap  uint64
}

func (c applyCost) String() string {
	return fmt.Sprintf("%v, %.1f MB allocated, peak heap %.1f MB", c.wall.Round(time.Millisecond), float64(c.allocated)/1e6, float64(c.peakHeap)/1e6)
}

func measure(f func()) applyCost {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	peak := heap()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				peak = max(peak, heap())
			}
		}
	})
	start := time.Now()
	f()
	wall := time.Since(start)
	close(done)
	wg.Wait()
	peak = max(peak, heap())
	runtime.ReadMemStats(&ms)
	return applyCost{wall: wall, allocated: ms.TotalAlloc - before, peakHeap: peak}
}

const smallApply = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: extra, namespace: bench}
spec:
  ports: [{port: 8080, appProtocol: tcp}]
`

// BenchmarkApplyAfterLargeSpec applies 104,000 Services through the REST
// handler over bbolt in batches, as the CLI splits them, then one small
// document, and reports what each cost:
//
//	go test -run '^$' -bench ApplyAfterLargeSpec -benchtime 1x ./internal/spec/
func BenchmarkApplyAfterLargeSpec(b *testing.B) {
	const services = 104_000
	st := spec.OpenBolt(b, b.TempDir())
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	for b.Loop() {
		sp, err := spec.New(b.Context(), log, store.Store(st))
		if err != nil {
			b.Fatal(err)
		}
		h := spechttp.NewHandler(log, sp, spechttp.Options{})
		batches := serviceBatches(fmt.Sprintf("svc-%d-", sp.Snapshot().Version()), services)
		big := measure(func() {
			for _, body := range batches {
				postApply(b, h, body)
			}
		})
		last := measure(func() { postApply(b, h, batches[len(batches)-1]) }) // unchanged
		small := measure(func() { postApply(b, h, smallApply) })
		b.Logf("%d Services in %d requests: %v", services, len(batches), big)
		b.Logf("the last batch again (unchanged): %v", last)
		b.Logf("one Service after them: %v", small)
		b.ReportMetric(small.wall.Seconds(), "small-s")
		b.ReportMetric(float64(small.allocated)/1e6, "small-MB")
		b.ReportMetric(float64(small.peakHeap)/1e6, "small-peak-MB")
		b.ReportMetric(big.wall.Seconds(), "big-s")
	}
}

// countingStore counts the bytes of values a Spec reads from and writes
// to the store.
type countingStore struct {
	spec.Store
	mu             sync.Mutex
	read, written  int
	lists, commits int
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := c.Store.List(ctx, prefix)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lists++
	for _, kv := range kvs {
		c.read += len(kv.Key) + len(kv.Value)
	}
	return kvs, err
}

func (c *countingStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	c.mu.Lock()
	c.commits++
	for _, op := range ops {
		c.written += len(op.Key) + len(op.Value)
	}
	c.mu.Unlock()
	return c.Store.Txn(ctx, ops...)
}

func (c *countingStore) reset() (read, written int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	read, written = c.read, c.written
	c.read, c.written = 0, 0
	return read, written
}

// A small change after a large specification reads and writes what it
// changes, not the whole specification again: 104,000 Services made every
// later apply read, decode and re-encode all of them (10 s, 1 GB).
func TestSmallChangeAfterLargeSpecIsSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("applies 5,000 Services")
	}
	cs := &countingStore{Store: store.NewMemory()}
	s, err := spec.New(t.Context(), discard(), cs)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := spechttp.NewHandler(discard(), s, spechttp.Options{})
	for _, body := range serviceBatches("svc-", 5_000) {
		postApply(t, h, body)
	}
	cs.reset()
	const budget = 4 << 10 // one Service, its VIP, the head: some 400 bytes
	for _, c := range []struct {
		name, body string
	}{
		{"create", smallApply},
		{"configure", strings.Replace(smallApply, "8080", "8081", 1)},
		{"unchanged", strings.Replace(smallApply, "8080", "8081", 1)},
	} {
		postApply(t, h, c.body)
		if read, written := cs.reset(); read > budget || written > budget {
			t.Errorf("%s one Service after 5,000: read %d bytes from the store and wrote %d, want at most %d each", c.name, read, written, budget)
		}
	}
	req := httptest.NewRequest(http.MethodDelete, "/api/v1/spec/services/bench/extra", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body.String())
	}
	if read, written := cs.reset(); read > budget || written > budget {
		t.Errorf("delete one Service after 5,000: read %d bytes from the store and wrote %d, want at most %d each", read, written, budget)
	}
	// What is stored is what a fresh reader sees, and what was published.
	fresh, err := spec.New(t.Context(), discard(), cs.Store)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(fresh.Snapshot().Services()), 5_000; got != want {
		t.Errorf("a fresh reader sees %d Services, want %d", got, want)
	}
	if got, want := fresh.Snapshot().Version(), s.Snapshot().Version(); got != want {
		t.Errorf("a fresh reader sees version %d, want %d", got, want)
	}
	published, stored, err := s.Sizes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := published, stored; got != want {
		t.Errorf("size of the published state %d bytes, want %d (what is stored)", got, want)
	}
}
