package enroll

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/store"
)

// ReplicasPrefix holds one record per osm-server replica, under which the
// replicas find each other to tell agents where they can fail over to.
const ReplicasPrefix = "replicas/"

// ReplicaStore is what the registry needs of the store.
type ReplicaStore interface {
	List(ctx context.Context, prefix string) ([]store.KV, error)
	Txn(ctx context.Context, ops ...store.Op) (bool, error)
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// replicaRecord is the stored record of one replica.
type replicaRecord struct {
	meshapi.Replica
	Started time.Time `json:"started"`
}

// Replicas keeps this replica's record in the store and follows the
// others', so the agent config lists every live replica (the agent side
// is internal/agent: it fails over along the list).
type Replicas struct {
	log  *slog.Logger
	st   ReplicaStore
	self meshapi.Replica

	mu   sync.Mutex
	recs []replicaRecord
}

// NewReplicas returns the registry of the replicas sharing st; self is
// how agents reach this replica (an empty API: it registers nothing and
// only follows the others).
func NewReplicas(log *slog.Logger, st ReplicaStore, self meshapi.Replica) *Replicas {
	return &Replicas{log: log, st: st, self: self}
}

func (r *Replicas) key() string { return ReplicasPrefix + url.PathEscape(r.self.API) }

// Run registers this replica and follows every replica's record until
// ctx ends, then deletes its own so agents stop trying it. Registering is
// one write at start and one at a clean stop, none at rest: a replica
// that died without stopping stays listed (agents try it and fail over to
// the next) until it starts again or its record is deleted (see the
// operator guide, "Running several servers"). Store errors are logged; a
// failed registration is retried, a failed list keeps the last one.
func (r *Replicas) Run(ctx context.Context) error {
	changed := r.st.Watch(ctx, ReplicasPrefix)
	registered := r.register(ctx)
	r.refresh(ctx)
	retry := time.NewTicker(10 * time.Second)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			if r.self.API != "" {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				if _, err := r.st.Txn(dctx, store.Delete(r.key(), store.AnyVersion)); err != nil {
					r.log.Warn("replica registry: could not remove this replica's record; agents keep trying it until it is deleted", "key", r.key(), "err", err)
				}
				cancel()
			}
			return nil
		case <-retry.C:
			if !registered {
				registered = r.register(ctx)
			}
		case <-changed:
			r.refresh(ctx)
		}
	}
}

func (r *Replicas) register(ctx context.Context) bool {
	if r.self.API == "" {
		return true
	}
	b, err := json.Marshal(replicaRecord{Replica: r.self, Started: time.Now().UTC()})
	if err != nil {
		r.log.Error("replica registry: encode this replica's record", "err", err)
		return true
	}
	if _, err := r.st.Txn(ctx, store.Set(r.key(), store.AnyVersion, b)); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("replica registry: could not register this replica; retrying", "key", r.key(), "err", err)
		}
		return false
	}
	return true
}

func (r *Replicas) refresh(ctx context.Context) {
	kvs, err := r.st.List(ctx, ReplicasPrefix)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("replica registry: list replicas; agents get the last list", "err", err)
		}
		return
	}
	recs := make([]replicaRecord, 0, len(kvs))
	for _, kv := range kvs {
		var rec replicaRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.API == "" {
			r.log.Warn("replica registry: ignoring a bad record", "key", kv.Key, "err", err)
			continue
		}
		recs = append(recs, rec)
	}
	r.mu.Lock()
	r.recs = recs
	r.mu.Unlock()
}

// List returns every registered replica, ordered by API URL; this
// replica is always in it.
func (r *Replicas) List() []meshapi.Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []meshapi.Replica{}
	for _, rec := range r.recs {
		if rec.API != r.self.API {
			out = append(out, rec.Replica)
		}
	}
	if r.self.API != "" {
		out = append(out, r.self)
	}
	slices.SortFunc(out, func(a, b meshapi.Replica) int { return strings.Compare(a.API, b.API) })
	return out
}

func (h *handler) replicaList() []meshapi.Replica {
	if h.replicas == nil {
		return nil
	}
	return h.replicas()
}
