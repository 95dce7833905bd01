// Package store persists osm-server's state: the mesh CA, certificates,
// join tokens, proxy records and the mesh specification. It owns one small
// contract, [Store], with three implementations: an embedded bbolt file in
// the data directory in the boltstore subpackage (the default; nothing
// else to install), [Memory] for tests, and Consul KV in the consulstore
// subpackage, for several osm-servers sharing one state. Every value has a version (Consul's
// ModifyIndex, or a store-wide counter: increasing, not dense), writes can
// be conditional on it (check-and-set), several writes can commit as one
// transaction, and a prefix can be watched. The storetest subpackage is the
// contract's conformance suite; every implementation runs it.
//
// Transactions are bounded: a caller that keeps each within [MaxTxnOps] ops
// and [MaxTxnBytes] bytes of keys and values works on every backend. Every
// backend refuses more with [ErrTooLarge] before applying anything (bbolt
// and Memory through [CheckLimits]), so a single server on bbolt breaks
// exactly where replicas on Consul would, and tests on Memory find it.
//
// Consumers declare the subset they need as their own interface; the types
// here (KV, Op) are the vocabulary they share.
//
// The package is the contract only: it imports nothing of osm-vm and no
// storage engine, so packages that name the contract (spec, catalog,
// render, the dashboard) link no bbolt.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// KV is a key, its value and its version. A missing key has version 0.
type KV struct {
	Key     string
	Value   []byte
	Version uint64
}

// OpKind says what an Op does.
type OpKind int

// The kinds of Op.
const (
	// OpSet writes Value to Key.
	OpSet OpKind = iota + 1
	// OpDelete removes Key (deleting a missing key is not an error).
	OpDelete
	// OpCheck writes nothing; it only makes the transaction conditional.
	OpCheck
)

// Limits every backend meets, set by Consul's defaults (the tightest).
const (
	// MaxTxnOps is the most ops one transaction may hold. Consul 1.20
	// accepts 128 (txn endpoint), older releases 64.
	MaxTxnOps = 64
	// MaxTxnBytes bounds a transaction's values and keys together. Consul
	// limits a transaction's request body to 512 KiB (txn_max_req_len),
	// with values base64-encoded (4/3 of their size) and some 150 bytes of
	// JSON per op: 360 KiB of values and keys encode to 480 KiB, leaving
	// 32 KiB for the JSON of MaxTxnOps ops.
	MaxTxnBytes = 360 << 10
)

// ErrTooLarge is wrapped by the error of a transaction over a backend's
// limits (see [MaxTxnOps]); nothing of it was applied.
var ErrTooLarge = errors.New("transaction over the store's limits")

// Limited is a Store whose transactions may be larger than MaxTxnOps and
// MaxTxnBytes (bbolt's). Wrappers of a Store forward it.
type Limited interface {
	// TxnLimits returns the most ops and bytes of keys and values one
	// transaction of the store may hold.
	TxnLimits() (ops, bytes int)
}

// TxnLimits returns the limits of s's transactions: its own when it is
// Limited, else MaxTxnOps and MaxTxnBytes. Code that batches many writes
// (a fleet's claims) uses it to commit fewer, larger transactions where
// the backend takes them; code that must behave alike on every backend
// keeps to MaxTxnOps.
func TxnLimits(s any) (ops, bytes int) {
	if l, ok := s.(Limited); ok {
		return l.TxnLimits()
	}
	return MaxTxnOps, MaxTxnBytes
}

// CheckLimits returns an error wrapping ErrTooLarge when ops hold more than
// MaxTxnOps ops or MaxTxnBytes bytes of keys and values, naming the first
// key and the largest value.
func CheckLimits(ops []Op) error { return CheckLimitsOf(ops, MaxTxnOps, MaxTxnBytes) }

// CheckLimitsOf is CheckLimits against the limits maxOps and maxBytes (see
// TxnLimits).
func CheckLimitsOf(ops []Op, maxOps, maxBytes int) error {
	if len(ops) > maxOps {
		return fmt.Errorf("store: a transaction of %d ops (first %s) is over the limit of %d: %w; split it (store.TxnLimits)", len(ops), ops[0].Key, maxOps, ErrTooLarge)
	}
	n, largest := 0, 0
	for i, op := range ops {
		n += len(op.Key) + len(op.Value)
		if len(op.Value) > len(ops[largest].Value) {
			largest = i
		}
	}
	if n > maxBytes {
		return fmt.Errorf("store: a transaction of %d ops holds %d bytes of keys and values, over the limit of %d: %w; split it or store smaller values (the largest is %s, %d bytes)", len(ops), n, maxBytes, ErrTooLarge, ops[largest].Key, len(ops[largest].Value))
	}
	return nil
}

// AnyVersion in an Op's Version skips the version check.
const AnyVersion = ^uint64(0)

// Op is one step of a transaction.
type Op struct {
	Kind  OpKind
	Key   string
	Value []byte
	// Version is the version Key must be at for the transaction to commit:
	// 0 means "must not exist", AnyVersion means "don't care".
	Version uint64
}

// Set returns an Op writing value to key if key is at version.
func Set(key string, version uint64, value []byte) Op {
	return Op{Kind: OpSet, Key: key, Value: value, Version: version}
}

// Delete returns an Op deleting key if key is at version.
func Delete(key string, version uint64) Op {
	return Op{Kind: OpDelete, Key: key, Version: version}
}

// Check returns an Op that only requires key to be at version.
func Check(key string, version uint64) Op {
	return Op{Kind: OpCheck, Key: key, Version: version}
}

// Store is the full contract both implementations meet. Consumers should
// declare the methods they use as their own interface.
type Store interface {
	// Get returns key's value and version; a missing key has a nil value
	// and version 0.
	Get(ctx context.Context, key string) (value []byte, version uint64, err error)
	// List returns every key with the prefix, in key order.
	List(ctx context.Context, prefix string) ([]KV, error)
	// ListVersions is List without the values (nil): for callers that
	// only need to know what changed, without copying every value.
	ListVersions(ctx context.Context, prefix string) ([]KV, error)
	// CompareAndSwap writes value if key is at version (0: absent) and
	// returns the new version; ok is false, with a nil error, when the
	// version did not match.
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (newVersion uint64, ok bool, err error)
	// Txn commits every op or none. ok is false, with a nil error, when a
	// version condition failed.
	Txn(ctx context.Context, ops ...Op) (ok bool, err error)
	// Watch returns a channel that receives a value after every commit
	// that touches a key with the prefix, until ctx is done. Signals
	// coalesce: a slow reader sees one signal for many commits. When ctx
	// carries a Writer, a store may leave out the commits made with that
	// same Writer (see Writer).
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// ValidateOps checks the ops of a transaction before anything is applied:
// at least one op, no empty key, no key written twice, known kinds. Every
// implementation calls it first.
func ValidateOps(ops []Op) error {
	if len(ops) == 0 {
		return errors.New("store: empty transaction")
	}
	seen := make(map[string]bool, len(ops))
	for _, op := range ops {
		if op.Key == "" {
			return errors.New("store: empty key in transaction")
		}
		switch op.Kind {
		case OpSet, OpDelete:
			if seen[op.Key] {
				return errors.New("store: key " + op.Key + " written twice in one transaction")
			}
			seen[op.Key] = true
		case OpCheck:
		default:
			return errors.New("store: unknown op kind")
		}
	}
	return nil
}

// Matches reports whether a key at version cur satisfies op's condition.
func (op Op) Matches(cur uint64) bool { return op.Version == AnyVersion || cur == op.Version }

// Writer names one writer of a store within a process. A writer that
// reads back each of its own commits as it makes them (the certificate
// manager) has no use for being woken by them: a commit whose ctx carries
// a Writer (WithWriter) does not signal a Watch whose ctx carries the same
// one, on the stores whose commits all pass through this process (Memory,
// boltstore). It still signals every other Watch, and Consul, whose
// commits come from other processes too, signals every Watch for every
// commit: a Writer only saves wake-ups, it never hides another writer's
// commit.
type Writer struct{ _ byte }

type writerKey struct{}

// WithWriter returns ctx carrying w (see Writer).
func WithWriter(ctx context.Context, w *Writer) context.Context {
	return context.WithValue(ctx, writerKey{}, w)
}

func writerOf(ctx context.Context) *Writer {
	w, _ := ctx.Value(writerKey{}).(*Writer)
	return w
}

// Watchers fans out commit notifications by key prefix: a backend whose
// commits all pass through one process (Memory, boltstore) returns Add's
// channel from Watch and calls Notify after each commit. The zero value
// is ready; it is safe for concurrent use.
type Watchers struct {
	mu   sync.Mutex
	list []*watcher
}

type watcher struct {
	prefix string
	writer *Writer // the watch's own commits, not signalled (nil: none)
	ch     chan struct{}
}

// Add returns a channel that receives (coalesced) whenever a commit
// touches a key under prefix, until ctx ends; when ctx carries a Writer,
// commits made with the same Writer are not signalled.
func (w *Watchers) Add(ctx context.Context, prefix string) <-chan struct{} {
	wt := &watcher{prefix: prefix, writer: writerOf(ctx), ch: make(chan struct{}, 1)}
	w.mu.Lock()
	w.list = append(w.list, wt)
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.list = slices.DeleteFunc(w.list, func(x *watcher) bool { return x == wt })
	})
	return wt.ch
}

// Notify signals every watcher with a key of ops (checks aside) under its
// prefix, but those whose Writer made the commit (ctx is the commit's).
func (w *Watchers) Notify(ctx context.Context, ops []Op) {
	from := writerOf(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.list {
		if from != nil && wt.writer == from {
			continue
		}
		for _, op := range ops {
			if op.Kind != OpCheck && strings.HasPrefix(op.Key, wt.prefix) {
				select {
				case wt.ch <- struct{}{}:
				default:
				}
				break
			}
		}
	}
}
