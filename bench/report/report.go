// Package report owns what a run reports: the metrics (M1-M10, HA) with
// their targets and the issues' ratio targets, one server's rounds merged
// into its figures (medians, or a percentile of the pooled samples), the
// terminal table and bench/results/latest.json. It measures nothing and
// imports nothing of osm-vm or of the rest of the harness.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// MetricDef describes one reported figure.
type MetricDef struct {
	ID     string
	Name   string
	Unit   string
	Target string  // as the issue states it; "" when informational
	Limit  float64 // the target as a number, NaN when none
	Higher bool    // higher is better (M1.streams)
}

var nan = math.NaN()

// MetricDefs is every figure the harness reports, in table order.
var MetricDefs = []MetricDef{
	{"M1.streams", "M1 ADS streams held, steady state", "streams", ">= 10000", 10000, true},
	{"M1.idle_cpu", "M1 server idle CPU with every stream held", "% of a core", "< 10", 10, false},
	{"M2.p50", "M2 change -> last affected proxy ACKed (all proxies), p50", "ms", "<= 100", 100, false},
	{"M2.p99", "M2 same, p99", "ms", "<= 500", 500, false},
	{"M2.proxy_p99", "M2 change -> each proxy ACKed, p99 over proxies", "ms", "", nan, false},
	{"M2.server_cpu_ms", "M2 server CPU per change", "ms", "", nan, false},
	{"M2.fleet_cpu_ms", "M2 load generator CPU per change (shares the cores)", "ms", "", nan, false},
	{"M3.p99", "M3 change scoped to 5% of proxies -> last ACK, p99", "ms", "<= 100", 100, false},
	{"M3.server_cpu_ms", "M3 server CPU per change", "ms", "", nan, false},
	{"M3.fleet_cpu_ms", "M3 load generator CPU per change", "ms", "", nan, false},
	{"M3.affected", "M3 proxies affected by the scoped change", "proxies", "", nan, false},
	{"M4.full", "M4 config generation for W, full", "ms", "<= 50", 50, false},
	{"M4.incremental", "M4 config generation, one endpoint change", "ms", "<= 1", 1, false},
	{"M5.p50", "M5 new proxy joins the fleet -> full config ACKed, p50 (incl. mTLS)", "ms", "", nan, false},
	{"M5.p99", "M5 same, p99", "ms", "<= 200", 200, false},
	{"M5.server_cpu_ms", "M5 server CPU per join (and the leave after it)", "ms", "", nan, false},
	{"M6.all_configured_s", "M6 reconnect storm -> every proxy configured", "s", "<= 30", 30, false},
	{"M6.max_responses_per_proxy", "M6 most responses one proxy got in the storm (3 = no retries)", "responses", "", nan, false},
	{"M6.reconnects", "M6 connections the fleet had to retry (failed before configured)", "connections", "", nan, false},
	{"M6.resumed", "M6 connections whose TLS handshake resumed the proxy's session (as Envoy does)", "connections", "", nan, false},
	{"M6.responses_after_configured", "M6 responses in the second after the storm settled (retry loops)", "responses", "0", 0, false},
	{"M6.server_alive", "M6 server survived the storm (no OOM)", "bool", "1", 1, true},
	{"M6.server_cpu_s", "M6 server CPU-seconds until every proxy was configured again", "s", "", nan, false},
	{"M6.fleet_cpu_s", "M6 the fleet's (this harness's) CPU-seconds until every proxy was configured again", "s", "", nan, false},
	{"M6.server_per_fleet_cpu", "M6 server CPU / the fleet's in the same seconds (the machine's speed taken out)", "x", "", nan, false},
	{"M7.rss_per_proxy", "M7 server RSS per connected proxy", "KiB", "<= 100", 100, false},
	{"M8.bytes", "M8 bytes sent to a proxy for a one-endpoint change", "bytes", "", nan, false},
	{"M8.ratio", "M8 those bytes / the changed ClusterLoadAssignment", "x", "<= 2", 2, false},
	{"M11.p50", "M11 a policy on one service (5% of proxies call it) -> last caller ACKed, p50 (O only)", "ms", "", nan, false},
	{"M11.p99", "M11 same, p99", "ms", "<= 100", 100, false},
	{"M11.server_cpu_ms", "M11 server CPU per policy apply (API, spec, render, push)", "ms", "", nan, false},
	{"M11.bytes", "M11 bytes of the CDS response a caller got", "bytes", "", nan, false},
	{"M11.cluster_bytes", "M11 bytes of the changed cluster in it", "bytes", "", nan, false},
	{"M11.responses_per_caller", "M11 responses per caller per apply (1: the CDS response only)", "responses", "", nan, false},
	{"M11.other_responses", "M11 responses to proxies that do not call the service (only the callers change)", "responses", "0", 0, false},
	{"M9.largest_mib", "M9 largest single xDS message at 10xW (one proxy sees every service)", "MiB", "< 4", 4, false},
	{"HA.proxies", "HA proxies spread over 3 osm-server replicas (3-server Consul)", "proxies", "", nan, false},
	{"HA.apply_p50", "HA apply on replica 1 -> last proxy on replicas 2 and 3 ACKed, p50", "ms", "", nan, false},
	{"HA.apply_p99", "HA same, p99", "ms", "", nan, false},
	{"HA.failover_s", "HA kill -9 of replica 3 -> all its proxies configured on replicas 1 and 2", "s", "<= 30", 30, false},
	{"HA.failover_proxies", "HA proxies that failed over", "proxies", "", nan, false},
	{"HA.raft_per_s_rest", "HA Consul Raft writes per second at rest (all of Consul's own)", "writes/s", "", nan, false},
	{"HA.commits_per_s_rest", "HA osm-server's Consul commits per second at rest", "writes/s", "0", 0, false},
	{"HA.raft_per_change", "HA Consul Raft writes per apply (one Service)", "writes", "", nan, false},
	{"HA.commits_per_change", "HA osm-server's Consul commits per apply", "writes", "", nan, false},
	{"HA.raft_per_enrollment", "HA Consul Raft writes per enrollment (token share, enrollment, claim)", "writes", "", nan, false},
	{"HA.commits_per_enrollment", "HA osm-server's Consul commits per enrollment", "writes", "", nan, false},
	{"HA.raft_failover", "HA Consul Raft writes during the failover (reconnects)", "writes", "", nan, false},
	{"HA.commits_failover", "HA osm-server's Consul commits during the failover (each survivor's presence record)", "writes", "", nan, false},
	{"HA.rss_per_proxy", "HA replica RSS per connected proxy, mean of 3", "KiB", "", nan, false},
	{"HA.rss_per_proxy_single", "HA one osm-server (bbolt), as many proxies as a replica holds: RSS per proxy", "KiB", "", nan, false},
	{"HA.rss_per_proxy_r1", "HA replica 1 RSS per connected proxy", "KiB", "", nan, false},
	{"HA.rss_per_proxy_r2", "HA replica 2 RSS per connected proxy", "KiB", "", nan, false},
	{"HA.rss_per_proxy_r3", "HA replica 3 RSS per connected proxy", "KiB", "", nan, false},
	{"M10.restart_s", "M10 restart: stop -> the new process serves xDS (not part of the storm)", "s", "", nan, false},
	{"M10.all_configured_s", "M10 restart storm: the new process serves xDS -> every proxy configured", "s", "", nan, false},
	{"M10.server_cpu_s", "M10 server CPU-seconds until every proxy was configured", "s", "", nan, false},
	{"M10.fleet_cpu_s", "M10 the fleet's CPU-seconds until every proxy was configured", "s", "", nan, false},
	{"M10.resumed", "M10 connections that resumed their TLS session across the restart", "connections", "", nan, false},
	{"fleet_fill_s", "time to connect and configure the fleet", "s", "", nan, false},
	{"fleet_fill_server_cpu_s", "server CPU-seconds to connect and configure the fleet", "s", "", nan, false},
	{"fleet_fill_fleet_cpu_s", "the fleet's (this harness's) CPU-seconds to connect and be configured", "s", "", nan, false},
	{"fleet_fill_server_per_fleet_cpu", "fill: server CPU / the fleet's in the same seconds (the machine's speed taken out)", "x", "", nan, false},
	{"fleet_fill_reconnects", "connections retried while filling the fleet", "connections", "", nan, false},
	{"cpu_seconds", "server CPU-seconds over the whole run", "s", "", nan, false},
	{"peak_rss_mib", "server peak RSS (VmHWM)", "MiB", "", nan, false},
}

// RatioTargets are the issues' ratio goals: O/L for M2, M5, M7; O/F for M2;
// and (issue 26) O/L-mux <= 1 wherever a restart or fleet event costs.
var RatioTargets = map[string]string{
	"M2.p50": "O/L <= 0.5, O/L-mux <= 1, O/F <= 1.2", "M2.p99": "O/L <= 0.5, O/L-mux <= 1, O/F <= 1.2",
	"M5.p99": "O/L <= 0.5, O/L-mux <= 1", "M7.rss_per_proxy": "O/L <= 0.5, O/F <= 1.05",
	"M6.all_configured_s": "O/L-mux <= 1", "M6.server_cpu_s": "O/L-mux <= 1",
	"fleet_fill_s": "O/L-mux <= 1", "fleet_fill_server_cpu_s": "O/L-mux <= 1",
	"M10.all_configured_s": "O/L-mux <= 1", "M10.server_cpu_s": "O/L-mux <= 1",
}

// ServerReport is one server's outcome.
type ServerReport struct {
	Name      string             `json:"name"`
	Role      string             `json:"role"`
	Available bool               `json:"available"`
	Reason    string             `json:"reason,omitempty"`
	Values    map[string]float64 `json:"-"`
	// Samples holds every round's figures, by metric, when the run had
	// more than one (--rounds); Values holds their medians (M5's
	// percentiles: of every round's joins together, see PooledFigures).
	Samples map[string][]float64 `json:"samples,omitempty"`
	Notes   []string             `json:"notes,omitempty"`
}

// Report is bench/results/latest.json.
type Report struct {
	Date      time.Time `json:"date"`
	Machine   Machine   `json:"machine"`
	Quick     bool      `json:"quick"`
	N         int       `json:"n"`
	Services  int       `json:"services"`
	Endpoints int       `json:"endpoints"`
	Reps      int       `json:"reps"`
	Joins     int       `json:"joins"`
	// Rounds is how often each server was measured (--rounds); with more
	// than one, every figure is a median but M5's percentiles, which are
	// those of every round's joins together.
	Rounds int `json:"rounds"`
	// Pinned says how the servers and the fleet were put on CPUs
	// (--pin); empty: sharing them all.
	Pinned string `json:"pinned,omitempty"`
	// Fleet says how the harness's own collector ran (--fleet-memory).
	Fleet   string         `json:"fleet,omitempty"`
	Servers []ServerReport `json:"servers"`
	Metrics []MetricOut    `json:"metrics"`
}

type Machine struct {
	Cores int    `json:"cores"`
	CPU   string `json:"cpu"`
	Go    string `json:"go"`
}

// MetricOut is one metric in the JSON: value is O's when O ran.
type MetricOut struct {
	ID     string              `json:"id"`
	Name   string              `json:"name"`
	Unit   string              `json:"unit"`
	Target string              `json:"target,omitempty"`
	Value  *float64            `json:"value"`
	Values map[string]*float64 `json:"values"`
	OL     *float64            `json:"O/L"`
	OF     *float64            `json:"O/F"`
	OLMux  *float64            `json:"O/L-mux"`
	Ratio  string              `json:"ratio_target,omitempty"`
	Met    *bool               `json:"met,omitempty"`
	N      int                 `json:"n"`
	Cores  int                 `json:"cores"`
	Note   string              `json:"note,omitempty"`
}

func num(v float64, ok bool) *float64 {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (r *Report) Build() {
	byName := map[string]ServerReport{}
	for _, s := range r.Servers {
		byName[s.Name] = s
	}
	val := func(server, id string) (float64, bool) {
		s, ok := byName[server]
		if !ok || !s.Available {
			return 0, false
		}
		v, ok := s.Values[id]
		return v, ok && !math.IsNaN(v)
	}
	r.Metrics = r.Metrics[:0]
	for _, d := range MetricDefs {
		m := MetricOut{ID: d.ID, Name: d.Name, Unit: d.Unit, Target: d.Target, Values: map[string]*float64{},
			Ratio: RatioTargets[d.ID], N: r.N, Cores: r.Machine.Cores}
		for _, s := range r.Servers {
			m.Values[s.Name] = num(val(s.Name, d.ID))
		}
		primary := "O"
		if strings.HasPrefix(d.ID, "HA.") {
			primary = "HA" // the HA section's figures are its own server's
		}
		o, okO := val(primary, d.ID)
		m.Value = num(o, okO)
		if l, ok := val("L", d.ID); okO && ok && l != 0 {
			m.OL = num(o/l, true)
		}
		if f, ok := val("F", d.ID); okO && ok && f != 0 {
			m.OF = num(o/f, true)
		}
		if l, ok := val("L-mux", d.ID); okO && ok && l != 0 {
			m.OLMux = num(o/l, true)
		}
		if okO && !math.IsNaN(d.Limit) {
			met := o <= d.Limit
			if d.Higher {
				met = o >= d.Limit
			}
			if strings.HasPrefix(d.Target, "<") && !strings.HasPrefix(d.Target, "<=") {
				met = o < d.Limit
			}
			m.Met = &met
		}
		if strings.HasPrefix(d.ID, "M4.") {
			m.Note = "not measured: M4 is an in-process figure; see MeasureM4 in bench/metrics/m4.go"
		}
		r.Metrics = append(r.Metrics, m)
	}
}

func (r *Report) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

func fmtVal(v *float64) string {
	if v == nil {
		return "-"
	}
	switch x := *v; {
	case x == math.Trunc(x) && math.Abs(x) < 1e9:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// WriteTable prints the terminal table.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nosm-bench  %s  N=%d proxies, W=%d services x %d endpoints, %d cores (%s)\n",
		r.Date.Format(time.RFC3339), r.N, r.Services, r.Endpoints, r.Machine.Cores, r.Machine.CPU)
	if r.Rounds > 1 {
		fmt.Fprintf(w, "  every figure is the median of %d rounds (the JSON has each round's), M5's p50 and p99 those of every round's joins together\n", r.Rounds)
	}
	for _, note := range []string{r.Pinned, r.Fleet} {
		if note != "" {
			fmt.Fprintf(w, "  %s\n", note)
		}
	}
	for _, s := range r.Servers {
		if !s.Available {
			fmt.Fprintf(w, "  %s (%s): not measured: %s\n", s.Name, s.Role, s.Reason)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "metric\tunit\ttarget\t"
	for _, s := range r.Servers {
		hdr += s.Name + "\t"
	}
	fmt.Fprintln(tw, hdr+"O/L\tO/F\tO/L-mux\t")
	for _, m := range r.Metrics {
		line := fmt.Sprintf("%s\t%s\t%s\t", m.ID, m.Unit, m.Target)
		for _, s := range r.Servers {
			line += fmtVal(m.Values[s.Name]) + "\t"
		}
		fmt.Fprintln(tw, line+fmtVal(m.OL)+"\t"+fmtVal(m.OF)+"\t"+fmtVal(m.OLMux)+"\t")
	}
	tw.Flush()
	for _, s := range r.Servers {
		for _, n := range s.Notes {
			fmt.Fprintf(w, "  note %s: %s\n", s.Name, n)
		}
	}
}

// CPUModel is the first "model name" of /proc/cpuinfo.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
