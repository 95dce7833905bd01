package xds

// Metrics: what the xDS server and the publisher measure. Each registers
// with the registry main hands it; nothing per proxy is labelled.

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// serverMetrics are the server's instruments (see Server.Instrument).
type serverMetrics struct {
	opened prometheus.Counter
	closed *prometheus.CounterVec
	// handshakes counts the TLS handshakes whose client certificate was
	// accepted: full and resumed.
	full, resumed prometheus.Counter
}

// Stream close reasons, the values of osm_xds_streams_closed_total's
// reason label.
const (
	closeClient   = "client"   // the proxy ended it or went away
	closeRevoked  = "revoked"  // its proxy was revoked or is no longer allowed
	closeExpired  = "expired"  // its certificate expired
	closeRefused  = "refused"  // a request was refused (bad node, type, or no configuration)
	closeStopping = "stopping" // the server is stopping
)

var connectedDesc = prometheus.NewDesc("osm_xds_connected_proxies",
	"Proxies connected over xDS, by flavour (envoy or grpc) and service.", []string{"flavor", "service"}, nil)

// Instrument registers the server's metrics with reg:
//
//   - osm_xds_connected_proxies{flavor,service}: proxies connected now;
//   - osm_xds_streams_opened_total and osm_xds_streams_closed_total{reason}:
//     authenticated ADS streams, and why they ended (client, revoked,
//     expired, refused, stopping);
//   - osm_xds_tls_handshakes_total{resumed}: TLS handshakes whose client
//     certificate was accepted, resumed ("true": the proxy's session
//     ticket was accepted) or full ("false"). After a restart or a
//     failover nearly all should be resumed (see internal/sessionticket).
//
// Call it before Serve.
func (s *Server) Instrument(reg prometheus.Registerer) error {
	m := &serverMetrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "osm_xds_streams_opened_total",
			Help: "Authenticated xDS (ADS) streams opened.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_xds_streams_closed_total",
			Help: "xDS streams ended, by reason: client, revoked, expired, refused, stopping.",
		}, []string{"reason"}),
	}
	for _, r := range []string{closeClient, closeRevoked, closeExpired, closeRefused, closeStopping} {
		m.closed.WithLabelValues(r)
	}
	handshakes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "osm_xds_tls_handshakes_total",
		Help: "TLS handshakes on the xDS port whose client certificate was accepted, by whether they resumed a session.",
	}, []string{"resumed"})
	m.full, m.resumed = handshakes.WithLabelValues("false"), handshakes.WithLabelValues("true")
	for _, c := range []prometheus.Collector{m.opened, m.closed, handshakes, connectedCollector{s}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.metrics = m
	s.mu.Unlock()
	return nil
}

// closeReason names why a stream whose context is ctx ended.
func closeReason(ctx context.Context, stopped bool) string {
	cause := context.Cause(ctx)
	switch {
	case stopped:
		return closeStopping
	case errors.Is(cause, ErrExpired):
		return closeExpired
	case errors.Is(cause, ErrRevoked):
		return closeRevoked
	}
	if st, ok := status.FromError(cause); ok && st.Code() != codes.OK && st.Code() != codes.Canceled {
		return closeRefused
	}
	return closeClient
}

// connectedCollector counts the connected proxies at scrape time, so a
// connect or disconnect costs nothing more.
type connectedCollector struct{ s *Server }

func (c connectedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connectedDesc }

func (c connectedCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		flavor  render.Flavor
		service mesh.MeshService
	}
	counts := map[key]int{}
	c.s.mu.Lock()
	for _, p := range c.s.proxies {
		counts[key{p.Flavor, p.Service}]++
	}
	c.s.mu.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, float64(n), k.flavor.String(), k.service.String())
	}
}

// Instrument registers the publisher's metric with reg:
// osm_xds_config_generation_seconds, the time a pass takes to render,
// validate and publish a batch of changes. The pass also marks the start of
// a change for the cache's osm_xds_change_to_ack_seconds. Call it before
// Run.
func (p *Publisher) Instrument(reg prometheus.Registerer) error {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "osm_xds_config_generation_seconds",
		Help:    "Time to render, validate and publish one batch of configuration changes.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12),
	})
	if err := reg.Register(h); err != nil {
		return err
	}
	p.generation = h
	return nil
}

// observePass is deferred by pass: it times the pass when instrumented.
func (p *Publisher) observePass(start time.Time) {
	if p.generation != nil {
		p.generation.Observe(time.Since(start).Seconds())
	}
}
