package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
