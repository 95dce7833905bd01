//go:build polyglot

package main

import (
	"os"
	"testing"
)

// TestPolyglotDemo runs the demo with the Python (gRPC C-core) and Node
// (grpc-js) bookbuyers beside the Go apps, as `make demo` does where they
// are installed (`make test` installs them and sets OSM_NODE_MODULES): each
// buys from both bookstore versions about 80/20, without errors to speak of.
func TestPolyglotDemo(t *testing.T) {
	mods := os.Getenv("OSM_NODE_MODULES")
	if mods == "" {
		t.Fatal("OSM_NODE_MODULES is not set: run it through `make test` (hack/node-modules.sh installs them)")
	}
	got, _ := runDemo(t, "-proxy", "none", "-python", "/usr/bin/python3", "-node-modules", mods)
	checkTraffic(t, got)
	for _, m := range polyglotMachines {
		c := got.Polyglot[m.name()]
		total := c["v1"] + c["v2"]
		if total < 50 || c["v2"] == 0 {
			t.Errorf("%s (%s) bought v1 %d, v2 %d: want at least 50 purchases from both versions", m.name(), m.lang, c["v1"], c["v2"])
			continue
		}
		if share := float64(c["v1"]) / float64(total); share < 0.65 || share > 0.92 {
			t.Errorf("%s's v1 share = %.2f, want about 0.8", m.name(), share)
		}
		if c["errors"] > total/10 {
			t.Errorf("%s had %d errors in %d purchases, want under 10%%", m.name(), c["errors"], total)
		}
	}
	checkProcesses(t, got, 15, nil) // server, 7 agents, 7 apps
	checkAgentMetrics(t, got, "bookbuyer", "bookbuyer-node", "bookbuyer-python", "bookstore-v1", "bookstore-v2", "bookthief", "bookwarehouse")
}
