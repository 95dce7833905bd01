package dnspublish

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	healthy, owned, conflicts, failedNames prometheus.Gauge
	failures, changes, changeFailures      prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_healthy",
			Help: "1 while the DNS publisher's last pass reached the DNS server and made every change, 0 while it fails (see the log or the status for the cause)."}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_names",
			Help: "Host names the DNS publisher owns (holds the ownership record of) in its zone."}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_conflicts",
			Help: "Host names the source wants published that the DNS publisher leaves alone because someone else holds them or they lie outside the zone."}),
		failedNames: prometheus.NewGauge(prometheus.GaugeOpts{Name: "osm_dns_publisher_failed_names",
			Help: "Host names whose change the DNS server did not make in the DNS publisher's last pass (refused, or the name changed since the zone was read); their records are stale until a pass succeeds."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "osm_dns_publisher_failures_total",
			Help: "Passes of the DNS publisher that failed (the server refused, was unreachable, or rejected the TSIG key)."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "osm_dns_publisher_changes_total",
			Help: "Record changes (create, update, delete of one name) the DNS server accepted."}),
		changeFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "osm_dns_publisher_change_failures_total",
			Help: "Record changes (create, update, delete of one name) the DNS server did not make: refused, unreachable, or a prerequisite failed because the name changed since the zone was read."}),
	}
}

// Register registers the publisher's metrics with reg.
func (p *Publisher) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{p.metrics.healthy, p.metrics.owned, p.metrics.conflicts, p.metrics.failedNames, p.metrics.failures, p.metrics.changes, p.metrics.changeFailures} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
