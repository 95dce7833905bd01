package dnspublish

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	healthy, owned, conflicts prometheus.Gauge
	failures, changes         prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_healthy",
			Help: "1 while the DNS publisher's last pass reached the DNS server and made every change, 0 while it fails (see the log or the status for the cause)."}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_names",
			Help: "Host names the DNS publisher owns (holds the ownership record of) in its zone."}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_conflicts",
			Help: "Host names the source wants published that the DNS publisher leaves alone because someone else holds them or they lie outside the zone."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "osm_dns_publisher_failures_total",
			Help: "Passes of the DNS publisher that failed (the server refused, was unreachable, or rejected the TSIG key)."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "osm_dns_publisher_changes_total",
			Help: "Record changes (create, update, delete of one name) the DNS server accepted."}),
	}
}

// Register registers the publisher's metrics with reg.
func (p *Publisher) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{p.metrics.healthy, p.metrics.owned, p.metrics.conflicts, p.metrics.failures, p.metrics.changes} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
