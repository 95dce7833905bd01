package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReportRatios checks that the table and latest.json carry O/L, O/F and
// O/L-mux, each O's value over that server's.
func TestReportRatios(t *testing.T) {
	r := Report{N: 10, Machine: Machine{Cores: 2}, Servers: []ServerReport{
		{Name: "O", Available: true, Values: map[string]float64{"M5.p99": 6}},
		{Name: "L", Available: true, Values: map[string]float64{"M5.p99": 3}},
		{Name: "L-mux", Available: true, Values: map[string]float64{"M5.p99": 4}},
		{Name: "F", Available: true, Values: map[string]float64{"M5.p99": 12}},
	}}
	r.Build()
	path := filepath.Join(t.TempDir(), "latest.json")
	if err := r.WriteJSON(path); err != nil {
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
	r.WriteTable(&tab)
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
	rounds := []Round{
		{Values: map[string]float64{"M6.server_cpu_s": 12, "M5.p99": 7}, Notes: []string{"slow"}},
		{Err: errors.New("server exited")},
		{Values: map[string]float64{"M6.server_cpu_s": 9, "M5.p99": 5}},
		{Values: map[string]float64{"M6.server_cpu_s": 10}},
	}
	sr := MergeRounds("O", "osm-server", rounds)
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
	one := MergeRounds("L-mux", "", rounds[:1])
	if one.Samples != nil || !slices.Equal(one.Notes, []string{"slow"}) || one.Values["M5.p99"] != 7 {
		t.Errorf("one round: samples %v, notes %q, M5.p99 %v; want no samples, the note as it is, 7", one.Samples, one.Notes, one.Values["M5.p99"])
	}
	// M5's percentiles are those of every round's joins together, not
	// the median of the rounds': 1-3 and 10 (a slow round) give a pooled
	// p99 of 10, where the rounds' own p99s (3 and 10) have the median 3.
	joins := []Round{
		{Values: map[string]float64{"M5.p50": 2, "M5.p99": 3}, Latencies: map[string][]float64{"M5": {1, 2, 3}}},
		{Values: map[string]float64{"M5.p50": 10, "M5.p99": 10}, Latencies: map[string][]float64{"M5": {10}}},
	}
	pooled := MergeRounds("O", "", joins)
	if pooled.Values["M5.p99"] != 10 || pooled.Values["M5.p50"] != 2 {
		t.Errorf("pooled M5 p50 / p99 = %v / %v, want 2 / 10 (of 1, 2, 3, 10)", pooled.Values["M5.p50"], pooled.Values["M5.p99"])
	}
	if got := pooled.Samples["M5.p99"]; !slices.Equal(got, []float64{3, 10}) {
		t.Errorf("M5.p99 samples = %v, want each round's own p99", got)
	}
	none := MergeRounds("F", "", rounds[1:2])
	if none.Available || none.Reason != "server exited" {
		t.Errorf("no round measured it: available %t, reason %q", none.Available, none.Reason)
	}
}
