package xds

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestChangeToACKWithGRPCClient: gRPC-Go's xDS client, as bookbuyer,
// ACKs what the server sends; a TrafficSplit change is observed once in
// osm_xds_change_to_ack_seconds, after the client took it, with a value
// no larger than the time from before the apply to the observation.
func TestChangeToACKWithGRPCClient(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	e := startEnvMetrics(t, 0, reg)
	applyYAML(t, e.spec, "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n")
	storeSA := mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}
	v1, v2 := e.startBackend(t, storeSA), e.startBackend(t, storeSA)
	lo := netip.MustParseAddr("127.0.0.1")
	for name, port := range map[string]uint16{"bookstore-v1": v1, "bookstore-v2": v2, "bookstore": v1} {
		e.cat.SetEndpoints("test", mesh.MeshService{Namespace: "default", Name: name}, []mesh.Endpoint{{IP: lo, Port: port}})
	}
	rb, err := xds.NewXDSResolverWithConfigForTesting(e.grpcBootstrap(t, "bookbuyer", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(dialXDS(t, rb, "xds:///bookstore.default.mesh:14001"))
	// toV1 runs n RPCs and counts those that reached bookstore-v1.
	toV1 := func(n int) int {
		t.Helper()
		hits := 0
		for range n {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			var p peer.Peer
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("RPC via xds:///bookstore.default.mesh:14001: %v", err)
			}
			if uint16(p.Addr.(*net.TCPAddr).Port) == v1 {
				hits++
			}
		}
		return hits
	}
	toV1(20)
	// The client has taken and ACKed its whole configuration: wait until
	// nothing the cache sent it is unacknowledged.
	testwait.For(t, "bookbuyer ACKed everything sent", func() bool {
		ps := e.srv.Proxies()
		if len(ps) != 1 {
			return false
		}
		st := e.cache.Status(ps[0].NodeID)
		for _, ts := range st {
			if ts.Sent != ts.ACKed {
				return false
			}
		}
		return len(st) == 4
	})
	count0, sum0 := changeToACK(t, reg)

	start := time.Now()
	applyYAML(t, e.spec, "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: bookstore-split, namespace: default}\nspec:\n  service: bookstore\n  backends: [{service: bookstore-v1, weight: 0}, {service: bookstore-v2, weight: 100}]\n")
	testwait.For(t, "the client routes by the new split", func() bool { return toV1(20) == 0 })
	testwait.For(t, "the change observed", func() bool { n, _ := changeToACK(t, reg); return n > count0 })
	bound := time.Since(start).Seconds()
	count, sum := changeToACK(t, reg)
	if count != count0+1 {
		t.Errorf("osm_xds_change_to_ack_seconds count went from %d to %d, want one observation for one change", count0, count)
	}
	if got := sum - sum0; got <= 0 || got > bound {
		t.Errorf("observed %.4fs for the change, want within (0, %.4fs]: the time from the apply to the client's ACK", got, bound)
	}
	t.Logf("change to ACK: %.1f ms (bound %.1f ms)", 1000*(sum-sum0), 1000*bound)
}

// changeToACK returns the count and sum of osm_xds_change_to_ack_seconds.
func changeToACK(t *testing.T, g prometheus.Gatherer) (uint64, float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "osm_xds_change_to_ack_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("no osm_xds_change_to_ack_seconds")
	return 0, 0
}
