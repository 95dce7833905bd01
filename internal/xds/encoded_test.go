package xds

import (
	"bytes"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// TestPublishedEqualsRenderedMessages: what the publisher publishes for
// W, its load assignments, clusters, route configurations, listeners
// (inbound and outbound) and service certificate secrets written as
// bytes (encoded Resources), is byte for byte what rendering each proxy
// as messages and marshalling them gives, and every one of those took
// the encoded path.
func TestPublishedEqualsRenderedMessages(t *testing.T) {
	p, _, c := benchPublisher(t, 100, 3)
	m := render.Mesh{View: p.view}
	allOutbound := 0
	defer func() {
		if allOutbound == 0 {
			t.Error("no outbound listener published: W no longer tests them")
		}
	}()
	for id, n := range p.nodes {
		if err := p.RenderError(id); err != "" {
			t.Fatalf("node %s: %s", id, err)
		}
		px := p.renderProxy(n.proxy)
		want := map[string][]byte{}
		cs := wantMarshalled(t, want, "c ", (*clusterv3.Cluster).GetName)(render.Clusters(m, px))
		es := wantMarshalled(t, want, "e ", (*endpointv3.ClusterLoadAssignment).GetClusterName)(render.LoadAssignments(m, px))
		rs := wantMarshalled(t, want, "r ", (*routev3.RouteConfiguration).GetName)(render.Routes(m, px))
		cert, err := p.certs.RequestServiceCertificate(t.Context(), p.serviceAccount(n.proxy.Service))
		if err != nil {
			t.Fatal(err)
		}
		wantMarshalled(t, want, "s ", (*tlsv3.Secret).GetName)(render.Secrets(cert.GetCertificateChain(), cert.GetPrivateKey(), p.certs.RootPEM()))
		ls := wantMarshalled(t, want, "l ", (*listenerv3.Listener).GetName)(render.Listeners(m, px))
		for _, x := range ls {
			if strings.HasPrefix(x.GetName(), "outbound|") {
				allOutbound++
			}
		}
		encoded := map[string]int{}
		view := c.View(id)
		for typeURL, prefix := range map[string]string{resource.ClusterType: "c ", resource.EndpointType: "e ", resource.ListenerType: "l ", resource.RouteType: "r ", resource.SecretType: "s "} {
			set := view[typeURL]
			if set == nil {
				t.Fatalf("node %s has no %s", id, typeURL)
			}
			if n := countPrefix(want, prefix); set.Len() != n {
				t.Errorf("node %s: %d %s published, %d rendered", id, set.Len(), typeURL, n)
			}
			for _, r := range set.Resources() {
				w, ok := want[prefix+r.Name()]
				if !ok {
					t.Errorf("node %s: published %s %q was not rendered", id, typeURL, r.Name())
					continue
				}
				if !bytes.Equal(r.Bytes(), w) {
					t.Errorf("node %s: published %s %q differs from the rendered message\n%x\n%x", id, typeURL, r.Name(), r.Bytes(), w)
				}
				if r.Encoded() {
					encoded[typeURL]++
				}
			}
		}
		if encoded[resource.ClusterType] != len(cs) || encoded[resource.EndpointType] != len(es) || encoded[resource.ListenerType] != len(ls) || encoded[resource.RouteType] != len(rs) || encoded[resource.SecretType] != 1 {
			t.Errorf("node %s: %d of %d clusters, %d of %d load assignments, %d of %d listeners, %d of %d route configurations and %d secrets encoded (want the service's)", id,
				encoded[resource.ClusterType], len(cs), encoded[resource.EndpointType], len(es), encoded[resource.ListenerType], len(ls), encoded[resource.RouteType], len(rs), encoded[resource.SecretType])
		}
	}
}

// wantMarshalled returns a function that adds what render returned,
// marshalled, to want under prefix and each one's name, and returns it.
func wantMarshalled[T proto.Message](t *testing.T, want map[string][]byte, prefix string, name func(T) string) func([]T, error) []T {
	return func(msgs []T, err error) []T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range msgs {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			want[prefix+name(x)] = b
		}
		return msgs
	}
}

func countPrefix(m map[string][]byte, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}
