package xds

// The server's metrics: what it counts as streams open and close and as
// TLS handshakes are accepted, and the connected proxies counted at
// scrape time. Nothing per proxy is labelled.

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// serverMetrics are the server's instruments. They count from the
// server's construction; register hands them to a registry (see
// Server.Instrument).
type serverMetrics struct {
	opened prometheus.Counter
	closed *prometheus.CounterVec
	// closedBy is closed's counter of each reason (closeReason's values),
	// looked up once.
	closedBy map[string]prometheus.Counter
	// handshakes counts the TLS handshakes whose client certificate was
	// accepted: full and resumed.
	handshakes    *prometheus.CounterVec
	full, resumed prometheus.Counter
	connected     connectedCollector
}

var connectedDesc = prometheus.NewDesc("osm_xds_connected_proxies",
	"Proxies connected over xDS, by flavour (envoy or grpc) and service.", []string{"flavor", "service"}, nil)

// newServerMetrics returns the server's instruments; eachProxy calls its
// argument with the flavour and service of every connected proxy (at
// scrape time, for osm_xds_connected_proxies).
func newServerMetrics(eachProxy func(func(render.Flavor, mesh.MeshService))) *serverMetrics {
	m := &serverMetrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "osm_xds_streams_opened_total",
			Help: "Authenticated xDS (ADS) streams opened.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_xds_streams_closed_total",
			Help: "xDS streams ended, by reason: client, revoked, expired, refused, stopping.",
		}, []string{"reason"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_xds_tls_handshakes_total",
			Help: "TLS handshakes on the xDS port whose client certificate was accepted, by whether they resumed a session.",
		}, []string{"resumed"}),
		connected: connectedCollector{eachProxy},
	}
	m.closedBy = map[string]prometheus.Counter{}
	for _, r := range []string{closeClient, closeRevoked, closeExpired, closeRefused, closeStopping} {
		m.closedBy[r] = m.closed.WithLabelValues(r)
	}
	m.full, m.resumed = m.handshakes.WithLabelValues("false"), m.handshakes.WithLabelValues("true")
	return m
}

// register registers the instruments with reg.
func (m *serverMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.opened, m.closed, m.handshakes, m.connected} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// streamClosed counts a stream that ended for reason (see closeReason).
func (m *serverMetrics) streamClosed(reason string) { m.closedBy[reason].Inc() }

// handshake counts a TLS handshake whose client certificate was accepted.
func (m *serverMetrics) handshake(resumed bool) {
	if resumed {
		m.resumed.Inc()
	} else {
		m.full.Inc()
	}
}

// connectedCollector counts the connected proxies at scrape time, so a
// connect or disconnect costs nothing more.
type connectedCollector struct {
	eachProxy func(func(render.Flavor, mesh.MeshService))
}

func (c connectedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connectedDesc }

func (c connectedCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		flavor  render.Flavor
		service mesh.MeshService
	}
	counts := map[key]int{}
	c.eachProxy(func(f render.Flavor, svc mesh.MeshService) { counts[key{f, svc}]++ })
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, float64(n), k.flavor.String(), k.service.String())
	}
}
