package certificate

import (
	"context"
	"fmt"

	"github.com/osm-vm/osm-vm/internal/store"
)

// readKeys reads the records at keys under prefix, whose listing of
// versions had listed entries: each comes back with its value and
// version, or version 0 when it is gone. A few are read one by one; more
// are taken from one listing of prefix with its values. A replica starting
// on a Consul store reads every record it has not seen, and one read each
// cost it a round trip per proxy: 4.6 s at 4,600 records, growing with
// the fleet (TestReplicaKills).
func readKeys(ctx context.Context, st Store, prefix string, keys []string, listed int) ([]store.KV, error) {
	out := make([]store.KV, len(keys))
	if !readAsList(len(keys), listed) {
		for i, k := range keys {
			val, ver, err := st.Get(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", k, err)
			}
			out[i] = store.KV{Key: k, Value: val, Version: ver}
		}
		return out, nil
	}
	all, err := st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	byKey := make(map[string]int, len(all))
	for i, kv := range all {
		byKey[kv.Key] = i
	}
	for i, k := range keys {
		out[i] = store.KV{Key: k}
		if j, ok := byKey[k]; ok {
			out[i] = all[j]
		}
	}
	return out, nil
}

// readAsList says whether n reads of a prefix holding listed records cost
// more than one listing of them all: a read is a round trip to Consul
// (about a millisecond), a listing moves and decodes every record (about
// 5 µs each), so past 16 reads and a hundredth of the records the list is
// cheaper. On bbolt either is cheap.
func readAsList(n, listed int) bool {
	return n > 16 && n*100 >= listed
}
