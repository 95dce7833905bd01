package store

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Memory is an in-memory Store with the same semantics as the bbolt store, for tests
// and for packages that need a store without a file.
type Memory struct {
	mu               sync.Mutex
	kv               map[string]KV
	seq              uint64
	watchers         Watchers
	maxOps, maxBytes int // transaction limits (see TxnLimits)
}

// NewMemory returns an empty Memory store with the portable transaction
// limits, MaxTxnOps and MaxTxnBytes.
func NewMemory() *Memory { return NewMemoryWithLimits(MaxTxnOps, MaxTxnBytes) }

// NewMemoryWithLimits returns an empty Memory store whose transactions may
// hold up to ops ops and bytes bytes, as a backend with larger limits than
// Consul's (bbolt) does: for tests of code that batches by TxnLimits.
func NewMemoryWithLimits(ops, bytes int) *Memory {
	return &Memory{kv: map[string]KV{}, maxOps: ops, maxBytes: bytes}
}

// TxnLimits implements Limited.
func (m *Memory) TxnLimits() (ops, bytes int) { return m.maxOps, m.maxBytes }

// Get implements Store.
func (m *Memory) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kv := m.kv[key]
	return bytes.Clone(kv.Value), kv.Version, nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix string) ([]KV, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []KV
	for _, k := range slices.Sorted(maps.Keys(m.kv)) {
		if strings.HasPrefix(k, prefix) {
			kv := m.kv[k]
			kv.Value = bytes.Clone(kv.Value)
			out = append(out, kv)
		}
	}
	return out, nil
}

// ListVersions implements Store.
func (m *Memory) ListVersions(ctx context.Context, prefix string) ([]KV, error) {
	kvs, err := m.List(ctx, prefix)
	for i := range kvs {
		kvs[i].Value = nil
	}
	return kvs, err
}

// CompareAndSwap implements Store.
func (m *Memory) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	ok, err := m.Txn(ctx, Set(key, version, value))
	if !ok || err != nil {
		return 0, ok, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kv[key].Version, true, nil
}

// Txn implements Store.
func (m *Memory) Txn(ctx context.Context, ops ...Op) (bool, error) {
	if err := ValidateOps(ops); err != nil {
		return false, err
	}
	if err := CheckLimitsOf(ops, m.maxOps, m.maxBytes); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		if !op.Matches(m.kv[op.Key].Version) {
			return false, nil
		}
	}
	m.seq++
	for _, op := range ops {
		switch op.Kind {
		case OpSet:
			m.kv[op.Key] = KV{Key: op.Key, Value: bytes.Clone(op.Value), Version: m.seq}
		case OpDelete:
			delete(m.kv, op.Key)
		}
	}
	m.watchers.Notify(ctx, ops)
	return true, nil
}

// Watch implements Store.
func (m *Memory) Watch(ctx context.Context, prefix string) <-chan struct{} {
	return m.watchers.Add(ctx, prefix)
}
