package agent_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestReportsEjectedBackends: the agent reads its Envoy's /clusters and
// reports the ejected backends when they change, and an empty report once
// none is ejected any more.
func TestReportsEjectedBackends(t *testing.T) {
	h := newHarness(t)
	h.ejectionCheck = 20 * time.Millisecond
	clusters := filepath.Join(t.TempDir(), "clusters.json")
	t.Setenv(agenttest.FakeEnvoyClustersEnv, clusters)
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	waitAck(t, h)

	wait := func(what string, want meshapi.EjectionReport) {
		t.Helper()
		deadline := time.After(testwait.Bound(t))
		var last meshapi.EjectionReport
		for {
			select {
			case rep := <-h.ejections:
				if cmp.Equal(rep, want) {
					return
				}
				last = rep
			case <-deadline:
				t.Fatalf("no ejection report with %s: last %+v, want %+v", what, last, want)
			}
		}
	}
	if err := agenttest.WriteFakeClusters(clusters, []agenttest.FakeCluster{
		{Name: "default/bookwarehouse", Hosts: []agenttest.FakeHost{{Address: "10.0.0.1:14001"}, {Address: "10.0.0.2:14001", Ejected: true}}},
		{Name: "default/healthy", Hosts: []agenttest.FakeHost{{Address: "10.0.0.5:80"}}},
	}); err != nil {
		t.Fatal(err)
	}
	wait("the ejected backend", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Cluster: "default/bookwarehouse", Hosts: []string{"10.0.0.2:14001"}}}})

	if err := agenttest.WriteFakeClusters(clusters, []agenttest.FakeCluster{
		{Name: "default/bookwarehouse", Hosts: []agenttest.FakeHost{{Address: "10.0.0.1:14001"}, {Address: "10.0.0.2:14001"}}},
	}); err != nil {
		t.Fatal(err)
	}
	wait("none ejected", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{}})
}
