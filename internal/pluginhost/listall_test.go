package pluginhost

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/mesh"
	providerv1 "github.com/osm-vm/osm-vm/proto/provider/v1"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// oldPlugin serves provider.v1 as a plugin built before ListAll did:
// ListServices and ListEndpoints only, counting the calls.
type oldPlugin struct {
	providerv1.UnimplementedProviderServer
	services map[string][]string // name in namespace "old" -> endpoint addresses
	calls    int
	listAlls atomic.Int32 // ListAll calls, answered UNIMPLEMENTED
}

// ListAll answers as the generated code of a plugin built before ListAll
// did (UnimplementedProviderServer's), counting the calls.
func (p *oldPlugin) ListAll(*providerv1.ListAllRequest, grpc.ServerStreamingServer[providerv1.ListAllResponse]) error {
	p.listAlls.Add(1)
	return status.Error(codes.Unimplemented, "method ListAll not implemented")
}

func (p *oldPlugin) ListServices(context.Context, *providerv1.ListServicesRequest) (*providerv1.ListServicesResponse, error) {
	p.calls++
	resp := &providerv1.ListServicesResponse{}
	for name := range p.services {
		resp.Services = append(resp.Services, &providerv1.Service{Namespace: "old", Name: name})
	}
	return resp, nil
}

func (p *oldPlugin) ListEndpoints(_ context.Context, req *providerv1.ListEndpointsRequest) (*providerv1.ListEndpointsResponse, error) {
	p.calls++
	addrs, ok := p.services[req.GetService().GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such service")
	}
	resp := &providerv1.ListEndpointsResponse{}
	for _, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		resp.Endpoints = append(resp.Endpoints, &providerv1.Endpoint{Ip: ap.Addr().String(), Port: uint32(ap.Port())})
	}
	return resp, nil
}

// TestListingAPluginBuiltBeforeListAll: the host lists a plugin that
// answers ListAll with UNIMPLEMENTED service by service, over real gRPC,
// and asks for ListAll once per plugin process, not at every resync.
func TestListingAPluginBuiltBeforeListAll(t *testing.T) {
	old := &oldPlugin{services: map[string][]string{"a": {"192.0.2.1:80", "192.0.2.2:80"}, "b": {"192.0.2.3:8080"}}}
	conn := providertest.ServeGRPC(t, func(s grpc.ServiceRegistrar) { providerv1.RegisterProviderServer(s, old) })

	in := &instance{Instance: Instance{Name: "old"}, log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	client := provider.NewGRPCClient(conn)
	got, err := listAll(t.Context(), in, client)
	if err != nil {
		t.Fatal(err)
	}
	want := map[mesh.MeshService][]string{
		{Namespace: "old", Name: "a"}: {"192.0.2.1:80", "192.0.2.2:80"},
		{Namespace: "old", Name: "b"}: {"192.0.2.3:8080"},
	}
	gotAddrs := map[mesh.MeshService][]string{}
	for svc, eps := range got {
		for _, e := range eps {
			if e.Provider != "old" {
				t.Errorf("endpoint %s of %s has provider %q, want the instance's name", e.AddrPort(), svc, e.Provider)
			}
			gotAddrs[svc] = append(gotAddrs[svc], e.AddrPort().String())
		}
	}
	if diff := cmp.Diff(want, gotAddrs); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	if old.calls != 3 {
		t.Errorf("the old plugin answered %d calls; want ListServices and a ListEndpoints per service, 3", old.calls)
	}

	// A resync of the same plugin process lists service by service at
	// once.
	again, err := listAll(t.Context(), in, client)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(got) {
		t.Errorf("the resync listed %d services; want %d", len(again), len(got))
	}
	if n := old.listAlls.Load(); n != 1 {
		t.Errorf("the old plugin was asked for ListAll %d times over two listings; want once", n)
	}
	if old.calls != 6 {
		t.Errorf("the old plugin answered %d calls over two listings; want 6", old.calls)
	}
}
