package spec

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// boltStore is a minimal Store on a real bbolt file, as internal/store's
// embedded backend keeps it: the version is a per-key counter stored next
// to the value, and CompareAndSwap checks it inside one write transaction.
type boltStore struct{ db *bolt.DB }

var boltBucket = []byte("kv")

func openBolt(t *testing.T, path string) *boltStore {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("open bbolt %s: %v", path, err)
	}
	return &boltStore{db: db}
}

func (b *boltStore) Get(_ context.Context, key string) (value []byte, version uint64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(boltBucket)
		if bk == nil {
			return nil
		}
		if raw := bk.Get([]byte(key)); raw != nil {
			version = binary.BigEndian.Uint64(raw[:8])
			value = append([]byte(nil), raw[8:]...)
		}
		return nil
	})
	return value, version, err
}

func (b *boltStore) CompareAndSwap(_ context.Context, key string, version uint64, value []byte) (newVersion uint64, ok bool, err error) {
	err = b.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(boltBucket)
		if err != nil {
			return err
		}
		var cur uint64
		if raw := bk.Get([]byte(key)); raw != nil {
			cur = binary.BigEndian.Uint64(raw[:8])
		}
		if cur != version {
			return nil
		}
		newVersion, ok = cur+1, true
		return bk.Put([]byte(key), append(binary.BigEndian.AppendUint64(nil, newVersion), value...))
	})
	return newVersion, ok, err
}

func TestRestartKeepsPoliciesAndVIPs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "osm.db")
	st := openBolt(t, path)
	s := newTestSpec(t, st)
	if _, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	before := s.Snapshot()
	if err := st.db.Close(); err != nil {
		t.Fatal(err)
	}

	st = openBolt(t, path)
	defer st.db.Close()
	s = newTestSpec(t, st)
	after := s.Snapshot()
	if diff := cmp.Diff(before.Services(), after.Services(), cmp.Comparer(func(a, b ServiceInfo) bool {
		return cmp.Equal(a.Service, b.Service) && a.VIP == b.VIP && a.ServiceAccount == b.ServiceAccount && cmp.Equal(a.Ports, b.Ports)
	})); diff != "" {
		t.Errorf("services after restart (-before +after):\n%s", diff)
	}
	if got, want := len(after.Objects()), len(bookstoreDocs(t)); got != want {
		t.Errorf("documents after restart = %d, want %d", got, want)
	}
	if got, want := after.Version(), before.Version(); got != want {
		t.Errorf("version after restart = %d, want %d", got, want)
	}
	res, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(allActions(bookstoreDocs(t), Unchanged), actions(res)); diff != "" {
		t.Errorf("re-apply after restart (-want +got):\n%s", diff)
	}
	// A new service after the restart gets an address no one holds.
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("newcomer")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, info := range s.Snapshot().Services() {
		if seen[info.VIP.String()] {
			t.Errorf("VIP %s reused", info.VIP)
		}
		seen[info.VIP.String()] = true
	}
}
