package xds

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// workloadYAML is W's specification: n services, each allowed to call
// service 0 and four neighbours (five upstreams), as the benchmark
// harness's workload.
func workloadYAML(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n")
	b.WriteString("---\napiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: all, namespace: bench}\nspec: {matches: [{name: all, pathRegex: '/.*'}]}\n")
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: svc-%05d, namespace: bench}\nspec: {ports: [{port: 8080, appProtocol: http}]}\n", i)
		var srcs []string
		for _, c := range callersOf(i, n) {
			srcs = append(srcs, fmt.Sprintf("{kind: ServiceAccount, name: svc-%05d, namespace: bench}", c))
		}
		if len(srcs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: to-%05d, namespace: bench}\nspec:\n  destination: {kind: ServiceAccount, name: svc-%05d, namespace: bench}\n  rules: [{kind: HTTPRouteGroup, name: all}]\n  sources: [%s]\n", i, i, strings.Join(srcs, ", "))
	}
	return b.String()
}

// callersOf lists the services that call i: everyone calls service 0;
// service s also calls s+1..s+4.
func callersOf(i, n int) []int {
	if i == 0 {
		var all []int
		for s := 1; s < n; s++ {
			all = append(all, s)
		}
		return all
	}
	var out []int
	for d := 1; d <= 4; d++ {
		if s := i - d; s > 0 {
			out = append(out, s)
		}
	}
	return out
}

// benchPublisher is a publisher over W with one connected proxy per service.
func benchPublisher(b testing.TB, services, endpoints int) (*Publisher, *catalog.Catalog, *cache.Cache) {
	return publisherOver(b, services, endpoints, workloadYAML(services))
}

// specOver is a specification on st with the documents of y applied.
func specOver(t testing.TB, st store.Store, y string) *spec.Spec {
	t.Helper()
	ctx := context.Background()
	sp, err := spec.New(ctx, discard(), st)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := spec.Parse([]byte(y), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(ctx, docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return sp
}

// publisherOver is a publisher over the specification y with W's
// endpoints and one connected proxy per service.
func publisherOver(b testing.TB, services, endpoints int, y string) (*Publisher, *catalog.Catalog, *cache.Cache) {
	b.Helper()
	ctx := context.Background()
	st := store.NewMemory()
	sp := specOver(b, st, y)
	certs, err := certificate.New(ctx, discard(), st, certificate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cat := catalog.New()
	all := map[mesh.MeshService][]mesh.Endpoint{}
	for i := range services {
		var eps []mesh.Endpoint
		for e := range endpoints {
			eps = append(eps, mesh.Endpoint{IP: netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(e + 1)}), Port: 8080})
		}
		all[mesh.MeshService{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)}] = eps
	}
	cat.ReplaceProvider("bench", all)
	c := cache.New(discard())
	src := &testSpec{snap: sp.Snapshot()}
	p := NewPublisher(PublisherOptions{Log: discard(), Cache: c, Views: &testViews{catalog.NewModel(cat, src, certs.TrustDomain(), 0), src}, Certs: certs})
	for i := range services {
		svc := mesh.MeshService{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)}
		px := Proxy{NodeID: fmt.Sprintf("%08x-0000-4000-8000-000000000000.%s.bench", i, svc.Name), Service: svc, Flavor: render.Envoy, Address: netip.AddrFrom4([4]byte{10, 254, byte(i >> 8), byte(i)})}
		p.connect(px)
	}
	p.step(ctx) // connect everyone: renders each group once
	return p, cat, c
}

// BenchmarkFullGeneration: W's whole configuration (1,000 services × 10
// endpoints, one proxy each) rendered, marshalled and validated from
// scratch, nothing remembered from an earlier pass: what a server does
// for the first proxies after it starts. M4 target: ≤ 50 ms.
func BenchmarkFullGeneration(b *testing.B) { fullGeneration(b, 0) }

// BenchmarkFullGenerationOneWorker is BenchmarkFullGeneration with the
// groups rendered on one goroutine (GOMAXPROCS unchanged, so the garbage
// collector still has every core): its ratio to BenchmarkFullGeneration
// is the speed-up of rendering groups in parallel.
func BenchmarkFullGenerationOneWorker(b *testing.B) { fullGeneration(b, 1) }

// fullGeneration runs the full generation with workers goroutines (0:
// the publisher's default, GOMAXPROCS).
func fullGeneration(b *testing.B, workers int) {
	p, _, c := benchPublisher(b, 1000, 10)
	if workers > 0 {
		p.workers = workers
	}
	ctx := context.Background()
	before := c.Stats().Marshals
	cpu := startCPU()
	b.ResetTimer()
	for b.Loop() {
		p.forgetContent()
		p.renderAll(ctx)
	}
	b.ReportMetric(float64(c.Stats().Marshals-before)/float64(b.N), "marshals/op")
	cpu.report(b)
}

// BenchmarkSpecificationChange: the specification changes (one more
// service may call svc-00500, and back again): the publisher works out
// which proxies' render.Inputs changed (svc-00900's and svc-00500's) and
// re-renders those.
func BenchmarkSpecificationChange(b *testing.B) {
	p, _, c := benchPublisher(b, 1000, 10)
	ctx := context.Background()
	extra := "---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: extra, namespace: bench}\nspec:\n  destination: {kind: ServiceAccount, name: svc-00500, namespace: bench}\n  rules: [{kind: HTTPRouteGroup, name: all}]\n  sources: [{kind: ServiceAccount, name: svc-00900, namespace: bench}]\n"
	specs := [2]*spec.Snapshot{p.view.Spec(), specOver(b, store.NewMemory(), workloadYAML(1000)+extra).Snapshot()}
	before := c.Stats().Marshals
	cpu := startCPU()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p.setSpec(ctx, specs[(i+1)%2])
	}
	b.ReportMetric(float64(c.Stats().Marshals-before)/float64(b.N), "marshals/op")
	cpu.report(b)
}

// BenchmarkIncrementalEndpointChange: one endpoint of the most-called
// service changes; its ClusterLoadAssignment is rebuilt once and published
// to the 999 proxies that call it. M4 target: ≤ 1 ms, one marshal.
func BenchmarkIncrementalEndpointChange(b *testing.B) {
	p, cat, c := benchPublisher(b, 1000, 10)
	ctx := context.Background()
	hub := mesh.MeshService{Namespace: "bench", Name: "svc-00000"}
	before := c.Stats().Marshals
	cpu := startCPU()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		eps := []mesh.Endpoint{{IP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Port: uint16(9000 + i%1000)}}
		cat.SetEndpoints("bench", hub, eps)
		p.step(ctx)
	}
	b.ReportMetric(float64(c.Stats().Marshals-before)/float64(b.N), "marshals/op")
	cpu.report(b)
}

// cpuClock measures the process CPU time a benchmark's loop uses.
type cpuClock struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuClock {
	d, ok := processCPU()
	return cpuClock{d, ok}
}

// report adds cpu-ns/op: the process's CPU time (all threads, the garbage
// collector's included) per op. On a shared machine it moves much less
// than ns/op, which also counts waiting for a core.
func (c cpuClock) report(b *testing.B) {
	if d, ok := processCPU(); ok && c.ok {
		b.ReportMetric(float64(d-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkProxyJoin: one more proxy of a service joins W (one proxy per
// service already) and leaves again: its own listeners are rendered,
// validated and marshalled, the rest of its configuration is its group's.
// The per-join part of M5 and of every reconnect in M6.
func BenchmarkProxyJoin(b *testing.B) {
	p, _, _ := benchPublisher(b, 1000, 10)
	ctx := context.Background()
	cpu := startCPU()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		svc := mesh.MeshService{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i%1000)}
		px := Proxy{NodeID: fmt.Sprintf("%08x-0000-4000-8000-000000000001.%s.bench", i, svc.Name), Service: svc, Flavor: render.Envoy, Address: netip.AddrFrom4([4]byte{10, 253, byte(i >> 8), byte(i)})}
		p.connect(px)
		p.step(ctx)
		p.disconnect(px)
		p.step(ctx)
	}
	cpu.report(b)
}

// BenchmarkProxyRejoin: the only proxy of a service leaves and comes back
// (each in its own pass), as every service's proxies do in a reconnect
// storm (M6) and after a restart of a replica they fail over from: the
// publisher's part of such a reconnect when its group is gone meanwhile.
func BenchmarkProxyRejoin(b *testing.B) {
	p, _, _ := benchPublisher(b, 1000, 10)
	ctx := context.Background()
	cpu := startCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		svc := mesh.MeshService{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", 1+i%999)}
		px := Proxy{NodeID: fmt.Sprintf("%08x-0000-4000-8000-000000000000.%s.bench", 1+i%999, svc.Name), Service: svc, Flavor: render.Envoy, Address: netip.AddrFrom4([4]byte{10, 254, byte((1 + i%999) >> 8), byte(1 + i%999)})}
		p.disconnect(px)
		p.step(ctx)
		p.connect(px)
		p.step(ctx)
	}
	cpu.report(b)
}

// forgetContent drops every interned Resource, the secret sets and what
// the validators remember, so the next renderAll starts cold (benchmarks).
func (p *Publisher) forgetContent() {
	p.secrets.DropAll()
	p.interned.Reset()
	for _, v := range p.validators {
		v.Forget()
	}
}

// testSpec is a specification source a test sets directly.
type testSpec struct {
	mu   sync.Mutex
	snap *spec.Snapshot
}

func (s *testSpec) Snapshot() *spec.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

func (s *testSpec) Subscribe() (<-chan struct{}, func()) { return nil, func() {} }

// testViews is the mesh model of a publisher a test drives pass by pass.
type testViews struct {
	*catalog.Model
	spec *testSpec
}

func (p *Publisher) testViews() *testViews { return p.views.(*testViews) }

// step does what Run does after a change: the model publishes its next
// view and the publisher passes it on.
func (p *Publisher) step(ctx context.Context) {
	p.testViews().Update()
	p.pass(ctx, true, nil)
}

// setSpec makes sp the specification and steps.
func (p *Publisher) setSpec(ctx context.Context, sp *spec.Snapshot) {
	v := p.testViews()
	v.spec.mu.Lock()
	v.spec.snap = sp
	v.spec.mu.Unlock()
	p.step(ctx)
}

// connect and disconnect tell the model and the publisher of a proxy, as
// the server does.
func (p *Publisher) connect(px Proxy) {
	p.testViews().ProxyConnected(px.Service, px.Address)
	p.ProxyConnected(px)
}

func (p *Publisher) disconnect(px Proxy) {
	p.testViews().ProxyDisconnected(px.Service, px.Address)
	p.ProxyDisconnected(px)
}
