package certificate

// Metrics: what the CA measures. Expiries are read at scrape time from what
// this replica already holds in memory; issues, renewals and revocations
// are counted where they happen.

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the manager's counters (see Instrument).
type metrics struct {
	issued      *prometheus.CounterVec
	renewals    *prometheus.CounterVec
	revocations prometheus.Counter
}

var (
	caExpiryDesc = prometheus.NewDesc("osm_ca_expiry_seconds",
		"Seconds until the mesh CA certificate expires.", nil, nil)
	serviceExpiryDesc = prometheus.NewDesc("osm_service_certificate_expiry_seconds",
		"Seconds until each service account's certificate expires (it is rotated when a third of its lifetime is left).", []string{"service_account"}, nil)
	proxyExpiryDesc = prometheus.NewDesc("osm_proxy_certificate_expiry_seconds",
		"Distribution of the seconds until each enrolled, unrevoked proxy's current certificate expires (negative: expired).", nil, nil)
)

// proxyExpiryBuckets are the bounds of osm_proxy_certificate_expiry_seconds:
// expired, then 1 h to 30 days.
var proxyExpiryBuckets = []float64{0, 3600, 6 * 3600, 24 * 3600, 2 * 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600, 30 * 24 * 3600}

// Renewal results, the values of osm_proxy_certificate_renewals_total's
// result label.
const (
	renewOK       = "ok"
	renewTooEarly = "too_early"
	renewRefused  = "refused" // revoked, expired, unknown or not the proxy's certificate
	renewConflict = "conflict"
	renewError    = "error"
)

// Instrument registers the manager's metrics with reg:
//
//   - osm_ca_expiry_seconds, osm_service_certificate_expiry_seconds{service_account}
//     and the histogram osm_proxy_certificate_expiry_seconds (every proxy
//     record this replica holds);
//   - osm_certificates_issued_total{kind} (proxy, service: service
//     certificates count at each rotation), osm_proxy_certificate_renewals_total{result}
//     (ok, too_early, refused, conflict, error) and
//     osm_proxy_certificate_revocations_total.
//
// Call it before the manager serves.
func (m *Manager) Instrument(reg prometheus.Registerer) error {
	mm := &metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_certificates_issued_total",
			Help: "Certificates issued, by kind: proxy (at enrollment and renewal) or service (at issue and rotation).",
		}, []string{"kind"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "osm_proxy_certificate_renewals_total",
			Help: "Proxy certificate renewals, by result: ok, too_early, refused, conflict, error.",
		}, []string{"result"}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "osm_proxy_certificate_revocations_total",
			Help: "Proxies revoked.",
		}),
	}
	mm.issued.WithLabelValues("proxy")
	mm.issued.WithLabelValues("service")
	for _, r := range []string{renewOK, renewTooEarly, renewRefused, renewConflict, renewError} {
		mm.renewals.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{mm.issued, mm.renewals, mm.revocations, expiryCollector{m}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.metrics = mm
	m.mu.Unlock()
	return nil
}

// instruments returns the metrics, nil when not instrumented.
func (m *Manager) instruments() *metrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.metrics
}

func (m *Manager) countIssued(kind string) {
	if mm := m.instruments(); mm != nil {
		mm.issued.WithLabelValues(kind).Inc()
	}
}

func (m *Manager) countRevocation() {
	if mm := m.instruments(); mm != nil {
		mm.revocations.Inc()
	}
}

// countRenewal counts a renewal by the error it ended with.
func (m *Manager) countRenewal(err error) {
	mm := m.instruments()
	if mm == nil {
		return
	}
	result := renewError
	switch {
	case err == nil:
		result = renewOK
	case errors.Is(err, ErrTooEarly):
		result = renewTooEarly
	case errors.Is(err, ErrConflict):
		result = renewConflict
	case errors.Is(err, ErrRevoked), errors.Is(err, ErrNotCurrent), errors.Is(err, ErrExpired), errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalidCSR):
		result = renewRefused
	}
	mm.renewals.WithLabelValues(result).Inc()
}

// expiryCollector reads the expiries at scrape time.
type expiryCollector struct{ m *Manager }

func (c expiryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- caExpiryDesc
	ch <- serviceExpiryDesc
	ch <- proxyExpiryDesc
}

func (c expiryCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.m.now()
	ch <- prometheus.MustNewConstMetric(caExpiryDesc, prometheus.GaugeValue, c.m.ca.cert.NotAfter.Sub(now).Seconds())
	for _, e := range c.m.Expiries() {
		ch <- prometheus.MustNewConstMetric(serviceExpiryDesc, prometheus.GaugeValue, e.Expires.Sub(now).Seconds(), e.ServiceAccount)
	}
	buckets := make(map[float64]uint64, len(proxyExpiryBuckets))
	for _, b := range proxyExpiryBuckets {
		buckets[b] = 0
	}
	var count uint64
	var sum float64
	c.m.mu.Lock()
	for _, p := range c.m.proxies {
		if p.state == StateRevoked {
			continue
		}
		left := float64(p.expires - now.Unix())
		count++
		sum += left
		for _, b := range proxyExpiryBuckets {
			if left <= b {
				buckets[b]++
			}
		}
	}
	c.m.mu.Unlock()
	ch <- prometheus.MustNewConstHistogram(proxyExpiryDesc, count, sum, buckets)
}

// ServiceExpiry is when one service account's certificate expires.
type ServiceExpiry struct {
	ServiceAccount string    `json:"serviceAccount"` // namespace/name
	Expires        time.Time `json:"expires"`
	RotateAt       time.Time `json:"rotateAt"`
}

// Expiries returns when each service certificate this replica holds
// expires, and when it is due for rotation, ordered by service account.
func (m *Manager) Expiries() []ServiceExpiry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ServiceExpiry, 0, len(m.services))
	for _, s := range m.services {
		out = append(out, ServiceExpiry{
			ServiceAccount: s.rec.ServiceAccount.Namespace + "/" + s.rec.ServiceAccount.Name,
			Expires:        s.rec.Expires, RotateAt: s.rec.rotateAt(),
		})
	}
	sortExpiries(out)
	return out
}

// CAExpires returns when the mesh CA certificate expires.
func (m *Manager) CAExpires() time.Time { return m.ca.cert.NotAfter }

func sortExpiries(s []ServiceExpiry) {
	slices.SortFunc(s, func(a, b ServiceExpiry) int { return strings.Compare(a.ServiceAccount, b.ServiceAccount) })
}
