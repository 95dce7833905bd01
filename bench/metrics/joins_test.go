package metrics

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJoinsOut: --joins-out appends one line per join, each server's
// after the other's, with its start in Unix microseconds and its latency
// in microseconds.
func TestJoinsOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "joins.txt")
	t0 := time.UnixMicro(1_764_640_000_000_000)
	if err := appendJoins(path, "O", []time.Time{t0, t0.Add(3 * time.Millisecond)}, []float64{2.5, 3.25}); err != nil {
		t.Fatal(err)
	}
	if err := appendJoins(path, "L-mux", []time.Time{t0.Add(time.Second)}, []float64{1.999}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"O 1764640000000000 2500",
		"O 1764640000003000 3250",
		"L-mux 1764640001000000 1999",
	}, "\n") + "\n"
	if string(b) != want {
		t.Errorf("--joins-out wrote\n%s\nwant\n%s", b, want)
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
		r := &Result{Values: c.values}
		r.SetPerFleetCPU("M6.server_per_fleet_cpu", "M6.server_cpu_s", "M6.fleet_cpu_s")
		got, ok := r.Values["M6.server_per_fleet_cpu"]
		if c.want == 0 && ok {
			t.Errorf("%s: set to %v, want it left out", c.name, got)
		}
		if c.want != 0 && (!ok || math.Abs(got-c.want) > 1e-9) {
			t.Errorf("%s: %v (set %t), want %v", c.name, got, ok, c.want)
		}
	}
}
