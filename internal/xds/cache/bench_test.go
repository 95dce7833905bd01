package cache

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeSub stands in for the server's per-stream subscription state.
type fakeSub struct {
	wildcard bool
	names    map[string]struct{}
	returned map[string]string
}

func (s *fakeSub) ReturnedResources() map[string]string     { return s.returned }
func (s *fakeSub) SubscribedResources() map[string]struct{} { return s.names }
func (s *fakeSub) IsWildcard() bool                         { return s.wildcard }

const (
	benchClusters  = 1000
	benchEndpoints = 10
)

// benchEDS returns a set of benchClusters load assignments of benchEndpoints each.
func benchEDS(b *testing.B, c *Cache) *Set {
	b.Helper()
	rs := make([]*Resource, benchClusters)
	for i := range rs {
		name := fmt.Sprintf("cluster-%d", i)
		rs[i] = mustResource(b, c, name, cla(name, 10000+i*benchEndpoints, benchEndpoints))
	}
	return mustSet(b, rs...)
}

// BenchmarkPublishOneEndpointChange publishes, to 10,000 proxies that all see
// 1,000 clusters × 10 endpoints, a view in which one endpoint changed.
func BenchmarkPublishOneEndpointChange(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchPublishOneEndpointChange(b, false) })
	// With metrics, as osm-server runs: a change begun per publish round.
	b.Run("instrumented", func(b *testing.B) { benchPublishOneEndpointChange(b, true) })
}

func benchPublishOneEndpointChange(b *testing.B, instrumented bool) {
	const proxies = 10000
	c := New(testLogger(b))
	if instrumented {
		if err := c.Instrument(prometheus.NewRegistry()); err != nil {
			b.Fatal(err)
		}
	}
	set := benchEDS(b, c)
	nodes := make([]string, proxies)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("proxy-%d", i)
		mustPublish(b, c, nodes[i], resource.EndpointType, set)
	}
	before := c.Stats().Marshals
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if instrumented {
			c.BeginChange()
		}
		r := mustResource(b, c, "cluster-7", cla("cluster-7", 20000+i%1000, benchEndpoints))
		next, err := set.With(r)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range nodes {
			if err := c.Publish(n, resource.EndpointType, next); err != nil {
				b.Fatal(err)
			}
		}
		set = next
	}
	b.ReportMetric(float64(c.Stats().Marshals-before)/float64(b.N), "marshals/op")
}

// BenchmarkFanOut publishes one changed load assignment to N proxies, each
// with an open watch: "named" is gRPC's xDS client asking for that one
// cluster, "wildcard" a stream watching all 1,000.
func BenchmarkFanOut(b *testing.B) {
	for _, mode := range []string{"named", "wildcard"} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/watches=%d", mode, n), func(b *testing.B) {
				benchFanOut(b, mode == "wildcard", n)
			})
		}
	}
}

func benchFanOut(b *testing.B, wildcard bool, proxies int) {
	c := New(testLogger(b))
	set := benchEDS(b, c)
	type proxy struct {
		id  string
		sub *fakeSub
		ch  chan gcpcache.Response
	}
	ps := make([]*proxy, proxies)
	arm := func(p *proxy) {
		req := &gcpcache.Request{Node: &corev3.Node{Id: p.id}, TypeUrl: resource.EndpointType, ResponseNonce: "1"}
		if _, err := c.CreateWatch(req, p.sub, p.ch); err != nil {
			b.Fatal(err)
		}
	}
	for i := range ps {
		p := &proxy{id: fmt.Sprintf("proxy-%d", i), sub: &fakeSub{wildcard: wildcard, names: map[string]struct{}{"cluster-7": {}}}, ch: make(chan gcpcache.Response, 1)}
		if wildcard {
			p.sub.names = map[string]struct{}{}
		}
		ps[i] = p
		mustPublish(b, c, p.id, resource.EndpointType, set)
		arm(p)
		p.sub.returned = (<-p.ch).GetReturnedResources()
		arm(p)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := mustResource(b, c, "cluster-7", cla("cluster-7", 20000+i%1000, benchEndpoints))
		next, err := set.With(r)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range ps {
			if err := c.Publish(p.id, resource.EndpointType, next); err != nil {
				b.Fatal(err)
			}
		}
		set = next
		b.StopTimer()
		for _, p := range ps {
			select {
			case resp := <-p.ch:
				p.sub.returned = resp.GetReturnedResources()
			default:
				b.Fatalf("%s got no push", p.id)
			}
			arm(p)
		}
		b.StartTimer()
	}
}
