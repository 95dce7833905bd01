// Package specstore keeps the mesh specification in the server's store:
// the stored layout (one immutable entry per document and per VIP, by
// generation, made visible by a head key; version 1's single value read
// for the upgrade), the consistent read of it and the writes that change
// it atomically for readers. It knows items and their stored bytes, not
// documents: internal/spec encodes and decodes the documents and imports
// this package; this package must not import internal/spec.
package specstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// Store is what the specification needs from the server's store: a consistent listing of
// a prefix and multi-key transactions with version conditions, within
// store.MaxTxnOps and store.MaxTxnBytes each.
type Store interface {
	// List returns every key with the prefix, in key order, as of one
	// moment (one Consul read, one bbolt transaction).
	List(ctx context.Context, prefix string) ([]store.KV, error)
	// Txn commits every op or none; ok is false, with a nil error, when a
	// version condition failed.
	Txn(ctx context.Context, ops ...store.Op) (ok bool, err error)
	// CompareAndSwap writes value if key is at version (0: absent) and
	// returns the new version; ok is false when it was not.
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (newVersion uint64, ok bool, err error)
	// Watch signals after every commit under the prefix until ctx ends
	// (coalescing).
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// How the specification is stored (version 2).
//
// One entry per document and one per Service's VIP, so no document needs
// more than one store value and no change more than the transactions its
// own documents fill; a head key makes a change visible at once:
//
//	spec/v2/head                   {"gen": G, "staging": S}
//	spec/v2/e/<item>@<gen, 16 hex> {"doc": {...}} | {"vip": "..."} | {"deleted": true}
//
// where <item> is doc/<Kind>/<namespace or _>/<name> or
// vip/<namespace>/<name>. An entry is immutable once written. A reader
// lists spec/v2/ (one consistent read) and sees, of each item, the entry
// with the highest generation not above the head's G: entries of a change
// being written carry a higher generation and stay invisible until the
// head moves to it, so readers see the whole change or none of it.
//
// A writer reads the listing, computes the entries that change, and:
//   - when they fit in one transaction with the head (the usual apply),
//     writes them and the head at G' = max(G, S)+1 in that transaction;
//   - otherwise takes G' by setting the head's staging to G' (compare and
//     set), writes the entries in transactions that each check the head is
//     still at the version it set (so a writer that lost the head, or a
//     dead one's retried request, can never add an entry later), deleting
//     what a writer that died while staging left, and then moves the head
//     to G' (compare and set). Losing any step to another writer starts
//     the change again on the new state.
//
// After a commit the writer deletes the entries its change superseded
// (older generations of an item, and deleted items), which never changes
// what a reader sees.
const (
	specPrefix  = "spec/v2/"
	headKey     = specPrefix + "head"
	entryPrefix = specPrefix + "e/"
	// legacyKey held the whole specification as one value (version 1);
	// it is read when there is no head yet, and deleted by the first
	// write, which stores every item in version 2.
	legacyKey = "spec/v1/state"
)

type headRecord struct {
	Gen     uint64 `json:"gen"`
	Staging uint64 `json:"staging,omitempty"`
}

type entryRecord struct {
	Doc     json.RawMessage `json:"doc,omitempty"`
	VIP     string          `json:"vip,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
}

// DocItem and VIPItem name a document's and a Service's VIP's entries:
// the keys of a write's changes.
func DocItem(kind, namespace, name string) string {
	return "doc/" + kind + "/" + cmp.Or(namespace, "_") + "/" + name
}

func VIPItem(s mesh.MeshService) string { return "vip/" + s.Namespace + "/" + s.Name }

// Watched is the prefix of every key of the specification: Watch it to
// learn of another server's changes.
const Watched = "spec/"

func entryKey(item string, gen uint64) string {
	return fmt.Sprintf("%s%s@%016x", entryPrefix, item, gen)
}

// parseEntryKey splits a stored entry's key into item and generation.
func parseEntryKey(key string) (item string, gen uint64, ok bool) {
	rest, found := strings.CutPrefix(key, entryPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '@')
	if i < 0 {
		return "", 0, false
	}
	gen, err := strconv.ParseUint(rest[i+1:], 16, 64)
	return rest[:i], gen, err == nil
}

// Listing is one consistent read of the stored specification: the head
// and, of every item, the generations stored. A server keeps the listing
// of what it last read or wrote (Spec.known) and, while the head has not
// moved since, changes it without reading or decoding the documents
// again: a change costs what it changes (see Spec.read).
type Listing struct {
	head        headRecord
	headVersion uint64 // 0: no head yet
	items       map[string]storedItem
	// tombstones are the items whose visible entry says deleted, untidy
	// those with other generations: what a write deletes besides the
	// items it changes, found without going through every item.
	tombstones, untidy map[string]struct{}
	// values are the visible entries' values, by item: filled by a read
	// of the store for state, then dropped.
	values map[string][]byte
	// legacy is the version-1 value, when present.
	legacy        []byte
	legacyVersion uint64
	// stale is set when l no longer says what is stored (superseded
	// entries could not be deleted): it must be read again.
	stale bool
}

// storedItem is what is stored of one item.
type storedItem struct {
	visible uint64 // the generation readers see (the highest not above the head's); 0: none
	size    int    // the visible entry's length
	deleted bool   // the visible entry is a tombstone
	// others are the item's other generations: superseded ones not yet
	// collected and, above the head's, what a writer that died while
	// staging left.
	others []uint64
}

// gens returns every generation stored of the item.
func (it storedItem) gens() []uint64 {
	if it.visible == 0 {
		return it.others
	}
	return append(slices.Clone(it.others), it.visible)
}

// List reads the stored specification (one consistent read).
func List(ctx context.Context, st Store) (*Listing, error) {
	kvs, err := st.List(ctx, Watched)
	if err != nil {
		return nil, fmt.Errorf("read mesh specification from the store: %w", err)
	}
	l := &Listing{items: map[string]storedItem{}, tombstones: map[string]struct{}{}, untidy: map[string]struct{}{}, values: map[string][]byte{}}
	type entry struct {
		item  string
		gen   uint64
		value []byte
	}
	entries := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		switch {
		case kv.Key == headKey:
			if err := json.Unmarshal(kv.Value, &l.head); err != nil {
				return nil, fmt.Errorf("decode mesh specification head at store key %s (restore the store from a backup): %w", headKey, err)
			}
			l.headVersion = kv.Version
		case kv.Key == legacyKey:
			l.legacy, l.legacyVersion = kv.Value, kv.Version
		default:
			item, gen, ok := parseEntryKey(kv.Key)
			if !ok {
				continue // not ours
			}
			entries = append(entries, entry{item, gen, kv.Value})
		}
	}
	// The visible entry of each item: its highest generation not above
	// the head's.
	for _, e := range entries {
		it := l.items[e.item]
		switch {
		case e.gen > l.head.Gen:
			it.others = append(it.others, e.gen)
		case e.gen > it.visible:
			if it.visible != 0 {
				it.others = append(it.others, it.visible)
			}
			it.visible, it.size = e.gen, len(e.value)
			l.values[e.item] = e.value
		default:
			it.others = append(it.others, e.gen)
		}
		l.items[e.item] = it
	}
	for item, it := range l.items {
		if len(it.others) > 0 {
			l.untidy[item] = struct{}{}
		}
		if it.visible != 0 && bytes.Equal(l.values[item], deletedEntry) {
			it.deleted = true
			l.items[item] = it
			l.tombstones[item] = struct{}{}
			delete(l.values, item)
		}
	}
	return l, nil
}

// Committed says whether a version-2 change was ever committed; until
// then readers see the version-1 value (if any), and the first change
// writes every item.
func (l *Listing) Committed() bool { return l.head.Gen != 0 }

// Version is the snapshot version of what l shows.
func (l *Listing) Version() uint64 {
	if !l.Committed() {
		return l.legacyVersion
	}
	return l.head.Gen
}

// Read calls doc with every document l shows (where names it in an
// error: the store key it was read from) and returns the VIPs l shows and
// the stored size of it all; it drops the values it read.
func (l *Listing) Read(doc func(where string, raw json.RawMessage) error) (vips map[mesh.MeshService]netip.Addr, size int, err error) {
	if !l.Committed() {
		return readLegacy(l.legacy, doc)
	}
	vips = map[mesh.MeshService]netip.Addr{}
	for item, value := range l.values {
		key := entryKey(item, l.items[item].visible)
		var e entryRecord
		if err := json.Unmarshal(value, &e); err != nil {
			return nil, 0, fmt.Errorf("decode mesh specification entry %s (restore the store from a backup): %w", key, err)
		}
		if e.Deleted {
			continue
		}
		size += len(value)
		kind, rest, _ := strings.Cut(item, "/")
		switch kind {
		case "doc":
			if err := doc("stored "+key, e.Doc); err != nil {
				return nil, 0, err
			}
		case "vip":
			ns, name, _ := strings.Cut(rest, "/")
			ip, err := netip.ParseAddr(e.VIP)
			if err != nil {
				return nil, 0, fmt.Errorf("stored VIP of %s/%s at %s: %w", ns, name, key, err)
			}
			vips[mesh.MeshService{Namespace: ns, Name: name}] = ip
		}
	}
	l.values = nil
	return vips, size, nil
}

// Unmoved says whether the stored head is still where l saw or left it
// (the same version and record): then l is still what is stored, and a
// change reads one key, not every document.
func Unmoved(ctx context.Context, st Store, l *Listing) (bool, error) {
	kvs, err := st.List(ctx, headKey)
	if err != nil {
		return false, fmt.Errorf("read mesh specification from the store: %w", err)
	}
	v, ok := headVersion(kvs, l.head)
	return ok && v == l.headVersion, nil
}

// Reusable says whether l can be kept as what is stored (see Unmoved):
// nothing can be written under the head without moving it (no writer is
// staging a change, which writes its entries under the head's version),
// and l is not stale.
func (l *Listing) Reusable() bool {
	return l.Committed() && l.head.Staging == l.head.Gen && l.headVersion != 0 && !l.stale
}

// headVersion returns the version of the head in kvs (a listing of
// headKey) when it holds h.
func headVersion(kvs []store.KV, h headRecord) (uint64, bool) {
	for _, kv := range kvs {
		var got headRecord
		if kv.Key == headKey && json.Unmarshal(kv.Value, &got) == nil && got == h {
			return kv.Version, true
		}
	}
	return 0, false
}

// storedState is the version-1 form: everything in one value.
type storedState struct {
	Objects []json.RawMessage `json:"objects"`
	VIPs    map[string]string `json:"vips"`
}

func readLegacy(raw []byte, doc func(where string, raw json.RawMessage) error) (vips map[mesh.MeshService]netip.Addr, size int, err error) {
	vips = map[mesh.MeshService]netip.Addr{}
	if raw == nil {
		return vips, 0, nil
	}
	var ss storedState
	if err := json.Unmarshal(raw, &ss); err != nil {
		return nil, 0, fmt.Errorf("decode mesh specification at store key %s: %w", legacyKey, err)
	}
	for i, r := range ss.Objects {
		if err := doc(fmt.Sprintf("document %d at store key %s", i, legacyKey), r); err != nil {
			return nil, 0, err
		}
	}
	for k, v := range ss.VIPs {
		ns, name, _ := strings.Cut(k, "/")
		ip, err := netip.ParseAddr(v)
		if err != nil {
			return nil, 0, fmt.Errorf("stored VIP of %s: %w", k, err)
		}
		vips[mesh.MeshService{Namespace: ns, Name: name}] = ip
	}
	return vips, len(raw), nil
}

// EncodeDoc returns the stored value of a document, given its JSON.
func EncodeDoc(doc json.RawMessage) ([]byte, error) {
	return json.Marshal(entryRecord{Doc: doc})
}

// EncodeVIP returns the stored value of a Service's VIP.
func EncodeVIP(ip netip.Addr) []byte {
	b, _ := json.Marshal(entryRecord{VIP: ip.String()})
	return b
}

// Deleted returns the stored value of a change that deletes an item; the
// caller must not modify it.
func Deleted() []byte { return deletedEntry }

var deletedEntry = []byte(`{"deleted":true}`)

// SizeAfter is the stored size of what l shows once changes (stored
// values by item, deletedEntry for a deletion) are written over it,
// where size is what l shows now.
func (l *Listing) SizeAfter(size int, changes map[string][]byte) int {
	for item, v := range changes {
		if it := l.items[item]; it.visible != 0 && !it.deleted {
			size -= it.size
		}
		if !bytes.Equal(v, deletedEntry) {
			size += len(v)
		}
	}
	return size
}

// Write stores changes (stored values by item, Deleted for a deletion)
// over what l shows; ok is false when another writer changed the
// specification first (the caller starts again). It returns the new
// snapshot version. Once it has committed, l is what is stored (Reusable
// unless superseded entries could not be collected or the head's new
// version could not be read); on any other outcome l is stale.
func Write(ctx context.Context, st Store, log *slog.Logger, l *Listing, changes map[string][]byte) (ver uint64, ok bool, err error) {
	var ops []store.Op // entries at generation gen, keys filled below
	var changed []string
	for _, item := range slices.Sorted(maps.Keys(changes)) {
		v := changes[item]
		if it := l.items[item]; bytes.Equal(v, deletedEntry) && (it.visible == 0 || it.deleted) {
			continue // deleting what is not there
		}
		changed = append(changed, item)
		ops = append(ops, store.Op{Kind: store.OpSet, Value: v})
	}
	gen := max(l.head.Gen, l.head.Staging, l.legacyVersion) + 1
	for i := range ops {
		ops[i].Key, ops[i].Version = entryKey(changed[i], gen), 0
	}
	// What a writer that died while staging left: invisible entries.
	var leftovers []store.Op
	for item := range l.untidy {
		for _, g := range l.items[item].others {
			if g > l.head.Gen {
				leftovers = append(leftovers, store.Delete(entryKey(item, g), store.AnyVersion))
			}
		}
	}
	slices.SortFunc(leftovers, func(a, b store.Op) int { return strings.Compare(a.Key, b.Key) })
	headVal := func(h headRecord) []byte { b, _ := json.Marshal(h); return b }
	// The commit moves the head; the first one also drops the version-1
	// value, which readers ignore from then on.
	commit := func(headVersion uint64) []store.Op {
		ops := []store.Op{store.Set(headKey, headVersion, headVal(headRecord{Gen: gen, Staging: gen}))}
		if l.legacyVersion != 0 {
			ops = append(ops, store.Delete(legacyKey, l.legacyVersion))
		}
		return ops
	}

	// The usual change: one transaction.
	if one := slices.Concat(ops, leftovers, commit(l.headVersion)); store.CheckLimits(one) == nil {
		ok, err := st.Txn(ctx, one...)
		if err != nil || !ok {
			return 0, ok, writeErr(err)
		}
	} else {
		// Staged: take the generation, write the entries under the head's
		// version, then move the head.
		taken, ok, err := st.CompareAndSwap(ctx, headKey, l.headVersion, headVal(headRecord{Gen: l.head.Gen, Staging: gen}))
		if err != nil || !ok {
			return 0, ok, writeErr(err)
		}
		check := store.Check(headKey, taken)
		for _, batch := range batches(slices.Concat(leftovers, ops), check) {
			ok, err := st.Txn(ctx, batch...)
			if err != nil || !ok {
				return 0, ok, writeErr(err)
			}
		}
		if ok, err := st.Txn(ctx, commit(taken)...); err != nil || !ok {
			return 0, ok, writeErr(err)
		}
	}
	superseded := l.advance(gen, changed, changes)
	l.stale = !collect(ctx, st, log, gen, superseded)
	// The head's new version, so that the next change can start from
	// here (unless another server wrote meanwhile).
	if kvs, err := st.List(ctx, headKey); err == nil {
		l.headVersion, _ = headVersion(kvs, l.head)
	}
	return gen, true, nil
}

// advance updates l to what is stored once the entries of changed were
// committed at gen, and returns the keys of the entries that change
// superseded (older generations of the changed items, and the
// tombstones of items deleted before), which collect deletes.
func (l *Listing) advance(gen uint64, changed []string, changes map[string][]byte) (superseded []string) {
	isChanged := make(map[string]bool, len(changed))
	for _, item := range changed {
		isChanged[item] = true
	}
	// A dead writer's entries went with the commit; the superseded
	// generations of items this change did not change (a failed
	// collection's) go now.
	hadOthers := map[string]bool{}
	for item := range l.untidy {
		it := l.items[item]
		it.others = slices.DeleteFunc(slices.Clone(it.others), func(g uint64) bool { return g > l.head.Gen })
		switch {
		case it.visible == 0:
			delete(l.items, item)
			continue
		case !isChanged[item]:
			for _, g := range it.others {
				superseded = append(superseded, entryKey(item, g))
			}
			hadOthers[item] = len(it.others) > 0
			it.others = nil
		}
		l.items[item] = it
	}
	clear(l.untidy)
	// Tombstones of earlier changes, once nothing older remains, of items
	// this one did not change.
	for item := range l.tombstones {
		if it := l.items[item]; !hadOthers[item] && !isChanged[item] {
			superseded = append(superseded, entryKey(item, it.visible))
			delete(l.items, item)
			delete(l.tombstones, item)
		}
	}
	for _, item := range changed {
		it := l.items[item]
		for _, g := range it.gens() {
			superseded = append(superseded, entryKey(item, g))
		}
		v := changes[item]
		it = storedItem{visible: gen, size: len(v), deleted: bytes.Equal(v, deletedEntry)}
		l.items[item] = it
		if it.deleted {
			l.tombstones[item] = struct{}{}
		} else {
			delete(l.tombstones, item)
		}
	}
	l.head, l.headVersion, l.legacy, l.legacyVersion = headRecord{Gen: gen, Staging: gen}, 0, nil, 0
	slices.Sort(superseded)
	return superseded
}

func writeErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("write mesh specification to the store: %w", err)
}

// batches splits ops into transactions within the store's limits, each
// starting with check.
func batches(ops []store.Op, check store.Op) [][]store.Op {
	var out [][]store.Op
	cur := []store.Op{check}
	for _, op := range ops {
		if next := append(slices.Clone(cur), op); len(cur) > 1 && store.CheckLimits(next) != nil {
			out = append(out, cur)
			cur = []store.Op{check}
		}
		cur = append(cur, op)
	}
	if len(cur) > 1 {
		out = append(out, cur)
	}
	return out
}

// collect deletes the entries a change committed at gen superseded. It
// never changes what a reader sees; a failure leaves garbage for the next
// change to collect (l no longer says what is stored, so the caller
// reads the store again).
func collect(ctx context.Context, st Store, log *slog.Logger, gen uint64, superseded []string) (ok bool) {
	for chunk := range slices.Chunk(superseded, store.MaxTxnOps) {
		ops := make([]store.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = store.Delete(k, store.AnyVersion)
		}
		if _, err := st.Txn(ctx, ops...); err != nil {
			log.Warn("deleting superseded mesh specification entries failed; the next change deletes them", "err", err, "generation", gen)
			return false
		}
	}
	return true
}
