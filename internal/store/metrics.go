package store

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Instrument returns s measured into reg: osm_store_transaction_duration_seconds{op}
// (txn, cas) times every write, osm_store_conflicts_total{op} counts the
// writes refused because a version condition failed (another writer was
// first), and osm_store_errors_total{op} those that failed. Reads and
// watches pass through untimed.
func Instrument(s Store, reg prometheus.Registerer) (Store, error) {
	m := &measured{
		Store: s,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "osm_store_transaction_duration_seconds",
			Help:    "Time of store writes, by operation: txn (a transaction) or cas (a compare-and-swap).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 3, 11),
		}, []string{"op"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_store_conflicts_total",
			Help: "Store writes refused because a version condition failed (another writer was first), by operation.",
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_store_errors_total",
			Help: "Store writes that failed, by operation.",
		}, []string{"op"}),
	}
	for _, op := range []string{"txn", "cas"} {
		m.duration.WithLabelValues(op)
		m.conflicts.WithLabelValues(op)
		m.errors.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.duration, m.conflicts, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

type measured struct {
	Store
	duration          *prometheus.HistogramVec
	conflicts, errors *prometheus.CounterVec
}

// TxnLimits forwards the limits of the store measured (see [TxnLimits]).
func (m *measured) TxnLimits() (ops, bytes int) { return TxnLimits(m.Store) }

func (m *measured) observe(op string, start time.Time, ok bool, err error) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		m.errors.WithLabelValues(op).Inc()
	case !ok:
		m.conflicts.WithLabelValues(op).Inc()
	}
}

func (m *measured) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	start := time.Now()
	v, ok, err := m.Store.CompareAndSwap(ctx, key, version, value)
	m.observe("cas", start, ok, err)
	return v, ok, err
}

func (m *measured) Txn(ctx context.Context, ops ...Op) (bool, error) {
	start := time.Now()
	ok, err := m.Store.Txn(ctx, ops...)
	m.observe("txn", start, ok, err)
	return ok, err
}
