package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry returns the registry osm-server's components register their
// metrics with, holding the Go runtime's and the process's collectors.
// GET /metrics on the debug listener serves it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// instrumented is a component that registers what it measures.
type instrumented interface {
	Instrument(reg prometheus.Registerer) error
}

// instrument registers every part's metrics with reg.
func instrument(reg prometheus.Registerer, parts ...instrumented) error {
	for _, p := range parts {
		if err := p.Instrument(reg); err != nil {
			return fmt.Errorf("registering the metrics of %T: %w", p, err)
		}
	}
	return nil
}
