package shard

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
)

func TestMap(t *testing.T) {
	m := New[string, int]()
	if _, ok := m.Get("a"); ok {
		t.Fatal("an empty Map holds a")
	}
	if got := m.Keep("a", 1); got != 1 {
		t.Fatalf("Keep(a, 1) = %d, want 1", got)
	}
	if got := m.Keep("a", 2); got != 1 {
		t.Fatalf("Keep(a, 2) over 1 = %d, want the value kept first", got)
	}
	for i := range 100 {
		m.Keep(fmt.Sprint(i), i)
	}
	if n := m.Len(); n != 101 {
		t.Fatalf("Len = %d, want 101", n)
	}
	if v, ok := m.Take("a"); !ok || v != 1 {
		t.Fatalf("Take(a) = %d, %v; want 1, true", v, ok)
	}
	if _, ok := m.Get("a"); ok {
		t.Fatal("a is held after Take")
	}
	if m.DeleteIf("7", func(v int) bool { return v != 7 }) {
		t.Fatal("DeleteIf deleted 7 although f said no")
	}
	if !m.DeleteIf("7", func(v int) bool { return v == 7 }) {
		t.Fatal("DeleteIf did not delete 7")
	}
	if _, ok := m.Get("7"); ok {
		t.Fatal("7 is held after DeleteIf")
	}
	m.Keep("7", 7)
	want := map[string]int{}
	for i := range 100 {
		want[fmt.Sprint(i)] = i
	}
	if got := maps.Collect(m.All()); !maps.Equal(got, want) {
		t.Fatalf("All yields %d keys, want the 100 kept", len(got))
	}
	m.Clear()
	if n := m.Len(); n != 0 {
		t.Fatalf("Len after Clear = %d", n)
	}
	if got := m.Keep("a", 3); got != 3 {
		t.Fatalf("Keep after Clear = %d, want 3", got)
	}
}

// TestMapKeepConcurrent: goroutines keeping values for the same keys at
// once all get the one value kept first (run with -race).
func TestMapKeepConcurrent(t *testing.T) {
	m := New[int, *int]()
	const workers, keys = 8, 1000
	got := make([][]*int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				v, ok := m.Get(k)
				if !ok {
					v = m.Keep(k, new(int))
				}
				got[w] = append(got[w], v)
			}
		})
	}
	wg.Wait()
	for k := range keys {
		for w := 1; w < workers; w++ {
			if got[w][k] != got[0][k] {
				t.Fatalf("key %d: workers 0 and %d got different values", k, w)
			}
		}
	}
}

// TestMapChurn: keys kept, taken and kept again, many times over (so that
// shards fill with tombstones, grow and shrink), agree with a plain map.
func TestMapChurn(t *testing.T) {
	t.Run("New", func(t *testing.T) { testChurn(t, New[int, int]()) })
	t.Run("NewGenerational", func(t *testing.T) { testChurn(t, NewGenerational[int, int]()) })
}

func testChurn(t *testing.T, m *Map[int, int]) {
	want := map[int]int{}
	for round := range 50 {
		for k := range 2000 {
			switch (k + round) % 3 {
			case 0:
				if got := m.Keep(k, k+round); got != keptOr(want, k, k+round) {
					t.Fatalf("round %d: Keep(%d) = %d, want %d", round, k, got, want[k])
				}
			case 1:
				v, ok := m.Take(k)
				w, wok := want[k]
				if ok != wok || v != w {
					t.Fatalf("round %d: Take(%d) = %d, %v; want %d, %v", round, k, v, ok, w, wok)
				}
				delete(want, k)
			}
		}
		for k := range 2000 {
			v, ok := m.Get(k)
			if w, wok := want[k]; ok != wok || v != w {
				t.Fatalf("round %d: Get(%d) = %d, %v; want %d, %v", round, k, v, ok, w, wok)
			}
		}
		if m.Len() != len(want) {
			t.Fatalf("round %d: Len = %d, want %d", round, m.Len(), len(want))
		}
	}
	if got := maps.Collect(m.All()); !maps.Equal(got, want) {
		t.Fatalf("All yields %d keys, want %d", len(got), len(want))
	}
}

func keptOr(want map[int]int, k, v int) int {
	if have, ok := want[k]; ok {
		return have
	}
	want[k] = v
	return v
}

// TestMapReadersDuringWrites: lookups racing with Keep, Take, growth and
// Clear (run with -race) only ever find a key with the value kept for it.
func TestMapReadersDuringWrites(t *testing.T) {
	t.Run("New", func(t *testing.T) { testReadersDuringWrites(t, New[string, string]()) })
	t.Run("NewGenerational", func(t *testing.T) { testReadersDuringWrites(t, NewGenerational[string, string]()) })
}

func testReadersDuringWrites(t *testing.T, m *Map[string, string]) {
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for !stop.Load() {
				for _, k := range keys {
					if v, ok := m.Get(k); ok && v != "value of "+k {
						t.Errorf("Get(%s) = %q", k, v)
						return
					}
				}
			}
		})
	}
	for round := range 20 {
		for _, k := range keys {
			m.Keep(k, "value of "+k)
		}
		for i, k := range keys {
			if i%2 == round%2 {
				m.Take(k)
			}
		}
		if round%5 == 4 {
			m.Clear()
		}
	}
	stop.Store(true)
	wg.Wait()
}
