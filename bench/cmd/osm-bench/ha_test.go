//go:build consulintegration

package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/bench/report"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
)

// TestHASection runs the HA section end to end, twice (--rounds 2), with
// 30 proxies over three replicas on a real three-server Consul, and checks
// that every HA figure was produced, that a failover and the applies were
// measured in each round (a round on the last one's data would apply
// nothing new), and that osm-server wrote nothing to Consul at rest and
// only the survivors' presence records in the failover. No timing
// assertions: the figures belong to `make bench`.
func TestHASection(t *testing.T) {
	osmServer := buildOSMServer(t)
	consul := consultest.Binary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "latest.json")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	err := run(ctx, []string{"run", "--quick", "--servers", "HA", "--rounds", "2", "--consul", consul, "--ha-proxies", "30", "--ha-applies", "3",
		"--osm-server", osmServer, "--out", out, "--work-dir", filepath.Join(dir, "work"), "--timeout", "3m"}, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("results: %v", err)
	}
	if len(rep.Servers) != 1 || !rep.Servers[0].Available {
		t.Fatalf("servers %+v, want HA measured\nstderr:\n%s", rep.Servers, stderr.String())
	}
	got := map[string]float64{}
	for _, m := range rep.Metrics {
		if !strings.HasPrefix(m.ID, "HA.") {
			continue
		}
		if m.Value == nil {
			t.Errorf("metric %s: no value", m.ID)
			continue
		}
		got[m.ID] = *m.Value
	}
	for id, want := range map[string]float64{"HA.proxies": 30, "HA.failover_proxies": 10, "HA.commits_per_s_rest": 0} {
		if v, ok := got[id]; ok && v != want {
			t.Errorf("%s = %v, want %v", id, v, want)
		}
	}
	// A failover writes only the two survivors' presence records
	// (internal/presence): each at most once a second while its proxies
	// arrive, and once after.
	if v, bound := got["HA.commits_failover"], 2*(2+math.Ceil(got["HA.failover_s"])); v > bound {
		t.Errorf("HA.commits_failover = %v over a failover of %.1f s, want at most %v (a presence record per survivor per second)", v, got["HA.failover_s"], bound)
	}
	if v := got["HA.apply_p50"]; v <= 0 {
		t.Errorf("HA.apply_p50 = %v: no apply was measured", v)
	}
	if rounds := rep.Servers[0].Samples["HA.apply_p50"]; len(rounds) != 2 || slices.Contains(rounds, 0) {
		t.Errorf("HA.apply_p50 of each round = %v, want two rounds, each with its applies measured", rounds)
	}
	if n := len(rep.Servers[0].Notes); n > 0 {
		t.Errorf("notes: %v", rep.Servers[0].Notes)
	}
}
