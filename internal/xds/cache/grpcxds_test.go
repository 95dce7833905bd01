package cache

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// startBackend serves the gRPC health service on 127.0.0.1 and returns its port.
func startBackend(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		wg.Wait()
	})
	return lis.Addr().(*net.TCPAddr).Port
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGRPCXDSClient drives gRPC-Go's own xDS resolver: it makes named LDS,
// RDS, CDS and EDS requests over ADS while the node's view holds other
// clusters too, and must follow an endpoint change without reconnecting.
func TestGRPCXDSClient(t *testing.T) {
	c := New(testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var streams atomic.Int32
	cb := server.CallbackFuncs{StreamOpenFunc: func(context.Context, int64, string) error {
		streams.Add(1)
		return nil
	}}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, c, cb))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Serve(lis)
	}()
	defer func() {
		cancel()
		g.Stop()
		wg.Wait()
	}()

	port1, port2 := startBackend(t), startBackend(t)
	const node = "grpc-client"
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: "route-svc",
			ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}},
	}
	lds := mustSet(t, mustResource(t, c, "svc", &listenerv3.Listener{Name: "svc", ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, hcm)}}))
	rds := mustSet(t, mustResource(t, c, "route-svc", &routev3.RouteConfiguration{
		Name: "route-svc",
		VirtualHosts: []*routev3.VirtualHost{{Name: "svc", Domains: []string{"*"}, Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ""}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "cluster-svc"}}},
		}}}},
	}))
	cl := cluster("cluster-svc")
	cl.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	cds := mustSet(t, mustResource(t, c, "cluster-svc", cl), mustResource(t, c, "other", cluster("other")))
	eds := mustSet(t, mustResource(t, c, "cluster-svc", cla("cluster-svc", port1, 1)), mustResource(t, c, "other", cla("other", 1, 1)))
	for typ, s := range map[string]*Set{resource.ListenerType: lds, resource.RouteType: rds, resource.ClusterType: cds, resource.EndpointType: eds} {
		mustPublish(t, c, node, typ, s)
	}

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q}
	}`, lis.Addr().String(), node)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///svc", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	call := func() int {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		defer rcancel()
		var p peer.Peer
		if _, err := hc.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true)); err != nil {
			t.Fatalf("RPC through xds:///svc: %v", err)
		}
		return p.Addr.(*net.TCPAddr).Port
	}
	for range 5 {
		if got := call(); got != port1 {
			t.Fatalf("RPC reached port %d, want %d", got, port1)
		}
	}

	changed := time.Now()
	eds2, _ := eds.With(mustResource(t, c, "cluster-svc", cla("cluster-svc", port2, 1)))
	mustPublish(t, c, node, resource.EndpointType, eds2)
	testwait.For(t, "the endpoint change reaching the gRPC client", func() bool { return call() == port2 })
	t.Logf("endpoint change took effect after %v", time.Since(changed))
	if n := streams.Load(); n != 1 {
		t.Errorf("ADS streams opened = %d, want 1 (no reconnect)", n)
	}
	if n := len(c.NACKs()); n != 0 {
		t.Errorf("gRPC NACKed: %+v", c.NACKs())
	}
}
