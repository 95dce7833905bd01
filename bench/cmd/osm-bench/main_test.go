package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
