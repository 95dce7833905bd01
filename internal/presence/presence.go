// Package presence shares, between osm-server replicas on one store, which
// proxies are connected to each, so the participant rule (an endpoint is
// sent only while a proxy of its service is connected from its address)
// holds across replicas: a proxy is connected to one replica, and callers
// on every replica must see its endpoint.
//
// Each replica writes one key, Prefix + its replica key, holding its whole
// local connected set (service -> addresses), gzip-compressed JSON: written
// only when the set changed, at most once per interval (a reconnect storm
// of thousands of proxies costs a write per interval while it lasts),
// never at rest, and deleted at a clean stop. Each replica watches the
// prefix and hands the other replicas' sets to the mesh model.
//
// It imports, of osm-vm, only mesh and the store contract.
package presence

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// Prefix holds one record per replica: the proxies connected to it.
const Prefix = "presence/"

// DefaultInterval is the least time between two writes of a replica's set.
const DefaultInterval = time.Second

// retryAfter is how long a failed write waits before it is tried again.
const retryAfter = 2 * time.Second

// Store is what the sharer needs of the store.
type Store interface {
	List(ctx context.Context, prefix string) ([]store.KV, error)
	Txn(ctx context.Context, ops ...store.Op) (bool, error)
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// Remote is told the other replicas' connected sets (the mesh model): set
// nil when a replica's record is gone.
type Remote interface {
	SetRemotePresence(replica string, set map[mesh.MeshService][]netip.Addr)
}

// Set is a replica's connected set: for each service, the addresses a
// proxy of it is connected from.
type Set map[mesh.MeshService][]netip.Addr

// record is the stored form of a Set (before gzip).
type record struct {
	// Services maps "namespace/name" to addresses, sorted.
	Services map[string][]string `json:"services"`
}

// Encode returns the stored form of set: JSON, gzip-compressed. Its bytes
// depend only on the set's content.
func Encode(set Set) ([]byte, error) {
	rec := record{Services: make(map[string][]string, len(set))}
	for svc, addrs := range set {
		s := make([]string, 0, len(addrs))
		for _, a := range addrs {
			s = append(s, a.String())
		}
		slices.Sort(s)
		rec.Services[svc.String()] = slices.Compact(s)
	}
	js, err := json.Marshal(rec) // map keys are sorted
	if err != nil {
		return nil, err
	}
	return gzipBytes(js)
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decode parses what Encode wrote.
func Decode(b []byte) (Set, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	js, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	var rec record
	if err := json.Unmarshal(js, &rec); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	set := make(Set, len(rec.Services))
	for name, addrs := range rec.Services {
		ns, n, ok := strings.Cut(name, "/")
		if !ok || ns == "" || n == "" {
			return nil, fmt.Errorf("service %q is not namespace/name", name)
		}
		svc := mesh.MeshService{Namespace: ns, Name: n}
		for _, s := range addrs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("service %s: %w", name, err)
			}
			set[svc] = append(set[svc], a)
		}
	}
	return set, nil
}

// Sharer writes this replica's connected set to the store and gives the
// other replicas' to the model. The xDS server tells it of every proxy
// connecting and leaving (it is an xds.Presence, beside the model).
type Sharer struct {
	log      *slog.Logger
	st       Store
	replica  string
	remote   Remote
	interval time.Duration

	mu      sync.Mutex
	local   map[mesh.MeshService]map[netip.Addr]int
	changes uint64 // local changes so far
	flushed uint64 // changes reflected in the store (written, or nothing to write)
	dirty   chan struct{}

	// Owned by Run.
	written []byte            // the encoded set last written
	seen    map[string]uint64 // other replicas' record versions last read
}

// New returns the sharer of this replica, whose record is Prefix+replica
// (replica must be unique among the replicas and stable across restarts:
// the replica list's escaped API URL). Writes are at least interval apart
// (DefaultInterval when 0).
func New(log *slog.Logger, st Store, replica string, remote Remote, interval time.Duration) *Sharer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Sharer{log: log, st: st, replica: replica, remote: remote, interval: interval,
		local: map[mesh.MeshService]map[netip.Addr]int{}, dirty: make(chan struct{}, 1), seen: map[string]uint64{}}
}

func (s *Sharer) key() string { return Prefix + s.replica }

// ProxyConnected records that a proxy of svc connected to this replica
// from addr.
func (s *Sharer) ProxyConnected(svc mesh.MeshService, addr netip.Addr) {
	s.mu.Lock()
	addrs := s.local[svc]
	if addrs == nil {
		addrs = map[netip.Addr]int{}
		s.local[svc] = addrs
	}
	addrs[addr]++
	s.changes++
	s.mu.Unlock()
	s.signal()
}

// ProxyDisconnected records that a proxy of svc connected from addr left.
func (s *Sharer) ProxyDisconnected(svc mesh.MeshService, addr netip.Addr) {
	s.mu.Lock()
	if addrs := s.local[svc]; addrs != nil {
		if addrs[addr]--; addrs[addr] <= 0 {
			delete(addrs, addr)
			if len(addrs) == 0 {
				delete(s.local, svc)
			}
		}
	}
	s.changes++
	s.mu.Unlock()
	s.signal()
}

func (s *Sharer) signal() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// Local returns this replica's connected set now.
func (s *Sharer) Local() Set {
	set, _ := s.localAt()
	return set
}

// settled reports whether the store holds every local change made so far.
func (s *Sharer) settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushed == s.changes
}

// localAt returns the connected set and the number of changes it reflects.
func (s *Sharer) localAt() (Set, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := make(Set, len(s.local))
	for svc, addrs := range s.local {
		for a := range addrs {
			set[svc] = append(set[svc], a)
		}
	}
	return set, s.changes
}

// Run writes this replica's set at start (replacing what a killed
// predecessor under the same key left), then whenever it changed, at most
// once per interval, and follows the other replicas' records until ctx
// ends; then it deletes its record. Store errors are logged: a failed
// write is retried, a failed read keeps the last sets, a record that does
// not decode is ignored (its replica keeps its last good set).
func (s *Sharer) Run(ctx context.Context) error {
	changed := s.st.Watch(ctx, Prefix)
	s.refresh(ctx)
	var next <-chan time.Time
	if !s.write(ctx, true) {
		next = time.After(retryAfter)
	}
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if _, err := s.st.Txn(dctx, store.Delete(s.key(), store.AnyVersion)); err != nil {
				s.log.Warn("presence: could not remove this replica's record; other replicas count its proxies as connected until it starts again or the record is deleted", "key", s.key(), "err", err)
			}
			return nil
		case <-changed:
			s.refresh(ctx)
		case <-s.dirty:
			if next == nil {
				next = time.After(time.Until(last.Add(s.interval)))
			}
		case <-next:
			next = nil
			if !s.write(ctx, false) {
				next = time.After(retryAfter)
			}
			last = time.Now()
		}
	}
}

// write stores the local set unless it is what was written last (always at
// start); an empty set deletes the record. It reports success.
func (s *Sharer) write(ctx context.Context, start bool) bool {
	set, v := s.localAt()
	b, err := Encode(set)
	if err != nil {
		s.log.Error("presence: encode this replica's connected set", "err", err)
		return true
	}
	if !start && bytes.Equal(b, s.written) {
		s.markFlushed(v)
		return true
	}
	op := store.Delete(s.key(), store.AnyVersion)
	if len(set) > 0 {
		op = store.Set(s.key(), store.AnyVersion, b)
	}
	if _, err := s.st.Txn(ctx, op); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("presence: could not write this replica's connected proxies; callers on other replicas miss or keep their endpoints until it is written; retrying", "key", s.key(), "services", len(set), "bytes", len(b), "err", err)
		}
		return false
	}
	s.written = b
	s.markFlushed(v)
	return true
}

func (s *Sharer) markFlushed(v uint64) {
	s.mu.Lock()
	s.flushed = max(s.flushed, v)
	s.mu.Unlock()
}

// refresh reads every replica's record and gives the model those of the
// others that changed since the last read.
func (s *Sharer) refresh(ctx context.Context) {
	kvs, err := s.st.List(ctx, Prefix)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("presence: list the replicas' connected proxies; keeping the last ones read", "err", err)
		}
		return
	}
	present := map[string]bool{}
	for _, kv := range kvs {
		replica := strings.TrimPrefix(kv.Key, Prefix)
		if replica == s.replica {
			continue
		}
		present[replica] = true
		if v, ok := s.seen[replica]; ok && v == kv.Version {
			continue
		}
		s.seen[replica] = kv.Version
		set, err := Decode(kv.Value)
		if err != nil {
			s.log.Warn("presence: ignoring a replica's record that does not decode; its last good set stays", "key", kv.Key, "err", err)
			continue
		}
		s.remote.SetRemotePresence(replica, set)
	}
	for replica := range s.seen {
		if !present[replica] {
			delete(s.seen, replica)
			s.remote.SetRemotePresence(replica, nil)
		}
	}
}
