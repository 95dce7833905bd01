package api

import (
	"fmt"
	"io"
	"net/http"

	"github.com/osm-vm/osm-vm/internal/pluginhost"
)

// metrics writes Prometheus text-format gauges and counters. The set is
// small and stable, so it is written directly rather than through a client
// library.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	snap := s.catalog.Snapshot()
	endpoints := 0
	for _, svc := range snap.Services() {
		se, _ := snap.Endpoints(svc)
		endpoints += len(se.Endpoints)
	}
	metric(w, "osm_catalog_version", "gauge", "Version of the current catalog snapshot.", "", snap.Version)
	metric(w, "osm_catalog_services", "gauge", "Services known to the catalog.", "", snap.Len())
	metric(w, "osm_catalog_endpoints", "gauge", "Endpoints known to the catalog.", "", endpoints)
	statuses := s.providers.Status()
	header(w, "osm_provider_up", "gauge", "1 when the provider plugin is running and healthy.")
	for _, st := range statuses {
		up := 0
		if st.State == pluginhost.StateRunning {
			up = 1
		}
		fmt.Fprintf(w, "osm_provider_up{provider=%q,state=%q} %d\n", st.Name, st.State, up)
	}
	header(w, "osm_provider_restarts_total", "counter", "Times the provider plugin was restarted.")
	for _, st := range statuses {
		fmt.Fprintf(w, "osm_provider_restarts_total{provider=%q} %d\n", st.Name, st.Restarts)
	}
	header(w, "osm_provider_stale", "gauge", "1 while the provider's endpoints are the last seen before its plugin went away.")
	for _, st := range statuses {
		stale := 0
		if st.StaleSince != nil {
			stale = 1
		}
		fmt.Fprintf(w, "osm_provider_stale{provider=%q} %d\n", st.Name, stale)
	}
	s.readyMu.Lock()
	extra := s.extra
	s.readyMu.Unlock()
	for _, write := range extra {
		write(w)
	}
}

// Metric writes one metric with its HELP and TYPE lines, for AddMetrics.
func Metric(w io.Writer, name, typ, help string, v any) { metric(w, name, typ, help, "", v) }

func header(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func metric(w io.Writer, name, typ, help, labels string, v any) {
	header(w, name, typ, help)
	fmt.Fprintf(w, "%s%s %v\n", name, labels, v)
}
