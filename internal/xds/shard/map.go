// Package shard provides Map, a map safe for concurrent use whose keys
// are spread over shards, each under its own lock: the maps that a
// publisher's render workers share (the render Memo's, the Interner's)
// are looked up hundreds of thousands of times a full generation, and
// one lock (or one map's cache lines) written by every core made two
// workers barely faster than one.
package shard

import (
	"hash/maphash"
	"iter"
	"sync"
)

// shards is the number of shards of a Map: enough that workers on every
// core of a large server seldom take the same lock.
const shards = 32

// Map is a map from K to V safe for concurrent use. The zero Map is not
// ready: make one with New. Unlike sync.Map, a lookup boxes nothing and
// allocates nothing, and Clear keeps the space the shards grew to, for a
// map filled again after each clear (as a generation's memo is).
type Map[K comparable, V any] struct {
	seed   maphash.Seed
	shards [shards]part[K, V]
}

type part[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
	_  [48]byte // a shard per cache line: locking one does not slow its neighbour
}

// New returns an empty Map.
func New[K comparable, V any]() *Map[K, V] {
	return &Map[K, V]{seed: maphash.MakeSeed()}
}

func (m *Map[K, V]) part(k K) *part[K, V] {
	return &m.shards[maphash.Comparable(m.seed, k)%shards]
}

// Get returns what m holds for k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	p := m.part(k)
	p.mu.Lock()
	v, ok := p.m[k]
	p.mu.Unlock()
	return v, ok
}

// Keep stores v for k and returns it, or returns what m already holds
// for k (leaving it).
func (m *Map[K, V]) Keep(k K, v V) V {
	p := m.part(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if have, ok := p.m[k]; ok {
		return have
	}
	if p.m == nil {
		p.m = map[K]V{}
	}
	p.m[k] = v
	return v
}

// Take returns what m holds for k and deletes it.
func (m *Map[K, V]) Take(k K) (V, bool) {
	p := m.part(k)
	p.mu.Lock()
	v, ok := p.m[k]
	if ok {
		delete(p.m, k)
	}
	p.mu.Unlock()
	return v, ok
}

// DeleteIf deletes k if f reports true of its value, and reports whether
// it did. f runs with k's shard locked and must not use m.
func (m *Map[K, V]) DeleteIf(k K, f func(V) bool) bool {
	p := m.part(k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.m[k]; ok && f(v) {
		delete(p.m, k)
		return true
	}
	return false
}

// Clear deletes every key, keeping the space the shards grew to.
func (m *Map[K, V]) Clear() {
	for i := range m.shards {
		p := &m.shards[i]
		p.mu.Lock()
		clear(p.m)
		p.mu.Unlock()
	}
}

// Len returns the number of keys held.
func (m *Map[K, V]) Len() int {
	n := 0
	for i := range m.shards {
		p := &m.shards[i]
		p.mu.Lock()
		n += len(p.m)
		p.mu.Unlock()
	}
	return n
}

// All yields every key and value held, a shard at a time, with that
// shard locked: the loop's body must not use m.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for i := range m.shards {
			p := &m.shards[i]
			p.mu.Lock()
			for k, v := range p.m {
				if !yield(k, v) {
					p.mu.Unlock()
					return
				}
			}
			p.mu.Unlock()
		}
	}
}
