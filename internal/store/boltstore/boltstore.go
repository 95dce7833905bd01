// Package boltstore is osm-server's default store: one bbolt file in the
// data directory, for a single server with nothing else to install. It
// meets the store.Store contract (the storetest suite runs against it).
//
// The package imports internal/store only, of osm-vm; only osm-server's
// main (and tests) import it, so nothing that merely names the contract
// links bbolt.
package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/osm-vm/osm-vm/internal/store"
)

// FileName is the bbolt file's name inside the data directory.
const FileName = "osm.db"

var bucket = []byte("kv")

// Bolt is the embedded store.Store: one bbolt file, written with fsync'd
// transactions, so a process killed at any moment reopens to the last
// committed state. Versions come from one store-wide counter, so they
// increase across keys as Consul's ModifyIndex does.
type Bolt struct {
	db *bolt.DB

	watchers store.Watchers
}

// Open opens (creating if needed) the store in dataDir, which is
// created 0700. Only one process may hold it: a second one fails after a
// second with an error saying so.
func Open(dataDir string) (*Bolt, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w (set --data-dir to a writable directory)", err)
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open %s: the file is locked by another process (is another osm-server running with this data dir?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Close closes the file.
func (b *Bolt) Close() error { return b.db.Close() }

// A stored value is an 8-byte big-endian version followed by the value.
func decode(raw []byte) ([]byte, uint64) {
	if len(raw) < 8 {
		return nil, 0
	}
	return bytes.Clone(raw[8:]), versionOf(raw)
}

// versionOf is a stored value's version, without copying the value.
func versionOf(raw []byte) uint64 {
	if len(raw) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw[:8])
}

func encode(version uint64, value []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), version), value...)
}

// Get implements store.Store.
func (b *Bolt) Get(ctx context.Context, key string) (value []byte, version uint64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	err = b.db.View(func(tx *bolt.Tx) error {
		value, version = decode(tx.Bucket(bucket).Get([]byte(key)))
		return nil
	})
	return value, version, err
}

// List implements store.Store.
func (b *Bolt) List(ctx context.Context, prefix string) ([]store.KV, error) {
	return b.list(ctx, prefix, true)
}

// ListVersions implements store.Store.
func (b *Bolt) ListVersions(ctx context.Context, prefix string) ([]store.KV, error) {
	return b.list(ctx, prefix, false)
}

func (b *Bolt) list(ctx context.Context, prefix string, values bool) ([]store.KV, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.KV
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			kv := store.KV{Key: string(k), Version: versionOf(v)}
			if values {
				kv.Value, _ = decode(v)
			}
			out = append(out, kv)
		}
		return nil
	})
	return out, err
}

// CompareAndSwap implements store.Store.
func (b *Bolt) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	var newVersion uint64
	ok, err := b.txn(ctx, []store.Op{store.Set(key, version, value)}, &newVersion)
	return newVersion, ok, err
}

// Limits of a bbolt transaction: a commit is one fsync whatever it holds,
// so a fleet's claims go in a few commits rather than one per 64 (Consul's
// limit, store.MaxTxnOps).
const (
	MaxTxnOps   = 1024
	MaxTxnBytes = 8 << 20
)

// TxnLimits implements store.Limited.
func (b *Bolt) TxnLimits() (ops, bytes int) { return MaxTxnOps, MaxTxnBytes }

// Txn implements store.Store.
func (b *Bolt) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	return b.txn(ctx, ops, nil)
}

func (b *Bolt) txn(ctx context.Context, ops []store.Op, newVersion *uint64) (bool, error) {
	if err := store.ValidateOps(ops); err != nil {
		return false, err
	}
	if err := store.CheckLimitsOf(ops, MaxTxnOps, MaxTxnBytes); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ok := false
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucket)
		for _, op := range ops {
			if !op.Matches(versionOf(bk.Get([]byte(op.Key)))) {
				return nil
			}
		}
		seq, err := bk.NextSequence()
		if err != nil {
			return err
		}
		for _, op := range ops {
			switch op.Kind {
			case store.OpSet:
				err = bk.Put([]byte(op.Key), encode(seq, op.Value))
			case store.OpDelete:
				err = bk.Delete([]byte(op.Key))
			}
			if err != nil {
				return err
			}
		}
		if newVersion != nil {
			*newVersion = seq
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: write %s: %w", b.db.Path(), err)
	}
	if ok {
		b.watchers.Notify(ctx, ops)
	}
	return ok, nil
}

// Watch implements store.Store. Only commits made through this Bolt are seen;
// the file has one writer.
func (b *Bolt) Watch(ctx context.Context, prefix string) <-chan struct{} {
	return b.watchers.Add(ctx, prefix)
}
