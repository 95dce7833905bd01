package shard

import (
	"fmt"
	"maps"
	"sync"
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
