package cache

// Metrics: what the cache measures of the conversation with proxies.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The xDS types the cache counts by name; anything else counts as "other".
// Counting is an index into arrays of counters resolved once, so a
// response or an ACK costs an atomic add, not a label lookup.
var typeNames = [...]string{"cds", "eds", "lds", "rds", "sds", "other"}

const numTypes = len(typeNames)

// typeIndex maps a type URL to its slot in typeNames.
func typeIndex(typeURL string) int {
	switch typeURL {
	case "type.googleapis.com/envoy.config.cluster.v3.Cluster":
		return 0
	case "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment":
		return 1
	case "type.googleapis.com/envoy.config.listener.v3.Listener":
		return 2
	case "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":
		return 3
	case "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret":
		return 4
	}
	return numTypes - 1
}

// metrics are the cache's Prometheus instruments (see Instrument).
type metrics struct {
	responses [numTypes]prometheus.Counter
	nacks     [numTypes]prometheus.Counter
	changeACK prometheus.Histogram
}

// change is one batch of publishes (see BeginChange): when it began, and
// how many node views it changed that have not yet answered. Guarded by
// Cache.mu.
type change struct {
	start       time.Time
	outstanding int
	answered    bool
}

// Instrument registers the cache's metrics with reg and starts measuring:
//
//   - osm_xds_responses_total{type}: responses sent, by xDS type;
//   - osm_xds_nacks_total{type}: responses proxies rejected, by type (the
//     last rejection's message is in Status, on /debug/proxies);
//   - osm_xds_change_to_ack_seconds: from the start of a batch of changes
//     (BeginChange) to the last ACK (or NACK) of a proxy whose view it
//     changed (of those already configured: a joining proxy's first
//     configuration is not a change). A proxy that receives a newer change
//     before it answered counts as done for the older one; a change no
//     proxy answered (they all left, or a newer change came first) is not
//     observed.
//
// Call it before the cache serves; without it the cache measures nothing.
func (c *Cache) Instrument(reg prometheus.Registerer) error {
	responses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "osm_xds_responses_total",
		Help: "xDS responses sent to proxies, by type (cds, eds, lds, rds, sds).",
	}, []string{"type"})
	nacks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "osm_xds_nacks_total",
		Help: "xDS responses proxies rejected (NACKs), by type; /debug/proxies shows the last rejection's message.",
	}, []string{"type"})
	changeACK := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "osm_xds_change_to_ack_seconds",
		Help:    "Time from a configuration change to the ACK of the last proxy it affected.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	})
	for _, col := range []prometheus.Collector{responses, nacks, changeACK} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	m := &metrics{changeACK: changeACK}
	for i, name := range typeNames {
		m.responses[i] = responses.WithLabelValues(name)
		m.nacks[i] = nacks.WithLabelValues(name)
	}
	c.mu.Lock()
	c.metrics = m
	c.mu.Unlock()
	return nil
}

// BeginChange marks the start of a batch of publishes (a publisher's
// pass): the node views it changes are awaited, and when the last of them
// is answered, the time since now is observed in
// osm_xds_change_to_ack_seconds. Without Instrument it does nothing.
func (c *Cache) BeginChange() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics != nil {
		c.current = &change{start: time.Now()}
	}
}

// await records that the current change changed node n's view of type i,
// if n was served that type before: a change is measured to the proxies it
// changes, not to those joining (and not for types a proxy never asks
// for). Caller holds c.mu.
func (c *Cache) await(n *node, i int) {
	e := c.current
	if e == nil || n.served&(1<<i) == 0 || n.pending[i] == e {
		return
	}
	c.settle(n.pending[i], false)
	e.outstanding++
	n.pending[i] = e
}

// answer records that node n answered its response of type i (ACK or
// NACK). Caller holds c.mu.
func (c *Cache) answer(n *node, i int) {
	if e := n.pending[i]; e != nil && n.carried[i] == e {
		n.pending[i], n.carried[i] = nil, nil
		c.settle(e, true)
	}
}

// settle counts one node view of change e done (answered, or superseded
// or forgotten when not); the last observes the change. Caller holds c.mu.
func (c *Cache) settle(e *change, answered bool) {
	if e == nil {
		return
	}
	e.outstanding--
	e.answered = e.answered || answered
	if e.outstanding == 0 && e.answered && c.metrics != nil {
		c.metrics.changeACK.Observe(time.Since(e.start).Seconds())
	}
}

// countResponse and countNACK count one response sent or rejected. Caller
// holds c.mu.
func (c *Cache) countResponse(n *node, typeURL string) {
	if c.metrics != nil {
		i := typeIndex(typeURL)
		c.metrics.responses[i].Inc()
		n.served |= 1 << i
		n.carried[i] = n.pending[i]
	}
}

func (c *Cache) countNACK(typeURL string) {
	if c.metrics != nil {
		c.metrics.nacks[typeIndex(typeURL)].Inc()
	}
}
