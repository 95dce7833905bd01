package spec

import (
	"context"
	"slices"
	"sync"
)

// Store is what spec needs from the server's store: read one key with its
// version, and write it only if the version is unchanged. The whole
// specification (documents and VIP allocations) lives under one key, so a
// batch, its VIPs and their release commit in one compare-and-swap.
type Store interface {
	// Get returns the value of key and its version; a missing key has a
	// nil value and version 0.
	Get(ctx context.Context, key string) (value []byte, version uint64, err error)
	// CompareAndSwap writes value if key is still at version (0: absent)
	// and returns the new version; ok is false, with a nil error, when
	// someone else wrote first.
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (newVersion uint64, ok bool, err error)
}

// MemoryStore is an in-memory Store for tests and single-process use.
type MemoryStore struct {
	mu      sync.Mutex
	values  map[string][]byte
	version map[string]uint64
	next    uint64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{values: map[string][]byte{}, version: map[string]uint64{}}
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.values[key]), m.version[key], nil
}

// CompareAndSwap implements Store.
func (m *MemoryStore) CompareAndSwap(_ context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.version[key] != version {
		return 0, false, nil
	}
	m.next++
	m.values[key] = slices.Clone(value)
	m.version[key] = m.next
	return m.next, true, nil
}
