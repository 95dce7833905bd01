package agent

// Metrics: the agent's own endpoint, on loopback (metricsAddress).

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/httpserve"
)

// DefaultMetricsAddress is where the agent serves GET /metrics unless the
// config's metricsAddress says otherwise ("off" turns it off).
const DefaultMetricsAddress = "127.0.0.1:15091"

// MetricsOff as metricsAddress turns the agent's metrics endpoint off.
const MetricsOff = "off"

// validateMetricsAddress checks that addr is off or a loopback host:port:
// the endpoint has no credential, so it stays on the machine.
func validateMetricsAddress(addr string) error {
	if addr == "" || addr == MetricsOff {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metricsAddress %q: want a loopback host:port such as %s, or %q: %v", addr, DefaultMetricsAddress, MetricsOff, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("metricsAddress %q: port %q is not a number 0-65535", addr, port)
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return fmt.Errorf("metricsAddress %q: must be on loopback (127.0.0.1, [::1] or localhost): the endpoint has no credential; scrape it through a local Prometheus agent or an SSH tunnel", addr)
	}
	return nil
}

// agentMetrics are the agent's counters (see instrument).
type agentMetrics struct {
	renewals *prometheus.CounterVec
}

var (
	proxyCertExpiryDesc     = prometheus.NewDesc("osm_agent_proxy_certificate_expiry_seconds", "Seconds until this machine's proxy certificate expires.", nil, nil)
	serviceCertExpiryDesc   = prometheus.NewDesc("osm_agent_service_certificate_expiry_seconds", "Seconds until the service certificate this machine holds expires.", nil, nil)
	proxyRunningDesc        = prometheus.NewDesc("osm_agent_proxy_running", "1 while the supervised proxy (Envoy) process runs.", []string{"driver"}, nil)
	proxyRestartsDesc       = prometheus.NewDesc("osm_agent_proxy_restarts_total", "Times the supervised proxy (Envoy) was restarted after it exited.", []string{"driver"}, nil)
	serverReachableDesc     = prometheus.NewDesc("osm_agent_server_reachable", "1 when the last poll of osm-server's agent configuration succeeded.", nil, nil)
	xdsConnectedDesc        = prometheus.NewDesc("osm_agent_xds_connected", "1 while this machine's xDS connection to osm-server is up: Envoy's control_plane.connected_state (read from its admin API), or, proxyless, while an application's stream through the local xDS endpoint reaches osm-server; absent when Envoy does not answer or no application is connected.", nil, nil)
	localStreamsDesc        = prometheus.NewDesc("osm_agent_local_xds_streams", "xDS streams proxyless gRPC applications hold open to the agent's local xDS endpoint.", nil, nil)
	upstreamStreamsDesc     = prometheus.NewDesc("osm_agent_local_xds_upstream_streams", "Streams the local xDS endpoint carries to osm-server that are up (osm-server answered).", nil, nil)
	gatewayCertProblemsDesc = prometheus.NewDesc("osm_agent_gateway_certificate_problems", "On an ingress gateway machine: listeners of its Gateway whose certificate files are missing, unreadable, mismatched, expired or for another host name (osm-agent status names them).", nil, nil)
	upstreamLostDesc        = prometheus.NewDesc("osm_agent_xds_reconnects_total", "Upstream xDS streams to osm-server the local xDS endpoint lost (the server or the network ended them), each making its application's stream reconnect.", nil, nil)
)

// localXDSStats counts the local xDS endpoint's streams: it is the
// endpoint's localxds.Observer.
type localXDSStats struct {
	local, up atomic.Int64
	lost      atomic.Uint64
}

func (s *localXDSStats) LocalStream(delta int) { s.local.Add(int64(delta)) }
func (s *localXDSStats) UpstreamUp()           { s.up.Add(1) }
func (s *localXDSStats) UpstreamDown(lost bool) {
	s.up.Add(-1)
	if lost {
		s.lost.Add(1)
	}
}

// Renewal results, the values of osm_agent_certificate_renewals_total's
// result label.
const (
	renewedOK       = "ok"
	renewedTooEarly = "too_early"
	renewedError    = "error"
)

// instrument registers the agent's metrics with reg.
func (a *Agent) instrument(reg prometheus.Registerer) error {
	m := &agentMetrics{renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "osm_agent_certificate_renewals_total",
		Help: "Proxy certificate renewals this agent attempted, by result: ok, too_early, error.",
	}, []string{"result"})}
	for _, r := range []string{renewedOK, renewedTooEarly, renewedError} {
		m.renewals.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.renewals, agentCollector{a}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.metrics = m
	a.mu.Unlock()
	return nil
}

// countRenewal counts one renewal attempt.
func (a *Agent) countRenewal(result string) {
	a.mu.Lock()
	m := a.metrics
	a.mu.Unlock()
	if m != nil {
		m.renewals.WithLabelValues(result).Inc()
	}
}

// serveMetrics serves GET /metrics from the registry in Options on the
// configured loopback address until ctx is done. A failure to listen is
// logged, not fatal: the proxy matters more than its metrics.
func (a *Agent) serveMetrics(ctx context.Context) {
	addr := a.cfg.MetricsAddress
	if a.opts.Metrics == nil || addr == "" || addr == MetricsOff {
		return
	}
	if err := a.instrument(a.opts.Metrics); err != nil {
		a.log.Error("agent metrics not served", "err", err)
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		a.log.Error("agent metrics not served: set metricsAddress in the agent config to a free loopback address, or off", "address", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.opts.Metrics, promhttp.HandlerOpts{}))
	// The same bounds and Host check as osm-server's debug listener: a
	// web page rebound to loopback cannot read it from a browser here.
	srv := httpserve.Options{}.Server(httpserve.HostCheck(a.log, "agent metrics listener", addr, ln.Addr(), nil, mux))
	srv.ErrorLog = slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)
	a.log.Info("agent metrics listening", "address", ln.Addr().String(), "url", "http://"+ln.Addr().String()+"/metrics")
	if err := httpserve.Serve(ctx, "agent metrics listener", srv, ln); err != nil {
		a.log.Error("agent metrics listener failed", "err", err)
	}
}

// agentCollector reads the agent's state at scrape time.
type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{proxyCertExpiryDesc, serviceCertExpiryDesc, proxyRunningDesc, proxyRestartsDesc, serverReachableDesc, xdsConnectedDesc, localStreamsDesc, upstreamStreamsDesc, upstreamLostDesc, gatewayCertProblemsDesc} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	now := time.Now()
	_, leaf := a.identity()
	if leaf != nil {
		ch <- prometheus.MustNewConstMetric(proxyCertExpiryDesc, prometheus.GaugeValue, leaf.NotAfter.Sub(now).Seconds())
	}
	st := a.Status()
	if !st.ServiceCertificateExpires.IsZero() {
		ch <- prometheus.MustNewConstMetric(serviceCertExpiryDesc, prometheus.GaugeValue, st.ServiceCertificateExpires.Sub(now).Seconds())
	}
	reachable := 0.0
	if !st.LastConfig.IsZero() && st.LastConfigError == "" {
		reachable = 1
	}
	ch <- prometheus.MustNewConstMetric(serverReachableDesc, prometheus.GaugeValue, reachable)
	if a.cfg.Gateway != "" {
		ch <- prometheus.MustNewConstMetric(gatewayCertProblemsDesc, prometheus.GaugeValue, float64(len(st.GatewayCertificateProblems)))
	}
	local, up := a.lxStats.local.Load(), a.lxStats.up.Load()
	ch <- prometheus.MustNewConstMetric(localStreamsDesc, prometheus.GaugeValue, float64(local))
	ch <- prometheus.MustNewConstMetric(upstreamStreamsDesc, prometheus.GaugeValue, float64(up))
	ch <- prometheus.MustNewConstMetric(upstreamLostDesc, prometheus.CounterValue, float64(a.lxStats.lost.Load()))
	if a.cfg.Proxy != envoy.Name {
		// Proxyless: the applications' streams through the local endpoint.
		if local > 0 {
			ch <- prometheus.MustNewConstMetric(xdsConnectedDesc, prometheus.GaugeValue, min(float64(up), 1))
		}
		return
	}
	running := 0.0
	if st.Proxy.Running {
		running = 1
	}
	ch <- prometheus.MustNewConstMetric(proxyRunningDesc, prometheus.GaugeValue, running, st.Proxy.Driver)
	ch <- prometheus.MustNewConstMetric(proxyRestartsDesc, prometheus.CounterValue, float64(st.Proxy.Restarts), st.Proxy.Driver)
	if v, ok := a.envoyConnected(); ok {
		ch <- prometheus.MustNewConstMetric(xdsConnectedDesc, prometheus.GaugeValue, v)
	}
}

// envoyConnected reads control_plane.connected_state from Envoy's admin
// API; ok is false when Envoy does not answer within a second.
func (a *Agent) envoyConnected() (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/stats?filter=%s", a.cfg.AdminPort, `^control_plane\.connected_state$`)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ": ")
		if ok && name == "control_plane.connected_state" {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return v, err == nil
		}
	}
	return 0, false
}
