package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	providerv1 "github.com/osm-vm/osm-vm/proto/provider/v1"
)

// serveGRPC serves srv on a loopback port for the test and returns a
// connection to it.
func serveGRPC(t *testing.T, srv providerv1.ProviderServer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	providerv1.RegisterProviderServer(s, srv)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// stateProvider is a Provider over a State, as a plugin's is.
type stateProvider struct{ *State }

func (stateProvider) Describe(context.Context) (Info, error)          { return Info{Name: "test"}, nil }
func (stateProvider) Configure(context.Context, string, []byte) error { return nil }

// manyServices is more than one ListAll message holds: 300 services of 40
// endpoints, each with a 100-byte label.
func manyServices() map[Service][]Endpoint {
	all := map[Service][]Endpoint{}
	for i := range 300 {
		svc := Service{Namespace: "bench", Name: fmt.Sprintf("svc-%03d", i)}
		for j := range 40 {
			all[svc] = append(all[svc], Endpoint{
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
// most listAllChunk bytes (but for a single larger service), each service
// once.
func TestListAllSendsEveryServiceInChunks(t *testing.T) {
	st := NewState(testLog(t))
	want := manyServices()
	st.ReplaceAll(want)
	conn := serveGRPC(t, &grpcServer{impl: stateProvider{st}})

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
		if n := len(msg.GetServices()); n > 1 && size > 2*listAllChunk {
			t.Errorf("message %d holds %d services in about %d bytes, over the chunk of %d", msgs, n, size, listAllChunk)
		}
	}
	if msgs < 2 || len(seen) != len(want) {
		t.Fatalf("ListAll sent %d services in %d messages; want all %d in more than one", len(seen), msgs, len(want))
	}

	got := map[Service][]Endpoint{}
	if err := NewGRPCClient(conn).ListAll(t.Context(), func(s Service, eps []Endpoint) error {
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
	st := NewState(testLog(t))
	st.ReplaceAll(nil)
	conn := serveGRPC(t, &grpcServer{impl: stateProvider{st}})
	n := 0
	if err := NewGRPCClient(conn).ListAll(t.Context(), func(Service, []Endpoint) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("ListAll of no services: %d services, err %v; want none and nil", n, err)
	}
}

// TestListAllOfAPluginBuiltBeforeIt: a plugin without ListAll answers
// UNIMPLEMENTED, which the client reports as errors.ErrUnsupported.
func TestListAllOfAPluginBuiltBeforeIt(t *testing.T) {
	conn := serveGRPC(t, &providerv1.UnimplementedProviderServer{})
	err := NewGRPCClient(conn).ListAll(t.Context(), func(Service, []Endpoint) error {
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
	conn := serveGRPC(t, &grpcServer{impl: stateProvider{NewState(testLog(t))}})
	err := NewGRPCClient(conn).ListAll(t.Context(), func(Service, []Endpoint) error { return nil })
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ListAll before the first read: %v; want an error wrapping ErrUnavailable", err)
	}
}
