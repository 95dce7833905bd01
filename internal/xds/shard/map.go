// Package shard provides Map, a map safe for concurrent use whose lookups
// take no lock: the maps that a publisher's render workers share (the
// render Memo's, the Interner's) are looked up hundreds of thousands of
// times a full generation, mostly finding what another worker kept. One
// lock written by every core made two workers barely faster than one;
// a lock per shard still cost each lookup a cache line passed between the
// cores (a lock is a write), about half the time of a lookup.
package shard

import (
	"hash/maphash"
	"iter"
	"sync"
	"sync/atomic"
)

// shardBits is the number of the hash's top bits that pick a shard:
// 32 shards, so that writers on different cores seldom take the same
// lock.
const (
	shardBits = 5
	shards    = 1 << shardBits
)

// minSlots is the size of a shard's first table.
const minSlots = 16

// Map is a map from K to V safe for concurrent use. The zero Map is not
// ready: make one with New.
//
// Each shard is an open-addressed table of pointers to entries that never
// change once stored. Get reads the table and the entries with atomic
// loads only, so lookups on many cores share the cache lines instead of
// passing them around; writers (Keep, Take, DeleteIf, Clear) take the
// shard's lock and publish an entry with one atomic store, growing the
// table by publishing a new one. A lookup that races with a write sees the
// map before or after it. Unlike sync.Map, a lookup or a Keep boxes
// nothing: Keep allocates the entry and nothing else (see also
// NewGenerational).
type Map[K comparable, V any] struct {
	seed   maphash.Seed
	tomb   *entry[K, V] // stands where an entry was deleted
	blocks bool         // see NewGenerational
	shards [shards]part[K, V]
}

type entry[K comparable, V any] struct {
	hash uint64
	key  K
	val  V
}

// table is a shard's slots (a power of two of them); a nil slot ends
// every probe that reaches it.
type table[K comparable, V any] struct {
	slots []atomic.Pointer[entry[K, V]]
}

type part[K comparable, V any] struct {
	tab  atomic.Pointer[table[K, V]]
	mu   sync.Mutex // held by writers
	live int        // entries held; under mu
	used int        // slots not nil (entries and tombstones); under mu
	// block holds the entries not yet used of the last block allocated
	// (see NewGenerational); under mu.
	block []entry[K, V]
	_     [8]byte // a shard per cache line: writing one does not slow its neighbour
}

// maxBlock is the most entries a block holds: a block is a quarter of
// its shard's entries, at least 4, so that a shard holding a few entries
// allocates little.
const maxBlock = 64

// New returns an empty Map.
func New[K comparable, V any]() *Map[K, V] {
	return &Map[K, V]{seed: maphash.MakeSeed(), tomb: &entry[K, V]{}}
}

// NewGenerational returns an empty Map for entries that go all at once
// (by Clear), as a generation's memo does: its entries are allocated in
// blocks, not one by one, and an entry deleted before then (by Take or
// DeleteIf) keeps its value from the collector until its block's others
// go too.
func NewGenerational[K comparable, V any]() *Map[K, V] {
	m := New[K, V]()
	m.blocks = true
	return m
}

// newEntry returns an entry for p to publish. Caller holds p's lock.
func (m *Map[K, V]) newEntry(p *part[K, V], h uint64, k K, v V) *entry[K, V] {
	if !m.blocks {
		return &entry[K, V]{hash: h, key: k, val: v}
	}
	if len(p.block) == 0 {
		// The entries of a block published before are never written
		// again: lookups may be reading them.
		p.block = make([]entry[K, V], min(maxBlock, max(4, p.live/4)))
	}
	e := &p.block[0]
	p.block = p.block[1:]
	e.hash, e.key, e.val = h, k, v
	return e
}

// part returns k's hash and shard: the hash's top bits pick the shard,
// its low bits the first slot probed.
func (m *Map[K, V]) part(k K) (uint64, *part[K, V]) {
	h := maphash.Comparable(m.seed, k)
	return h, &m.shards[h>>(64-shardBits)]
}

// Get returns what m holds for k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	h, p := m.part(k)
	if t := p.tab.Load(); t != nil {
		mask := uint64(len(t.slots) - 1)
		for i := h & mask; ; i = (i + 1) & mask {
			e := t.slots[i].Load()
			if e == nil {
				break
			}
			if e.hash == h && e != m.tomb && e.key == k {
				return e.val, true
			}
		}
	}
	var zero V
	return zero, false
}

// find returns the slot holding k in t, or the slot where k would be put
// (the first tombstone probed, else the nil slot ending the probe) and
// nil. Caller holds the shard's lock.
func (m *Map[K, V]) find(t *table[K, V], h uint64, k K) (*atomic.Pointer[entry[K, V]], *entry[K, V]) {
	mask := uint64(len(t.slots) - 1)
	var free *atomic.Pointer[entry[K, V]]
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		e := s.Load()
		switch {
		case e == nil:
			if free == nil {
				free = s
			}
			return free, nil
		case e == m.tomb:
			if free == nil {
				free = s
			}
		case e.hash == h && e.key == k:
			return s, e
		}
	}
}

// Keep stores v for k and returns it, or returns what m already holds
// for k (leaving it).
func (m *Map[K, V]) Keep(k K, v V) V {
	h, p := m.part(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tab.Load()
	if t == nil {
		t = &table[K, V]{slots: make([]atomic.Pointer[entry[K, V]], minSlots)}
		p.tab.Store(t)
	}
	s, e := m.find(t, h, k)
	if e != nil {
		return e.val
	}
	if s.Load() == nil { // a new slot, not a tombstone's
		if (p.used+1)*4 > len(t.slots)*3 {
			t = m.grow(p, t)
			s, _ = m.find(t, h, k)
		}
		p.used++
	}
	s.Store(m.newEntry(p, h, k, v))
	p.live++
	return v
}

// grow publishes a new table for p, sized so that its live entries fill
// less than three eighths of it, without t's tombstones, and returns it.
// Caller holds p's lock. Lookups still reading t find what it held.
func (m *Map[K, V]) grow(p *part[K, V], t *table[K, V]) *table[K, V] {
	n := minSlots
	for n*3 <= (p.live+1)*4*2 {
		n *= 2
	}
	nt := &table[K, V]{slots: make([]atomic.Pointer[entry[K, V]], n)}
	mask := uint64(n - 1)
	for i := range t.slots {
		e := t.slots[i].Load()
		if e == nil || e == m.tomb {
			continue
		}
		j := e.hash & mask
		for nt.slots[j].Load() != nil {
			j = (j + 1) & mask
		}
		nt.slots[j].Store(e)
	}
	p.used = p.live
	p.tab.Store(nt)
	return nt
}

// remove deletes k if f (nil: always) reports true of its value, and
// returns the value it deleted.
func (m *Map[K, V]) remove(k K, f func(V) bool) (V, bool) {
	h, p := m.part(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.tab.Load(); t != nil {
		if s, e := m.find(t, h, k); e != nil && (f == nil || f(e.val)) {
			s.Store(m.tomb)
			p.live--
			return e.val, true
		}
	}
	var zero V
	return zero, false
}

// Take returns what m holds for k and deletes it.
func (m *Map[K, V]) Take(k K) (V, bool) {
	return m.remove(k, nil)
}

// DeleteIf deletes k if f reports true of its value, and reports whether
// it did. f runs with k's shard locked and must not use m.
func (m *Map[K, V]) DeleteIf(k K, f func(V) bool) bool {
	_, ok := m.remove(k, f)
	return ok
}

// Clear deletes every key. Each shard starts again with a table of the
// size it grew to, for a map filled again after each clear (as a
// generation's memo is); lookups still reading the old tables find what
// they held.
func (m *Map[K, V]) Clear() {
	for i := range m.shards {
		p := &m.shards[i]
		p.mu.Lock()
		if t := p.tab.Load(); t != nil && p.used > 0 {
			p.tab.Store(&table[K, V]{slots: make([]atomic.Pointer[entry[K, V]], len(t.slots))})
		}
		p.live, p.used = 0, 0
		p.mu.Unlock()
	}
}

// Len returns the number of keys held.
func (m *Map[K, V]) Len() int {
	n := 0
	for i := range m.shards {
		p := &m.shards[i]
		p.mu.Lock()
		n += p.live
		p.mu.Unlock()
	}
	return n
}

// All yields every key and value held, a shard at a time: those each
// shard held when it was reached, as writes since may or may not show.
// The loop's body may use m.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for i := range m.shards {
			t := m.shards[i].tab.Load()
			if t == nil {
				continue
			}
			for j := range t.slots {
				if e := t.slots[j].Load(); e != nil && e != m.tomb && !yield(e.key, e.val) {
					return
				}
			}
		}
	}
}
