package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestMetrics: responses and NACKs are counted by type, and a change is
// timed to the ACK of the last proxy it changed; a proxy that NACKs holds
// the change back until it ACKs a later version.
func TestMetrics(t *testing.T) {
	c, reg, conn := startInstrumented(t)
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	mustPublish(t, c, "n2", resource.ClusterType, mustSet(t, mustResource(t, c, "a", cluster("a"))))
	a1, a2 := newADSClient(t, conn, "n1"), newADSClient(t, conn, "n2")
	a1.send(resource.ClusterType, nil, "", "", nil)
	a2.send(resource.ClusterType, nil, "", "", nil)
	a1.ack(a1.recv(), nil)
	a2.ack(a2.recv(), nil)

	// A change to both: timed once, at the second ACK.
	c.BeginChange()
	mustPublish(t, c, "n1", resource.ClusterType, mustSet(t, mustResource(t, c, "b", cluster("b"))))
	mustPublish(t, c, "n2", resource.ClusterType, mustSet(t, mustResource(t, c, "b", cluster("b"))))
	r1, r2 := a1.recv(), a2.recv()
	a1.ack(r1, nil)
	// Wait (for the ACK to be recorded) on what the metric says, not on time.
	testwait.For(t, "n1's ACK recorded", func() bool { return c.Status("n1")[0].ACKed == r1.GetVersionInfo() })
	if n := testutil.CollectAndCount(reg, "osm_xds_change_to_ack_seconds"); n != 1 {
		t.Fatalf("histogram series = %d, want 1", n)
	}
	if got := histogramCount(t, reg); got != 0 {
		t.Fatalf("change observed after 1 of 2 ACKs (count %d)", got)
	}
	// A NACK is no answer: the change waits for n2 to ACK a later version.
	a2.send(resource.ClusterType, nil, r1.GetVersionInfo(), r2.GetNonce(), fmt.Errorf("cluster b: invalid"))
	testwait.For(t, "the NACK recorded", func() bool { return len(c.NACKs()) == 1 })
	if got := histogramCount(t, reg); got != 0 {
		t.Fatalf("change observed at a NACK (count %d)", got)
	}
	// The fix, to n2 alone: its ACK answers both changes.
	c.BeginChange()
	mustPublish(t, c, "n2", resource.ClusterType, mustSet(t, mustResource(t, c, "c", cluster("c"))))
	a2.ack(a2.recv(), nil)
	testwait.For(t, "two changes observed", func() bool { return histogramCount(t, reg) == 2 })

	want := `
# HELP osm_xds_nacks_total xDS responses proxies rejected (NACKs), by type; /debug/proxies shows the last rejection's message.
# TYPE osm_xds_nacks_total counter
osm_xds_nacks_total{type="cds"} 1
osm_xds_nacks_total{type="eds"} 0
osm_xds_nacks_total{type="lds"} 0
osm_xds_nacks_total{type="other"} 0
osm_xds_nacks_total{type="rds"} 0
osm_xds_nacks_total{type="sds"} 0
# HELP osm_xds_responses_total xDS responses sent to proxies, by type (cds, eds, lds, rds, sds).
# TYPE osm_xds_responses_total counter
osm_xds_responses_total{type="cds"} 5
osm_xds_responses_total{type="eds"} 0
osm_xds_responses_total{type="lds"} 0
osm_xds_responses_total{type="other"} 0
osm_xds_responses_total{type="rds"} 0
osm_xds_responses_total{type="sds"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "osm_xds_responses_total", "osm_xds_nacks_total"); err != nil {
		t.Error(err)
	}
}

// TestChangeToACKCountsJoiningProxies: a proxy that connects during a
// change is waited for (its first configuration carries the change),
// whether it asked before its view was published or after; a
// batch that only configures joining proxies is not a change; a proxy
// whose named subscription the change does not touch is not waited for.
func TestChangeToACKCountsJoiningProxies(t *testing.T) {
	c, reg, conn := startInstrumented(t)
	a := mustResource(t, c, "a", cluster("a"))
	b := mustResource(t, c, "b", cluster("b"))
	mustPublish(t, c, "old", resource.ClusterType, mustSet(t, a))
	mustPublish(t, c, "named", resource.ClusterType, mustSet(t, a))
	old, named := newADSClient(t, conn, "old"), newADSClient(t, conn, "named")
	old.send(resource.ClusterType, nil, "", "", nil)
	named.send(resource.ClusterType, []string{"a"}, "", "", nil)
	old.ack(old.recv(), nil)
	named.ack(named.recv(), []string{"a"})
	// joining has asked, and waits for its first configuration.
	joining := newADSClient(t, conn, "joining")
	joining.send(resource.ClusterType, nil, "", "", nil)
	testwait.For(t, "3 watches", func() bool { return c.Stats().Watches == 3 })

	c.BeginChange()
	// "asksLate" connects during the change too, but asks only after its
	// view was published.
	for _, n := range []string{"old", "named", "joining", "asksLate"} {
		mustPublish(t, c, n, resource.ClusterType, mustSet(t, a, b))
	}
	late := newADSClient(t, conn, "asksLate")
	late.send(resource.ClusterType, nil, "", "", nil)
	ro, rj, rl := old.recv(), joining.recv(), late.recv()
	old.ack(ro, nil)
	joining.ack(rj, nil)
	testwait.For(t, "old's and joining's ACKs recorded", func() bool {
		return c.Status("old")[0].ACKed == ro.GetVersionInfo() && c.Status("joining")[0].ACKed == rj.GetVersionInfo()
	})
	if got := histogramCount(t, reg); got != 0 {
		t.Fatalf("change observed before the proxy that asked late ACKed (count %d)", got)
	}
	late.ack(rl, nil)
	testwait.For(t, "the change observed", func() bool { return histogramCount(t, reg) == 1 })
	named.expectNothing(50 * time.Millisecond) // "named" asked for a only: not affected, not waited for

	// Only a joining proxy configured: no change observed.
	alone := newADSClient(t, conn, "alone")
	alone.send(resource.ClusterType, nil, "", "", nil)
	testwait.For(t, "5 watches", func() bool { return c.Stats().Watches == 5 })
	c.BeginChange()
	mustPublish(t, c, "alone", resource.ClusterType, mustSet(t, a))
	ra := alone.recv()
	alone.ack(ra, nil)
	testwait.For(t, "alone's ACK recorded", func() bool { return c.Status("alone")[0].ACKed == ra.GetVersionInfo() })
	if got := histogramCount(t, reg); got != 1 {
		t.Fatalf("a join alone was observed as a change (count %d, want 1)", got)
	}
}

// startInstrumented serves an instrumented cache; it returns the cache,
// its registry and a connection to the server.
func startInstrumented(t *testing.T) (*Cache, *prometheus.Registry, *grpc.ClientConn) {
	t.Helper()
	c := New(testLogger(t))
	reg := prometheus.NewPedanticRegistry()
	if err := c.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	return c, reg, startServer(t, c)
}

func histogramCount(t *testing.T, g prometheus.Gatherer) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "osm_xds_change_to_ack_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestChangeToACKDelta: a Delta stream's ACK answers a change, its NACK
// does not, and a named subscription the change does not touch is not
// waited for.
func TestChangeToACKDelta(t *testing.T) {
	c, reg, conn := startInstrumented(t)
	a := mustResource(t, c, "a", cluster("a"))
	for _, n := range []string{"wild", "named"} {
		mustPublish(t, c, n, resource.ClusterType, mustSet(t, a))
	}
	wild, named := newDeltaClient(t, conn, "wild"), newDeltaClient(t, conn, "named")
	wild.send(resource.ClusterType, nil, nil, "", nil)
	named.send(resource.ClusterType, []string{"a"}, nil, "", nil)
	wild.send(resource.ClusterType, nil, nil, wild.recv().GetNonce(), nil)
	named.send(resource.ClusterType, nil, nil, named.recv().GetNonce(), nil)
	testwait.For(t, "2 watches", func() bool { return c.Stats().Watches == 2 })

	c.BeginChange()
	for _, n := range []string{"wild", "named"} {
		mustPublish(t, c, n, resource.ClusterType, mustSet(t, a, mustResource(t, c, "b", cluster("b"))))
	}
	wild.send(resource.ClusterType, nil, nil, wild.recv().GetNonce(), fmt.Errorf("cluster b: invalid"))
	testwait.For(t, "the NACK recorded", func() bool { return len(c.NACKs()) == 1 })
	if got := histogramCount(t, reg); got != 0 {
		t.Fatalf("change observed at a Delta NACK (count %d)", got)
	}
	c.BeginChange()
	mustPublish(t, c, "wild", resource.ClusterType, mustSet(t, a, mustResource(t, c, "b", cluster("b2"))))
	wild.send(resource.ClusterType, nil, nil, wild.recv().GetNonce(), nil)
	testwait.For(t, "two changes observed", func() bool { return histogramCount(t, reg) == 2 })
	named.expectNothing(50 * time.Millisecond)
}

// TypeURLs and typeIndex name the same types in the same order.
func TestTypeURLsInTypeIndexOrder(t *testing.T) {
	for i, u := range TypeURLs {
		if got := TypeIndex([]byte(u)); got != i {
			t.Errorf("TypeIndex(%s) = %d, want %d", u, got, i)
		}
		if got := typeIndex(u); got != i {
			t.Errorf("typeIndex(%s) = %d, want %d (its place in TypeURLs)", u, got, i)
		}
	}
	if got := TypeIndex("type.googleapis.com/other"); got != -1 {
		t.Errorf("TypeIndex of another type = %d, want -1", got)
	}
	if got := typeIndex("type.googleapis.com/other"); got != len(TypeURLs) {
		t.Errorf("typeIndex of another type = %d, want %d (other)", got, len(TypeURLs))
	}
}
