package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/bench/metrics"
	"github.com/osm-vm/osm-vm/bench/report"
)

// TestMain lets this test binary stand in for osm-bench when the harness
// starts its serve-l and serve-f subprocesses (it runs os.Executable()).
func TestMain(m *testing.M) {
	if os.Getenv("OSM_BENCH_CHILD") == "1" {
		os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// buildOSMServer builds osm-server and the static provider for O and
// returns osm-server's path.
func buildOSMServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{
		{"osm-server", "github.com/osm-vm/osm-vm/cmd/osm-server"},
		{"osm-provider-static", "github.com/osm-vm/osm-vm/providers/static"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s does not build: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "osm-server")
}

// quickRun builds osm-server and runs the harness with a tiny fleet (20
// proxies and services, 2 changes and joins), its work directory in dir,
// within timeout, and the further arguments; it returns what the run
// printed.
func quickRun(t *testing.T, dir string, timeout time.Duration, args ...string) string {
	t.Helper()
	osmServer := buildOSMServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, append([]string{"run", "--quick", "--proxies", "20", "--services", "20", "--reps", "2", "--joins", "2",
		"--osm-server", osmServer, "--work-dir", filepath.Join(dir, "work"), "--timeout", (timeout - time.Minute).String()}, args...), &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	return stdout.String()
}

// TestQuickRun runs the harness end to end with a tiny fleet against every
// server and checks that every metric was produced. No timing assertions:
// the figures belong to `make bench`.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several server processes; skipped with -short")
	}
	servers := []string{"O", "L", "L-mux", "F"}
	dir := t.TempDir()
	out := filepath.Join(dir, "latest.json")
	quickRun(t, dir, 8*time.Minute, "--servers", strings.Join(servers, ","), "--out", out, "--profile-dir", filepath.Join(dir, "profiles"))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("results: %v", err)
	}
	if got, want := rep.N, 20; got != want {
		t.Errorf("n = %d, want %d", got, want)
	}
	if rep.Fleet == "" {
		t.Error("results: no word on how the fleet's collector ran")
	}
	if rep.Machine.Cores < 1 {
		t.Errorf("machine cores = %d, want >= 1", rep.Machine.Cores)
	}
	var got []string
	for _, s := range rep.Servers {
		got = append(got, s.Name)
		if !s.Available {
			t.Errorf("server %s not measured: %s", s.Name, s.Reason)
		}
	}
	if !slices.Equal(got, servers) {
		t.Errorf("servers = %v, want %v", got, servers)
	}
	available := map[string]bool{}
	for _, s := range rep.Servers {
		available[s.Name] = s.Available
	}
	ids := map[string]bool{}
	for _, m := range rep.Metrics {
		ids[m.ID] = true
		if strings.HasPrefix(m.ID, "M4.") {
			continue // in-process, reported as not measured until internal/xds exposes the hook
		}
		if strings.HasSuffix(m.ID, "_per_fleet_cpu") {
			continue // present only past minFleetCPU, checked below
		}
		for _, s := range servers {
			if strings.HasPrefix(m.ID, "HA.") {
				continue // the HA section's, checked by TestHASection
			}
			if strings.HasPrefix(m.ID, "M11.") && s != "O" {
				// A policy is O's only: the peers have none to apply.
				if m.Values[s] != nil {
					t.Errorf("metric %s: %s has a value, want none", m.ID, s)
				}
				continue
			}
			if available[s] && m.Values[s] == nil {
				t.Errorf("metric %s: no value for server %s", m.ID, s)
			}
		}
		if m.ID == "M11.other_responses" && (m.Values["O"] == nil || *m.Values["O"] != 0) {
			t.Errorf("metric %s: O = %v, want 0: a policy on one service changed the configuration of proxies that do not call it", m.ID, m.Values["O"])
		}
		if m.N != 20 || m.Cores < 1 {
			t.Errorf("metric %s: n = %d, cores = %d; want 20 and >= 1", m.ID, m.N, m.Cores)
		}
	}
	// Each server's CPU per fleet CPU is there when the fleet's CPU is
	// enough to divide by, and is the quotient of the two.
	values := map[string]map[string]*float64{}
	for _, m := range rep.Metrics {
		values[m.ID] = m.Values
	}
	for ratio, pair := range map[string][2]string{
		"fleet_fill_server_per_fleet_cpu": {"fleet_fill_server_cpu_s", "fleet_fill_fleet_cpu_s"},
		"M6.server_per_fleet_cpu":         {"M6.server_cpu_s", "M6.fleet_cpu_s"},
	} {
		for _, s := range servers {
			server, fleet, got := values[pair[0]][s], values[pair[1]][s], values[ratio][s]
			switch {
			case !available[s] || server == nil || fleet == nil:
			case *fleet < metrics.MinFleetCPU && got != nil:
				t.Errorf("%s for %s = %v from %v s of the fleet's CPU, under %v s", ratio, s, *got, *fleet, metrics.MinFleetCPU)
			case *fleet >= metrics.MinFleetCPU && (got == nil || math.Abs(*got - *server / *fleet) > 1e-9):
				t.Errorf("%s for %s = %v, want %v / %v", ratio, s, got, *server, *fleet)
			}
		}
	}
	// The fleet resumes its TLS sessions as Envoy does: with every server
	// in M6 (the same process), and across M10's restart only with O,
	// which keeps its ticket keys in its store.
	for _, m := range rep.Metrics {
		for _, s := range servers {
			v := m.Values[s]
			if v == nil || !available[s] {
				continue
			}
			switch want := 0.0; m.ID {
			case "M6.resumed":
				if *v != 20 {
					t.Errorf("%s: %s resumed %v of 20 sessions in M6, want all", m.ID, s, *v)
				}
			case "M10.resumed":
				if s == "O" {
					want = 20
				}
				if *v != want {
					t.Errorf("%s: %s resumed %v of 20 sessions across the restart, want %v", m.ID, s, *v, want)
				}
			}
		}
	}
	for _, d := range report.MetricDefs {
		if !ids[d.ID] {
			t.Errorf("metric %s missing from the results", d.ID)
		}
	}
	// --profile-dir: every server's memory and MemStats, its CPU and
	// allocations in the fill, the changes, the joins and the storm, the
	// Fleet's CPU beside each, and O's other profiles.
	for _, s := range servers {
		files := []string{"status.txt", "smaps_rollup.txt", "heap.txt", "fill.fleet.heap.pb.gz"}
		for _, w := range []string{"fill", "M2", "M3", "M5", "M6", "M10"} {
			files = append(files, w+".cpu.pb.gz", w+".fleet.cpu.pb.gz", w+".allocs-start.pb.gz", w+".allocs.pb.gz")
		}
		if s == "O" {
			files = append(files, "heap.pb.gz", "goroutine.txt", "proxies.json", "idle.cpu.pb.gz", "idle.fleet.cpu.pb.gz", "idle.start")
		}
		for _, f := range files {
			if fi, err := os.Stat(filepath.Join(dir, "profiles", s+"-"+f)); err != nil || fi.Size() == 0 {
				t.Errorf("--profile-dir: %s-%s missing or empty (%v)", s, f, err)
			}
		}
	}
}

func TestParseRunFlagsMetrics(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    map[string]bool // nil: every metric
		wantErr string
	}{
		{args: nil},
		{args: []string{"--metrics", "M3"}, want: map[string]bool{"M3": true}},
		{args: []string{"--metrics", "M2, M9"}, want: map[string]bool{"M2": true, "M9": true}},
		{args: []string{"--metrics", "M4"}, wantErr: "M4 is measured by Go benchmarks"},
		{args: []string{"--metrics", "M10"}, want: map[string]bool{"M10": true}},
		{args: []string{"--metrics", "M11"}, want: map[string]bool{"M11": true}},
		{args: []string{"--metrics", "M12"}, wantErr: `unknown metric "M12"`},
		{args: []string{"--log-level", "loud"}, wantErr: `--log-level "loud"`},
		{args: []string{"--rounds", "0"}, wantErr: "--rounds 0: want 1 or more"},
	} {
		c, err := parseRunFlags(tc.args, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseRunFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseRunFlags(%q): %v", tc.args, err)
			continue
		}
		if !maps.Equal(c.plan.Metrics, tc.want) || (c.plan.Metrics == nil) != (tc.want == nil) {
			t.Errorf("parseRunFlags(%q) metrics = %v, want %v", tc.args, c.plan.Metrics, tc.want)
		}
		for _, id := range []string{"M1", "M2", "M3", "M9"} {
			if got, want := c.plan.Want(id), tc.want == nil || tc.want[id]; got != want {
				t.Errorf("parseRunFlags(%q): want(%s) = %t, want %t", tc.args, id, got, want)
			}
		}
	}
}

// TestTraceDir runs the harness with --trace-dir against O and checks that
// each traced metric left its runtime trace, its CPU profile and a pair of
// heap profiles between which the server allocated: the allocations a
// window of time alone would show only if a collection happened to end in
// it.
func TestTraceDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts osm-server; skipped with -short")
	}
	dir := t.TempDir()
	traces := filepath.Join(dir, "trace")
	stdout := quickRun(t, dir, 4*time.Minute, "--servers", "O", "--metrics", "M2,M5", "--out", filepath.Join(dir, "latest.json"), "--trace-dir", traces)
	if strings.Contains(stdout, "trace:") {
		t.Errorf("the run noted a trace error:\n%s", stdout)
	}
	accounted := regexp.MustCompile(`Showing nodes accounting for ([0-9.]+)([kMG]?B)?`)
	for _, metric := range []string{"M2", "M5"} {
		for _, f := range []string{".trace", ".cpu.pb.gz", ".allocs-start.pb.gz", ".allocs.pb.gz"} {
			if fi, err := os.Stat(filepath.Join(traces, "O-"+metric+f)); err != nil || fi.Size() == 0 {
				t.Errorf("--trace-dir: O-%s%s missing or empty (%v)", metric, f, err)
			}
		}
		base := filepath.Join(traces, "O-"+metric)
		out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=alloc_space",
			"-diff_base", base+".allocs-start.pb.gz", base+".allocs.pb.gz").CombinedOutput()
		if err != nil {
			t.Errorf("go tool pprof %s: %v\n%s", metric, err, out)
			continue
		}
		m := accounted.FindSubmatch(out)
		if m == nil {
			t.Errorf("%s: go tool pprof printed no total:\n%s", metric, out)
			continue
		}
		if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v <= 0 {
			t.Errorf("%s: no allocations between the two heap profiles (%s):\n%s", metric, m[0], out)
		}
	}
}
