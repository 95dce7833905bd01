package xds

import (
	"bytes"
	"strings"
	"testing"

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
		add := func(name string, msg proto.Message) {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			want[name] = b
		}
		cs, err := render.Clusters(m, px)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range cs {
			add("c "+x.GetName(), x)
		}
		es, err := render.LoadAssignments(m, px)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range es {
			add("e "+x.GetClusterName(), x)
		}
		rs, err := render.Routes(m, px)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rs {
			add("r "+x.GetName(), x)
		}
		cert, err := p.certs.RequestServiceCertificate(t.Context(), p.serviceAccount(n.proxy.Service))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := render.Secrets(cert.GetCertificateChain(), cert.GetPrivateKey(), p.certs.RootPEM())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ss {
			add("s "+x.GetName(), x)
		}
		ls, err := render.Listeners(m, px)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ls {
			add("l "+x.GetName(), x)
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

func countPrefix(m map[string][]byte, prefix string) int {
	n := 0
	for k := range m {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}
