package cache

// Metrics: what the cache measures of the conversation with proxies.

import (
	"slices"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// The xDS types the cache counts by name; anything else counts as "other".
// Counting is an index into arrays of counters resolved once, so a
// response or an ACK costs an atomic add, not a label lookup.
var typeNames = [...]string{"cds", "eds", "lds", "rds", "sds", "other"}

const numTypes = len(typeNames)

// TypeURLs are the type URLs osm-server serves, in typeNames' order.
var TypeURLs = [numTypes - 1]string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType, resource.SecretType}

// TypeIndex is typeURL's index in TypeURLs, or -1. It takes the bytes of
// a message being decoded as well, without copying them.
func TypeIndex[T string | []byte](typeURL T) int {
	for i, t := range TypeURLs {
		if string(typeURL) == t {
			return i
		}
	}
	return -1
}

// typeIndex maps a type URL to its slot in typeNames.
func typeIndex(typeURL string) int { return metricSlot(TypeIndex(typeURL)) }

// metricSlot maps a TypeIndex (-1 for a type URL not in TypeURLs) to its
// slot in typeNames.
func metricSlot(ti int) int {
	if ti < 0 {
		return numTypes - 1
	}
	return ti
}

// metrics are the cache's Prometheus instruments (see Instrument).
type metrics struct {
	responses [numTypes]prometheus.Counter
	nacks     [numTypes]prometheus.Counter
	changeACK prometheus.Histogram
}

// change is one batch of publishes (see BeginChange): when it began, how
// many node views it changed that have not yet answered, whether one of
// those was a proxy's configuration (not its first), and whether any
// answered. Guarded by Cache.mu.
type change struct {
	start       time.Time
	outstanding int
	configured  bool
	answered    bool
}

// maxAwaiting bounds the changes one node's view of one type awaits an
// ACK for: a proxy that rejects every change stops holding back the
// oldest (it is counted as not answered by that proxy).
const maxAwaiting = 16

// Instrument registers the cache's metrics with reg and starts measuring:
//
//   - osm_xds_responses_total{type}: responses sent, by xDS type;
//   - osm_xds_nacks_total{type}: responses proxies rejected, by type (the
//     last rejection's message is in Status, on /debug/proxies);
//   - osm_xds_change_to_ack_seconds: from the start of a batch of changes
//     (BeginChange) to the ACK of the last proxy it affected.
//
// What counts as affected, and as an answer:
//
//   - A proxy is affected by a change when the change alters the set of
//     a type it has asked for (a request of that type arrived from it)
//     and, if it asks for resources by name, what it asked for: a proxy
//     whose subscription the change does not touch is not waited for. A
//     proxy that connects during a change counts too, for each type it
//     asks for while the change is still waited for (its first
//     configuration carries the change).
//   - A change is observed only if it altered the configuration of at
//     least one proxy already configured (one that had been sent that
//     type before): a batch that only configures joining proxies (a
//     reconnect after a restart) measures connecting, not a change.
//   - Only an ACK answers. A proxy that rejects (NACKs) a change keeps
//     the change waiting until it ACKs a later version of that type
//     (which carries the change, or what replaced it); osm_xds_nacks_total
//     is what to alert on. An ACK of a newer version answers every older
//     change it was waiting for.
//   - A proxy that disconnects stops being waited for; so does, for its
//     oldest change, a proxy that has 16 unanswered changes of one type.
//     A change that no affected proxy ACKed is not observed.
//   - Several streams of one node (apps behind one agent) share its
//     record: the node's answer is the ACK of the last response sent.
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
// if n has asked for that type (see Instrument). Caller holds c.mu.
func (c *Cache) await(n *node, i int) {
	e := c.current
	if e == nil {
		return
	}
	n.publishedIn[i] = e
	if n.asked&(1<<i) == 0 {
		return // see asked
	}
	c.awaitChange(n, i, e)
}

// awaitChange records that node n's view of type i awaits an ACK for
// change e. Caller holds c.mu.
func (c *Cache) awaitChange(n *node, i int, e *change) {
	aw := n.awaiting[i]
	if len(aw) > 0 && aw[len(aw)-1] == e {
		return
	}
	if len(aw) == maxAwaiting {
		c.settle(aw[0], false)
		aw = slices.Delete(aw, 0, 1)
		n.carried[i] = max(n.carried[i]-1, 0)
	}
	n.awaiting[i] = append(aw, e)
	e.outstanding++
	if n.served&(1<<i) != 0 {
		e.configured = true
	}
}

// asked records that node n sent a request of type URL typeURL. The
// first of a type joins the change its view of that type was last
// published in, if that change is still waited for: a proxy connecting
// during a change often asks only after its view was published. Caller
// holds c.mu.
func (c *Cache) asked(n *node, typeURL string) {
	if c.metrics == nil {
		return
	}
	i := typeIndex(typeURL)
	if n.asked&(1<<i) != 0 {
		return
	}
	n.asked |= 1 << i
	if e := n.publishedIn[i]; e != nil && e.outstanding > 0 {
		c.awaitChange(n, i, e)
	}
}

// acked records that node n ACKed the last response of type i it was
// sent: the changes that response carried are answered. Caller holds c.mu.
func (c *Cache) acked(n *node, i int) {
	k := n.carried[i]
	for _, e := range n.awaiting[i][:k] {
		c.settle(e, true)
	}
	n.awaiting[i] = slices.Delete(n.awaiting[i], 0, k)
	n.carried[i] = 0
}

// unaffected records that a watch of node n for type i was evaluated and
// needed no response: the changes no response carried did not alter what
// the proxy asked for. Caller holds c.mu.
func (c *Cache) unaffected(n *node, i int) {
	k := n.carried[i]
	for _, e := range n.awaiting[i][k:] {
		c.settle(e, false)
	}
	n.awaiting[i] = n.awaiting[i][:k]
}

// forgetChanges stops waiting for node n. Caller holds c.mu.
func (c *Cache) forgetChanges(n *node) {
	for i, aw := range n.awaiting {
		for _, e := range aw {
			c.settle(e, false)
		}
		n.awaiting[i], n.carried[i], n.publishedIn[i] = nil, 0, nil
	}
	n.served, n.asked = 0, 0
}

// settle counts one node view of change e done (answered, or not waited
// for any more when not); the last observes the change. Caller holds c.mu.
func (c *Cache) settle(e *change, answered bool) {
	e.outstanding--
	e.answered = e.answered || answered
	if e.outstanding == 0 && e.answered && e.configured && c.metrics != nil {
		c.metrics.changeACK.Observe(time.Since(e.start).Seconds())
	}
}

// countResponse and countNACK count one response sent or rejected; ti
// is the response's TypeIndex. Caller holds c.mu.
func (c *Cache) countResponse(n *node, ti int) {
	if c.metrics != nil {
		i := metricSlot(ti)
		c.metrics.responses[i].Inc()
		n.served |= 1 << i
		n.carried[i] = len(n.awaiting[i])
	}
}

func (c *Cache) countNACK(typeURL string) {
	if c.metrics != nil {
		c.metrics.nacks[typeIndex(typeURL)].Inc()
	}
}
