package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"go.yaml.in/yaml/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/specstore"
)

// casAttempts bounds retries when another writer wins the race.
const casAttempts = 16

var (
	// ErrConflict is wrapped by errors that a retry with other input, not
	// the same request, can fix (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrNotFound is wrapped when a named document does not exist (404).
	ErrNotFound = errors.New("not found")
)

// Action says what applying or deleting did to one document.
type Action string

// Actions, as kubectl prints them.
const (
	Created    Action = "created"
	Configured Action = "configured"
	Unchanged  Action = "unchanged"
	Deleted    Action = "deleted"
)

// Result is the outcome for one document.
type Result struct {
	Key      Key      `json:"key"`
	Action   Action   `json:"action"`
	Warnings []string `json:"warnings,omitempty"`
	// Diff is a unified diff of the canonical YAML, filled by Diff.
	Diff string `json:"diff,omitempty"`
}

// BatchResult is the outcome of one apply, diff or delete.
type BatchResult struct {
	Results []Result `json:"results"`
	// Warnings concern the batch as a whole, such as VIPs that moved.
	Warnings []string `json:"warnings,omitempty"`
	DryRun   bool     `json:"dryRun,omitempty"`
	// Version is the snapshot version after the batch.
	Version uint64 `json:"version"`
}

// Changed reports whether any document was created, configured or deleted.
func (b BatchResult) Changed() bool {
	return slices.ContainsFunc(b.Results, func(r Result) bool { return r.Action != Unchanged })
}

// Spec stores the mesh specification and publishes snapshots of it.
type Spec struct {
	log   *slog.Logger
	store Store
	// maxStored bounds the stored specification (maxStoredBytes; tests
	// lower it).
	maxStored int

	writeMu sync.Mutex // serializes this process's writers and reads; the CAS guards against others
	snap    atomic.Pointer[Snapshot]
	// known is the stored specification as this server last read or
	// wrote it (guarded by writeMu; nil: read it).
	known *known

	subsMu sync.Mutex
	subs   map[chan struct{}]struct{}

	// stored re-validates what is read from the store.
	stored storedCheck
}

// New loads the specification from store and publishes its first snapshot.
func New(ctx context.Context, log *slog.Logger, store Store) (*Spec, error) {
	s := &Spec{log: log, store: store, maxStored: maxStoredBytes, subs: map[chan struct{}]struct{}{}}
	l, st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	s.checkStored(st)
	s.snap.Store(newSnapshot(st, l.Version()))
	return s, nil
}

// Snapshot returns the current immutable snapshot.
func (s *Spec) Snapshot() *Snapshot { return s.snap.Load() }

// Subscribe returns a channel that receives a value whenever a new snapshot
// is published. Notifications coalesce: a slow reader sees one signal for
// many changes and reads the latest Snapshot. Call cancel when done.
func (s *Spec) Subscribe() (notify <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	s.subsMu.Lock()
	s.subs[ch] = struct{}{}
	s.subsMu.Unlock()
	return ch, func() {
		s.subsMu.Lock()
		delete(s.subs, ch)
		s.subsMu.Unlock()
	}
}

// Refresh reloads the specification from the store and publishes a new
// snapshot if another server changed it.
func (s *Spec) Refresh(ctx context.Context) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	before := s.known
	l, st, err := s.read(ctx)
	if err != nil {
		return err
	}
	ver := l.Version()
	if cur := s.snap.Load(); s.known == before || (cur != nil && cur.version >= ver) {
		// What is published is as new: this server's own apply, or the
		// start's load.
		return nil
	}
	s.checkStored(st)
	s.publish(st, ver)
	return nil
}

// Run follows the store until ctx ends: whenever the specification's
// head moves (another replica sharing the store applied a change), it
// reloads and publishes the new snapshot. A failed reload (the store
// unreachable) is logged and retried with backoff, the last snapshot
// staying in force meanwhile. It returns nil when ctx is cancelled.
func (s *Spec) Run(ctx context.Context) error {
	changed := s.store.Watch(ctx, specstore.Watched)
	const minBackoff, maxBackoff = 250 * time.Millisecond, 30 * time.Second
	var backoff time.Duration
	var retry <-chan time.Time
	// The first pass catches up with what was committed before the watch.
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
			case <-retry:
			}
		}
		retry = nil
		if err := s.Refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			s.log.Warn("reload the mesh specification from the store; serving the last one read, retrying", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			continue
		}
		backoff = 0
	}
}

func (s *Spec) publish(st *state, ver uint64) { s.publishChange(nil, st, ver, nil) }

// publishChange publishes st, which differs from prev in the documents
// touched only (when touched is not nil): built from prev's snapshot when
// that is the one published.
func (s *Spec) publishChange(prev, st *state, ver uint64, touched []Key) {
	for {
		old := s.snap.Load()
		if old != nil && old.version >= ver {
			return
		}
		var sn *Snapshot
		if old != nil && prev != nil && old.st == prev && touched != nil {
			sn = nextSnapshot(old, st, ver, touched)
		} else {
			sn = newSnapshot(st, ver)
		}
		if s.snap.CompareAndSwap(old, sn) {
			break
		}
	}
	s.subsMu.Lock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.subsMu.Unlock()
}

// state is the decoded specification.
type state struct {
	objects map[Key]Object
	// names indexes objects' names by kind and namespace, built at the
	// first namesOfKind; whoever changes objects resets it (reindex).
	names *kindIndex
	vips  map[mesh.MeshService]netip.Addr
	// size is the length of the stored value it was read from.
	size int
}

func (st *state) clone() *state {
	return &state{objects: maps.Clone(st.objects), vips: maps.Clone(st.vips), size: st.size, names: &kindIndex{}}
}

func (st *state) meshConfig() *MeshConfig {
	if c, ok := st.objects[Key{Kind: KindMeshConfig, Name: MeshConfigName}].(*MeshConfig); ok {
		return c
	}
	return DefaultMeshConfig()
}

// load reads and decodes everything stored, whatever this server knows.
func (s *Spec) load(ctx context.Context) (*state, uint64, error) {
	l, err := specstore.List(ctx, s.store)
	if err != nil {
		return nil, 0, err
	}
	st, err := stateOf(l)
	return st, l.Version(), err
}

// known is what a server last read or wrote of the stored specification:
// the listing and the state it shows.
type known struct {
	l  *specstore.Listing
	st *state
}

// read returns what is stored and the state it shows, which the caller
// must not modify; the caller holds writeMu. While the head is where this
// server last saw or left it (the same version and record), that is what
// it knew: a change then reads one key, not every document (for 100,000
// Services that was seconds and a gigabyte per apply). A head that moved
// means another server wrote, and everything is read again.
func (s *Spec) read(ctx context.Context) (*specstore.Listing, *state, error) {
	if k := s.known; k != nil {
		unmoved, err := specstore.Unmoved(ctx, s.store, k.l)
		if err != nil {
			return nil, nil, err
		}
		if unmoved {
			return k.l, k.st, nil
		}
	}
	s.known = nil
	l, err := specstore.List(ctx, s.store)
	if err != nil {
		return nil, nil, err
	}
	st, err := stateOf(l)
	if err != nil {
		return nil, nil, err
	}
	s.remember(l, st)
	return l, st, nil
}

// remember keeps l and st as what is stored, when l can be kept
// (specstore.Listing.Reusable).
func (s *Spec) remember(l *specstore.Listing, st *state) {
	if l.Reusable() {
		s.known = &known{l: l, st: st}
	}
}

func sortedObjectKeys(m map[Key]Object) []Key {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, Key.compare)
	return keys
}

// ApplyOptions modify Apply.
type ApplyOptions struct {
	// DryRun validates and reports what would change without writing.
	DryRun bool
	// Diff fills each Result's Diff; it implies DryRun.
	Diff bool
	// HasEndpoints, when set, adds warnings where a TrafficSplit or
	// TrafficTarget leads to a service nobody serves.
	HasEndpoints HasEndpoints
}

// Apply creates or updates docs atomically: either every document is
// stored, with its Services' VIPs, or none is. Invalid documents return a
// *ValidationError listing every problem.
func (s *Spec) Apply(ctx context.Context, docs []Document, opts ApplyOptions) (BatchResult, error) {
	if opts.Diff {
		opts.DryRun = true
	}
	return s.mutate(ctx, opts.DryRun, func(st *state) (BatchResult, error) {
		res, err := applyDocs(st, docs, opts.Diff)
		if err == nil && opts.HasEndpoints != nil {
			for i, d := range docs {
				res.Results[i].Warnings = append(res.Results[i].Warnings, unservedWarnings(st, d, opts.HasEndpoints)...)
			}
		}
		return res, err
	})
}

// Delete removes the named documents atomically. A missing document is an
// error wrapping ErrNotFound; deleting a Service a TrafficSplit still names
// is an error wrapping ErrConflict.
func (s *Spec) Delete(ctx context.Context, keys []Key, dryRun bool) (BatchResult, error) {
	return s.mutate(ctx, dryRun, func(st *state) (BatchResult, error) {
		return deleteKeys(st, keys)
	})
}

func (s *Spec) mutate(ctx context.Context, dryRun bool, change func(*state) (BatchResult, error)) (BatchResult, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for range casAttempts {
		l, cur, err := s.read(ctx)
		if err != nil {
			return BatchResult{}, err
		}
		ver := l.Version()
		next := cur.clone()
		res, err := change(next)
		if err != nil {
			return BatchResult{}, err
		}
		changes, moved, touched, err := changedItems(l, cur, next, res)
		if err != nil {
			return BatchResult{}, err
		}
		if len(moved) > 0 {
			slices.SortFunc(moved, mesh.MeshService.Compare)
			names := make([]string, len(moved))
			for i, m := range moved {
				names[i] = vipHolderName(m)
			}
			res.Warnings = append(res.Warnings, fmt.Sprintf("the outbound vipRange changed: %d services get new virtual IPs (%s); agents rewrite their hosts files on the next update", len(moved), strings.Join(names, ", ")))
		}
		res.Version = ver
		if len(changes) == 0 && !dryRun {
			s.publish(cur, ver)
			return res, nil
		}
		// A change that shrinks the specification is always allowed, so
		// one stored before a lower limit can still be cut down.
		switch {
		case len(changes) == 0:
			next.size = cur.size
		case !l.Committed():
			next.size = storedSize(changes)
		default:
			next.size = l.SizeAfter(cur.size, changes)
		}
		if size := next.size; size > s.maxStored && size > cur.size {
			return BatchResult{}, &ValidationError{Errors: []FieldError{{Document: "mesh specification", Message: fmt.Sprintf(
				"would be %d bytes stored, over the limit of %s (now %d bytes): delete documents that are no longer needed", size, sizeString(int64(s.maxStored)), cur.size)}}}
		}
		if dryRun {
			res.DryRun = true
			return res, nil
		}
		s.known = nil // l changes as it is written
		nv, ok, err := specstore.Write(ctx, s.store, s.log, l, changes)
		if err != nil {
			return BatchResult{}, err
		}
		if !ok {
			continue // another server wrote first: redo on its state
		}
		// The next change can start from here (unless another server
		// wrote meanwhile).
		s.remember(l, next)
		res.Version = nv
		s.publishChange(cur, next, nv, touched)
		for _, r := range res.Results {
			s.log.Info("mesh specification changed", "document", r.Key.String(), "action", r.Action, "version", nv)
		}
		return res, nil
	}
	return BatchResult{}, fmt.Errorf("%w: the mesh specification kept changing during %d attempts to write it: retry", ErrConflict, casAttempts)
}

// changedItems allocates next's VIPs and returns the stored values of
// what next changes of cur, as l stores it (specstore.Deleted for what it
// deletes): the documents res says changed and the VIPs that were
// allocated, freed or moved (those that moved are returned too). Only
// those are encoded, unless the change is the first to store every item
// (over a version-1 value) or moves VIPs in bulk (a vipRange or an Egress
// changed). touched are the documents changed, when nothing else did (no
// VIP in bulk).
func changedItems(l *specstore.Listing, cur, next *state, res BatchResult) (changes map[string][]byte, moved []mesh.MeshService, touched []Key, err error) {
	bulk := !l.Committed() || cur.meshConfig().vipRange() != next.meshConfig().vipRange()
	for _, r := range res.Results {
		if r.Action != Unchanged {
			touched = append(touched, r.Key)
			bulk = bulk || r.Key.Kind == KindEgress
		}
	}
	prefix := next.meshConfig().vipRange()
	if !bulk {
		if err := allocateVIPsOf(next, prefix, touched); err != nil {
			return nil, nil, nil, err
		}
		if changes, err = encodeDocs(next, touched); err != nil {
			return nil, nil, nil, err
		}
		for _, k := range touched {
			if k.Kind != KindService {
				continue
			}
			svc := mesh.MeshService{Namespace: k.Namespace, Name: k.Name}
			ip, has := next.vips[svc]
			switch was, had := cur.vips[svc]; {
			case has && (!had || was != ip):
				changes[specstore.VIPItem(svc)] = specstore.EncodeVIP(ip)
			case had && !has:
				changes[specstore.VIPItem(svc)] = specstore.Deleted()
			}
		}
		return changes, nil, touched, nil
	}
	if moved, err = allocateVIPs(next, prefix); err != nil {
		return nil, nil, nil, err
	}
	if !l.Committed() {
		if !res.Changed() && maps.Equal(cur.vips, next.vips) {
			return nil, moved, nil, nil
		}
		changes, err = encodeItems(next)
		return changes, moved, nil, err
	}
	if changes, err = encodeDocs(next, touched); err != nil {
		return nil, nil, nil, err
	}
	for svc, ip := range next.vips {
		if was, had := cur.vips[svc]; !had || was != ip {
			changes[specstore.VIPItem(svc)] = specstore.EncodeVIP(ip)
		}
	}
	for svc := range cur.vips {
		if _, has := next.vips[svc]; !has {
			changes[specstore.VIPItem(svc)] = specstore.Deleted()
		}
	}
	return changes, moved, nil, nil
}

func storedSize(items map[string][]byte) int {
	n := 0
	for _, v := range items {
		n += len(v)
	}
	return n
}

func applyDocs(st *state, docs []Document, withDiff bool) (BatchResult, error) {
	var (
		res   BatchResult
		errs  []FieldError
		seen  = map[Key]int{}
		batch = map[Key]Document{}
	)
	for i, d := range docs {
		k := d.Key()
		if j, ok := seen[k]; ok {
			errs = append(errs, FieldError{Document: d.describe(), Message: fmt.Sprintf("%s appears twice in this batch (also %s): keep one", k, docs[j].describe())})
			continue
		}
		seen[k] = i
		batch[k] = d
	}
	if len(errs) > 0 {
		return res, &ValidationError{Errors: errs}
	}
	old := make(map[Key]Object, len(docs)) // what the documents replace
	for _, d := range docs {
		if was, ok := st.objects[d.Key()]; ok {
			old[d.Key()] = was
		}
		st.objects[d.Key()] = d.Object
	}
	st.reindex()
	for _, d := range docs {
		v := &validator{doc: d.describe()}
		checkReferences(v, st, d.Object)
		errs = append(errs, v.errs...)
		r := Result{Key: d.Key(), Warnings: v.warnings}
		was, existed := old[d.Key()]
		switch {
		case !existed:
			r.Action = Created
		case canonicalEqual(was, d.Object):
			r.Action = Unchanged
		default:
			r.Action = Configured
		}
		if withDiff && r.Action != Unchanged {
			var before Object
			if existed {
				before = was
			}
			r.Diff = diffObjects(d.Key(), before, d.Object)
		}
		if r.Action == Unchanged {
			st.objects[d.Key()] = was // keep the stored form
		}
		res.Results = append(res.Results, r)
	}
	if len(errs) > 0 {
		return BatchResult{}, &ValidationError{Errors: errs}
	}
	return res, nil
}

func deleteKeys(st *state, keys []Key) (BatchResult, error) {
	var res BatchResult
	gone := map[Key]bool{}
	var uniq []Key
	for _, k := range keys {
		if gone[k] {
			continue // named twice
		}
		if _, ok := st.objects[k]; !ok {
			return BatchResult{}, fmt.Errorf("%w: %s does not exist%s", ErrNotFound, k, didYouMean(k.Name, namesOfKind(st, k.Kind, k.Namespace)))
		}
		gone[k] = true
		uniq = append(uniq, k)
	}
	keys = uniq
	for _, k := range keys {
		if k.Kind != KindService {
			continue
		}
		for _, ok := range sortedObjectKeys(st.objects) {
			ts, isSplit := st.objects[ok].(*TrafficSplit)
			if !isSplit || gone[ok] || ts.Metadata.Namespace != k.Namespace {
				continue
			}
			if ts.Spec.Service == k.Name || slices.ContainsFunc(ts.Spec.Backends, func(b TrafficSplitBackend) bool { return b.Service == k.Name }) {
				return BatchResult{}, fmt.Errorf("%w: %s is used by %s: delete or change the TrafficSplit first, or in the same batch", ErrConflict, k, ok)
			}
		}
	}
	if err := gatewayDeleteConflict(st, gone); err != nil {
		return BatchResult{}, err
	}
	if err := egressGatewayDeleteConflict(st, gone); err != nil {
		return BatchResult{}, err
	}
	if err := meshConfigDeleteConflict(st, gone); err != nil {
		return BatchResult{}, err
	}
	for _, k := range keys {
		delete(st.objects, k)
		res.Results = append(res.Results, Result{Key: k, Action: Deleted})
	}
	st.reindex()
	return res, nil
}

// kindIndex is a state's objects' names by kind and namespace, sorted:
// validation asks it once per document, so without it a large apply or
// the start's check of what is stored is quadratic.
type kindIndex struct {
	once  sync.Once
	names map[[2]string][]string
	// accounts is each namespace's service accounts that Services run
	// as, sorted, each once: a TrafficTarget's check reads it.
	accounts map[string][]string
	// runAs is the names of the Services (of kind Service) that run as
	// each {namespace, service account}, sorted: what a TrafficTarget's
	// destination names, read for each one applied.
	runAs map[[2]string][]string
}

// reindex is called after objects changed.
func (st *state) reindex() { st.names = &kindIndex{} }

// index returns st's index, built at its first use.
func (st *state) index() *kindIndex {
	if st.names == nil { // a state built by hand (tests)
		st = &state{objects: st.objects, names: &kindIndex{}}
	}
	idx := st.names
	idx.once.Do(func() {
		idx.names = map[[2]string][]string{}
		idx.accounts = map[string][]string{}
		idx.runAs = map[[2]string][]string{}
		for k, obj := range st.objects {
			key := [2]string{k.Kind, k.Namespace}
			idx.names[key] = append(idx.names[key], k.Name)
			if s, ok := serviceOf(obj); ok {
				idx.accounts[s.Metadata.Namespace] = append(idx.accounts[s.Metadata.Namespace], s.Spec.ServiceAccount)
			}
			if s, ok := obj.(*Service); ok {
				sa := [2]string{k.Namespace, s.Spec.ServiceAccount}
				idx.runAs[sa] = append(idx.runAs[sa], k.Name)
			}
		}
		for _, names := range idx.names {
			slices.Sort(names)
		}
		for _, names := range idx.runAs {
			slices.Sort(names)
		}
		for ns, a := range idx.accounts {
			slices.Sort(a)
			idx.accounts[ns] = slices.Compact(a)
		}
	})
	return idx
}

// namesOfKind returns the sorted names of the objects of kind in namespace.
func namesOfKind(st *state, kind, namespace string) []string {
	return slices.Clone(st.index().names[[2]string{kind, namespace}])
}

// serviceAccounts returns the service accounts the Services of namespace
// run as, sorted, each once; the caller must not change the slice.
func serviceAccounts(st *state, namespace string) []string {
	return st.index().accounts[namespace]
}

func canonicalJSON(o Object) []byte {
	b, _ := json.Marshal(o)
	return b
}

func canonicalEqual(a, b Object) bool { return bytes.Equal(canonicalJSON(a), canonicalJSON(b)) }

// canonicalYAML renders o as YAML with sorted keys and defaults filled.
func canonicalYAML(o Object) string {
	if o == nil {
		return ""
	}
	var v any
	_ = json.Unmarshal(canonicalJSON(o), &v)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	_ = enc.Close()
	return b.String()
}

func diffObjects(k Key, before, after Object) string {
	d := difflib.UnifiedDiff{
		A:        splitLines(canonicalYAML(before)),
		B:        splitLines(canonicalYAML(after)),
		FromFile: "live/" + k.String(),
		ToFile:   "applied/" + k.String(),
		Context:  3,
	}
	s, err := difflib.GetUnifiedDiffString(d)
	if err != nil {
		return err.Error()
	}
	return s
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return difflib.SplitLines(strings.TrimSuffix(s, "\n"))
}
