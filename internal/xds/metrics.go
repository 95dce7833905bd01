package xds

// Metrics: what the publisher measures (the server's are in
// servermetrics.go). It registers with the registry main hands it; nothing
// per proxy is labelled.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
