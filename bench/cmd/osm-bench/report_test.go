package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReportRatios checks that the table and latest.json carry O/L, O/F and
// O/L-mux, each O's value over that server's.
func TestReportRatios(t *testing.T) {
	r := report{N: 10, Machine: machine{Cores: 2}, Servers: []serverReport{
		{Name: "O", Available: true, Values: map[string]float64{"M5.p99": 6}},
		{Name: "L", Available: true, Values: map[string]float64{"M5.p99": 3}},
		{Name: "L-mux", Available: true, Values: map[string]float64{"M5.p99": 4}},
		{Name: "F", Available: true, Values: map[string]float64{"M5.p99": 12}},
	}}
	r.build()
	path := filepath.Join(t.TempDir(), "latest.json")
	if err := r.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metrics []map[string]any `json:"metrics"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var m5 map[string]any
	for _, m := range got.Metrics {
		if m["id"] == "M5.p99" {
			m5 = m
		}
	}
	if m5 == nil {
		t.Fatalf("latest.json: no M5.p99 in %s", b)
	}
	for key, want := range map[string]float64{"O/L": 2, "O/F": 0.5, "O/L-mux": 1.5} {
		if got, ok := m5[key].(float64); !ok || got != want {
			t.Errorf("latest.json M5.p99 %q = %v, want %v", key, m5[key], want)
		}
	}

	var tab bytes.Buffer
	r.writeTable(&tab)
	lines := strings.Split(tab.String(), "\n")
	var header, row []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "metric" {
			header = f
		}
		if len(f) > 0 && f[0] == "M5.p99" {
			row = f
		}
	}
	if len(header) < 3 || strings.Join(header[len(header)-3:], " ") != "O/L O/F O/L-mux" {
		t.Fatalf("table header = %q, want it to end in O/L O/F O/L-mux", header)
	}
	if len(row) < 3 || strings.Join(row[len(row)-3:], " ") != "2 0.500 1.50" {
		t.Errorf("table M5.p99 row = %q, want it to end in 2 0.500 1.50", row)
	}
}

// TestMergeRounds: with --rounds, each figure is the median of the rounds
// that measured it, every round's figures are kept as samples, notes name
// their round, and a server one round could not measure is still reported.
func TestMergeRounds(t *testing.T) {
	rounds := []roundResult{
		{values: map[string]float64{"M6.server_cpu_s": 12, "M5.p99": 7}, notes: []string{"slow"}},
		{err: errors.New("server exited")},
		{values: map[string]float64{"M6.server_cpu_s": 9, "M5.p99": 5}},
		{values: map[string]float64{"M6.server_cpu_s": 10}},
	}
	sr := mergeRounds("O", "osm-server", rounds)
	if !sr.Available {
		t.Fatalf("not available: %s", sr.Reason)
	}
	// 9, 10, 12: 10; 5, 7: the lower middle, 5.
	if got := sr.Values["M6.server_cpu_s"]; got != 10 {
		t.Errorf("M6.server_cpu_s = %v, want the median 10", got)
	}
	if got := sr.Values["M5.p99"]; got != 5 {
		t.Errorf("M5.p99 = %v, want 5 (the lower middle of two)", got)
	}
	if got := sr.Samples["M6.server_cpu_s"]; !slices.Equal(got, []float64{12, 9, 10}) {
		t.Errorf("samples = %v, want every round's in order", got)
	}
	if want := []string{"round 1: slow", "round 2: not measured: server exited"}; !slices.Equal(sr.Notes, want) {
		t.Errorf("notes = %q, want %q", sr.Notes, want)
	}
	one := mergeRounds("L-mux", "", rounds[:1])
	if one.Samples != nil || !slices.Equal(one.Notes, []string{"slow"}) || one.Values["M5.p99"] != 7 {
		t.Errorf("one round: samples %v, notes %q, M5.p99 %v; want no samples, the note as it is, 7", one.Samples, one.Notes, one.Values["M5.p99"])
	}
	// M5's percentiles are those of every round's joins together, not
	// the median of the rounds': 1-3 and 10 (a slow round) give a pooled
	// p99 of 10, where the rounds' own p99s (3 and 10) have the median 3.
	joins := []roundResult{
		{values: map[string]float64{"M5.p50": 2, "M5.p99": 3}, latencies: map[string][]float64{"M5": {1, 2, 3}}},
		{values: map[string]float64{"M5.p50": 10, "M5.p99": 10}, latencies: map[string][]float64{"M5": {10}}},
	}
	pooled := mergeRounds("O", "", joins)
	if pooled.Values["M5.p99"] != 10 || pooled.Values["M5.p50"] != 2 {
		t.Errorf("pooled M5 p50 / p99 = %v / %v, want 2 / 10 (of 1, 2, 3, 10)", pooled.Values["M5.p50"], pooled.Values["M5.p99"])
	}
	if got := pooled.Samples["M5.p99"]; !slices.Equal(got, []float64{3, 10}) {
		t.Errorf("M5.p99 samples = %v, want each round's own p99", got)
	}
	none := mergeRounds("F", "", rounds[1:2])
	if none.Available || none.Reason != "server exited" {
		t.Errorf("no round measured it: available %t, reason %q", none.Available, none.Reason)
	}
}

// TestLogTail: the last lines of a server log, all of a short one, and
// the error for a missing file.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := logTail(path, 2); got != "b\nc" {
		t.Errorf("logTail(2) = %q, want %q", got, "b\nc")
	}
	if got := logTail(path, 5); got != "a\nb\nc" {
		t.Errorf("logTail(5) = %q, want the whole file", got)
	}
	if got := logTail(filepath.Join(t.TempDir(), "none"), 2); !strings.Contains(got, "no such file") {
		t.Errorf("logTail of a missing file = %q, want the error", got)
	}
}

// A server's CPU per fleet CPU is the quotient of the two, and is left
// out when either is missing or the fleet's is too few ticks to divide by.
func TestServerCPUPerFleetCPU(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]float64
		want   float64 // 0: left out
	}{
		{"both", map[string]float64{"M6.server_cpu_s": 6.9, "M6.fleet_cpu_s": 11.5}, 0.6},
		{"a fleet too quick to divide by", map[string]float64{"M6.server_cpu_s": 0.02, "M6.fleet_cpu_s": 0.01}, 0},
		{"no server CPU", map[string]float64{"M6.fleet_cpu_s": 11.5}, 0},
		{"no fleet CPU", map[string]float64{"M6.server_cpu_s": 6.9}, 0},
	} {
		r := &result{Values: c.values}
		r.setPerFleetCPU("M6.server_per_fleet_cpu", "M6.server_cpu_s", "M6.fleet_cpu_s")
		got, ok := r.Values["M6.server_per_fleet_cpu"]
		if c.want == 0 && ok {
			t.Errorf("%s: set to %v, want it left out", c.name, got)
		}
		if c.want != 0 && (!ok || math.Abs(got-c.want) > 1e-9) {
			t.Errorf("%s: %v (set %t), want %v", c.name, got, ok, c.want)
		}
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	servers := []string{"O", "L-mux", "F"}
	var got []string
	for round := 1; round <= 3; round++ {
		got = append(got, strings.Join(roundOrder(servers, round), ","))
	}
	if want := []string{"O,L-mux,F", "F,L-mux,O", "O,L-mux,F"}; !slices.Equal(got, want) {
		t.Errorf("orders %q; want %q", got, want)
	}
	if strings.Join(servers, ",") != "O,L-mux,F" {
		t.Errorf("roundOrder changed its argument: %q", servers)
	}
}
