package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/osm-vm/osm-vm/internal/pluginhost"
)

// serveMetrics serves GET /metrics (Options.Metrics).
func (s *Server) serveMetrics(g prometheus.Gatherer) {
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog2promLogger{s},
		ErrorHandling: promhttp.ContinueOnError,
	}))
}

// slog2promLogger logs what promhttp could not gather.
type slog2promLogger struct{ s *Server }

func (l slog2promLogger) Println(v ...any) { l.s.log.Error("gathering metrics", "err", v) }

var (
	catalogVersionDesc   = prometheus.NewDesc("osm_catalog_version", "Version of the current catalog snapshot.", nil, nil)
	catalogServicesDesc  = prometheus.NewDesc("osm_catalog_services", "Services known to the catalog.", nil, nil)
	catalogEndpointsDesc = prometheus.NewDesc("osm_catalog_endpoints", "Endpoints known to the catalog.", nil, nil)
	providerUpDesc       = prometheus.NewDesc("osm_provider_up", "1 when the provider plugin is running and healthy.", []string{"provider"}, nil)
	providerStaleDesc    = prometheus.NewDesc("osm_provider_stale", "1 while the provider's endpoints are the last seen before its plugin went away.", []string{"provider"}, nil)
	providerRestartsDesc = prometheus.NewDesc("osm_provider_restarts_total", "Times the provider plugin was restarted.", []string{"provider"}, nil)
	providerEndpoints    = prometheus.NewDesc("osm_provider_endpoints", "Endpoints the provider reports (in the catalog now).", []string{"provider"}, nil)
	providerAgeDesc      = prometheus.NewDesc("osm_provider_seconds_since_last_update", "Seconds since the provider last sent its endpoints.", []string{"provider"}, nil)
)

// Instrument registers, with reg, the catalog's size and the providers'
// states, read at scrape time: osm_catalog_version, osm_catalog_services,
// osm_catalog_endpoints, and per provider osm_provider_up,
// osm_provider_stale, osm_provider_restarts_total, osm_provider_endpoints
// and osm_provider_seconds_since_last_update.
func (s *Server) Instrument(reg prometheus.Registerer) error {
	return reg.Register(catalogCollector{s})
}

type catalogCollector struct{ s *Server }

func (c catalogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{catalogVersionDesc, catalogServicesDesc, catalogEndpointsDesc, providerUpDesc, providerStaleDesc, providerRestartsDesc, providerEndpoints, providerAgeDesc} {
		ch <- d
	}
}

func (c catalogCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.catalog.Snapshot()
	endpoints := 0
	byProvider := map[string]int{}
	for _, svc := range snap.Services() {
		se, _ := snap.Endpoints(svc)
		endpoints += len(se.Endpoints)
		for _, e := range se.Endpoints {
			byProvider[e.Provider]++
		}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(catalogVersionDesc, float64(snap.Version))
	gauge(catalogServicesDesc, float64(snap.Len()))
	gauge(catalogEndpointsDesc, float64(endpoints))
	now := time.Now()
	for _, st := range c.s.providers.Status() {
		gauge(providerUpDesc, boolValue(st.State == pluginhost.StateRunning), st.Name)
		gauge(providerStaleDesc, boolValue(st.StaleSince != nil), st.Name)
		ch <- prometheus.MustNewConstMetric(providerRestartsDesc, prometheus.CounterValue, float64(st.Restarts), st.Name)
		gauge(providerEndpoints, float64(byProvider[st.Name]), st.Name)
		if !st.LastSync.IsZero() {
			gauge(providerAgeDesc, now.Sub(st.LastSync).Seconds(), st.Name)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// InstrumentHTTPS returns h measured into reg: osm_api_requests_total{route,code}
// and osm_api_request_duration_seconds{route} for every request to the
// HTTPS API, route being the pattern that served it (bounded: the API's
// own routes; "/" for the admin routes a request without the token did
// not reach), and osm_enrollment_duration_seconds for
// enrollments (POST /api/v1/enroll) by code.
func InstrumentHTTPS(h http.Handler, reg prometheus.Registerer) (http.Handler, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "osm_api_requests_total",
		Help: "Requests to the HTTPS API, by route and status code.",
	}, []string{"route", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "osm_api_request_duration_seconds",
		Help:    "Time to answer a request to the HTTPS API, by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
	}, []string{"route"})
	enroll := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "osm_enrollment_duration_seconds",
		Help:    "Time to answer an enrollment (POST /api/v1/enroll), by status code.",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
	}, []string{"code"})
	for _, c := range []prometheus.Collector{requests, duration, enroll} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		took := time.Since(start).Seconds()
		route := r.Pattern // set by the ServeMux that served it
		if route == "" {
			route = "unmatched"
		}
		code := strconv.Itoa(rec.code)
		requests.WithLabelValues(route, code).Inc()
		duration.WithLabelValues(route).Observe(took)
		if route == "POST /api/v1/enroll" {
			enroll.WithLabelValues(code).Observe(took)
		}
	}), nil
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
