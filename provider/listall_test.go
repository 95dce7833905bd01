package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"

	providerv1 "github.com/osm-vm/osm-vm/proto/provider/v1"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// serveGRPC serves p's SDK gRPC server on a loopback port for the test
// and returns a connection to it.
func serveGRPC(t *testing.T, p provider.Provider) *grpc.ClientConn {
	return providertest.ServeGRPC(t, func(s grpc.ServiceRegistrar) { provider.RegisterServer(s, p) })
}

// stateProvider is a Provider over a State, as a plugin's is.
type stateProvider struct{ *provider.State }

func (stateProvider) Describe(context.Context) (provider.Info, error) {
	return provider.Info{Name: "test"}, nil
}
func (stateProvider) Configure(context.Context, string, []byte) error { return nil }

// manyServices is more than one ListAll message holds: 300 services of 40
// endpoints, each with a 100-byte label.
func manyServices() map[provider.Service][]provider.Endpoint {
	all := map[provider.Service][]provider.Endpoint{}
	for i := range 300 {
		svc := provider.Service{Namespace: "bench", Name: fmt.Sprintf("svc-%03d", i)}
		for j := range 40 {
			all[svc] = append(all[svc], provider.Endpoint{
				IP:     netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)}),
				Port:   8080,
				Labels: map[string]string{"note": strings.Repeat("x", 100)},
			})
		}
	}
	return all
}

// TestListAllSendsEveryServiceInChunks: ListAll over real gRPC returns
// what ListServices and ListEndpoints return, in several messages of at
// most provider.ListAllChunk bytes (but for a single larger service),
// each service once.
func TestListAllSendsEveryServiceInChunks(t *testing.T) {
	st := provider.NewState(provider.TestLog(t))
	want := manyServices()
	st.ReplaceAll(want)
	conn := serveGRPC(t, stateProvider{st})

	stream, err := providerv1.NewProviderClient(conn).ListAll(t.Context(), &providerv1.ListAllRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, seen := 0, map[string]bool{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		size := 0
		for _, se := range msg.GetServices() {
			k := se.GetService().GetNamespace() + "/" + se.GetService().GetName()
			if seen[k] {
				t.Errorf("service %s sent twice", k)
			}
			seen[k] = true
			size += len(se.String())
		}
		if n := len(msg.GetServices()); n > 1 && size > 2*provider.ListAllChunk {
			t.Errorf("message %d holds %d services in about %d bytes, over the chunk of %d", msgs, n, size, provider.ListAllChunk)
		}
	}
	if msgs < 2 || len(seen) != len(want) {
		t.Fatalf("ListAll sent %d services in %d messages; want all %d in more than one", len(seen), msgs, len(want))
	}

	got := map[provider.Service][]provider.Endpoint{}
	if err := provider.NewGRPCClient(conn).ListAll(t.Context(), func(s provider.Service, eps []provider.Endpoint) error {
		got[s] = eps
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ListAll (-want +got):\n%s", diff)
	}
}

// TestListAllOfAnEmptyProvider: no services, no error.
func TestListAllOfAnEmptyProvider(t *testing.T) {
	st := provider.NewState(provider.TestLog(t))
	st.ReplaceAll(nil)
	conn := serveGRPC(t, stateProvider{st})
	n := 0
	if err := provider.NewGRPCClient(conn).ListAll(t.Context(), func(provider.Service, []provider.Endpoint) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("ListAll of no services: %d services, err %v; want none and nil", n, err)
	}
}

// TestListAllOfAPluginBuiltBeforeIt: a plugin without ListAll answers
// UNIMPLEMENTED, which the client reports as errors.ErrUnsupported.
func TestListAllOfAPluginBuiltBeforeIt(t *testing.T) {
	conn := providertest.ServeGRPC(t, func(s grpc.ServiceRegistrar) {
		providerv1.RegisterProviderServer(s, &providerv1.UnimplementedProviderServer{})
	})
	err := provider.NewGRPCClient(conn).ListAll(t.Context(), func(provider.Service, []provider.Endpoint) error {
		t.Error("each called for a plugin without ListAll")
		return nil
	})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("ListAll of an old plugin: %v; want an error wrapping errors.ErrUnsupported", err)
	}
}

// TestListAllBeforeTheFirstRead: a provider that cannot list yet fails
// ListAll as it fails ListServices, with ErrUnavailable.
func TestListAllBeforeTheFirstRead(t *testing.T) {
	conn := serveGRPC(t, stateProvider{provider.NewState(provider.TestLog(t))})
	err := provider.NewGRPCClient(conn).ListAll(t.Context(), func(provider.Service, []provider.Endpoint) error { return nil })
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("ListAll before the first read: %v; want an error wrapping ErrUnavailable", err)
	}
}
