package consulstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storeProbeEvery is how often a replica checks that it reaches Consul,
// and storeProbeTimeout how long one check may take.
const (
	storeProbeEvery   = 2 * time.Second
	storeProbeTimeout = 3 * time.Second
)

// HealthOptions are a Health's.
type HealthOptions struct {
	// ProbeKey is the key each probe reads: one that every replica's
	// token may read (osm-server's admin token).
	ProbeKey string
}

// Health follows whether a replica reaches its Consul store: a replica
// cut off keeps serving its last good view over xDS (everything a proxy
// receives is in memory), refuses writes (each fails with the store's
// error, naming Consul's address and what failed), and reports not-ready
// (Ready, for /readyz) with the reason until a probe succeeds again.
type Health struct {
	st   *Store
	log  *slog.Logger
	opts HealthOptions

	mu    sync.Mutex
	err   error     // the last probe's failure; nil when it succeeded
	since time.Time // when the failures began
}

// NewHealth returns the health probe of st.
func NewHealth(log *slog.Logger, st *Store, opts HealthOptions) *Health {
	return &Health{st: st, log: log, opts: opts}
}

// Run probes the store every storeProbeEvery until ctx ends.
func (h *Health) Run(ctx context.Context) error {
	t := time.NewTicker(storeProbeEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
		_, _, err := h.st.Get(pctx, h.opts.ProbeKey)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		h.mu.Lock()
		switch {
		case err != nil && h.err == nil:
			h.since = time.Now()
			h.log.Error("lost the Consul store: serving the last good view over xDS, refusing writes, retrying", "err", err, "retry_every", storeProbeEvery)
		case err == nil && h.err != nil:
			h.log.Info("the Consul store is back: writes resume; watches resync", "down_for", time.Since(h.since).Round(time.Millisecond))
			// Catch up now: a watch's blocking query may be stuck on a
			// connection whose answer was lost, or in its error backoff.
			h.st.Resync()
		}
		h.err = err
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ready is the /readyz check: nil while the last probe succeeded.
func (h *Health) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return fmt.Errorf("the store is unreachable since %s (%s ago): %w; xDS serves the last good view, writes are refused, retrying every %s",
		h.since.UTC().Format(time.RFC3339), time.Since(h.since).Round(time.Second), h.err, storeProbeEvery)
}

// Register adds the store's figures to /metrics.
func (h *Health) Register(reg prometheus.Registerer) error {
	return errors.Join(
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "osm_store_up",
			Help: "1 while the replica reaches its Consul store.",
		}, func() float64 {
			if h.Ready() != nil {
				return 0
			}
			return 1
		})),
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "osm_store_commits_total",
			Help: "Transactions Consul committed for this replica (each one Raft write).",
		}, func() float64 { return float64(h.st.Stats().Commits) })),
	)
}
