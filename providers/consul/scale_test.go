//go:build consulintegration && linux

package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// The scale scenario: a catalog of services x instances, registered
// through Consul's catalog (one node per instance slot, each with a
// passing check per instance), followed by a real osm-server running the
// plugin, which reaches Consul through a counting proxy. Then, one at a
// time, an instance's check turns critical and the time until osm-server's
// endpoints API no longer lists the instance is measured, and the Consul
// requests the provider made meanwhile are counted.
//
// The figure (docs/plugins/consul.md) comes from
//
//	OSM_CONSUL_BIN=$(hack/build-consul.sh | tail -1) go test -tags consulintegration \
//	  -run '^$' -bench CheckCriticalToServer -benchtime 50x ./providers/consul/
//
// TestOneCheckReadsOneService runs the same scenario in `make test`, and
// checks the counts, not the time.

// countingProxy forwards to Consul and counts the provider's requests.
type countingProxy struct {
	addr            string
	catalog, health atomic.Int64
}

func startCountingProxy(t testing.TB, target string) *countingProxy {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4096, MaxIdleConns: 4096}
	rp.ErrorLog = log.New(io.Discard, "", 0) // a cancelled blocking query is routine
	p := &countingProxy{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/catalog/services":
			p.catalog.Add(1)
		case strings.HasPrefix(r.URL.Path, "/v1/health/service/"):
			p.health.Add(1)
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

type scaleCatalog struct {
	c                   *api.Client
	services, instances int
}

func serviceName(s int) string { return fmt.Sprintf("svc-%04d", s) }
func nodeName(i int) string    { return fmt.Sprintf("vm-%02d", i) }
func instanceAddr(s, i int) string {
	n := s*16 + i // unique per instance
	return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
}

// register writes the whole catalog in transactions of 128 operations:
// the nodes first, then their services and checks, eight transactions at
// a time (Raft batches concurrent writes).
func (sc scaleCatalog) register(t testing.TB) {
	t.Helper()
	var nodes api.TxnOps
	for i := range sc.instances {
		nodes = append(nodes, &api.TxnOp{Node: &api.NodeTxnOp{Verb: api.NodeSet, Node: api.Node{Node: nodeName(i), Address: fmt.Sprintf("192.0.2.%d", i+1)}}})
	}
	var ops api.TxnOps
	for s := range sc.services {
		for i := range sc.instances {
			id := serviceName(s)
			ops = append(ops, &api.TxnOp{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: nodeName(i),
				Service: api.AgentService{ID: id, Service: id, Address: instanceAddr(s, i), Port: 8080}}},
				sc.checkOp(s, i, api.HealthPassing))
		}
	}
	for _, all := range []api.TxnOps{nodes, ops} {
		var wg sync.WaitGroup
		var failed atomic.Value
		sem := make(chan struct{}, 8)
		for batch := range slices.Chunk(all, 128) {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if ok, resp, _, err := sc.c.Txn().Txn(batch, nil); err != nil || !ok {
					failed.Store(fmt.Sprintf("%v %+v", err, resp))
				}
			})
		}
		wg.Wait()
		if f := failed.Load(); f != nil {
			t.Fatalf("register the catalog: %s", f)
		}
	}
}

func (sc scaleCatalog) checkOp(s, i int, status string) *api.TxnOp {
	return &api.TxnOp{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{
		Node: nodeName(i), CheckID: "health-" + serviceName(s), Name: "health", Status: status, ServiceID: serviceName(s)}}}
}

func (sc scaleCatalog) setCheck(t testing.TB, s, i int, status string) {
	t.Helper()
	if ok, resp, _, err := sc.c.Txn().Txn(api.TxnOps{sc.checkOp(s, i, status)}, nil); err != nil || !ok {
		t.Fatalf("set check of %s on %s to %s: %v %+v", serviceName(s), nodeName(i), status, err, resp)
	}
}

// scaleRun is the scenario, set up and followed by osm-server.
type scaleRun struct {
	sc    scaleCatalog
	srv   *providertest.Server
	proxy *countingProxy
}

func startScale(t testing.TB, services, instances int) *scaleRun {
	t.Helper()
	bin := buildBinaries(t)
	start := time.Now()
	agent := consultest.StartDev(t, `limits { http_max_conns_per_client = 8192 }`)
	sc := scaleCatalog{c: apiClient(t, agent, ""), services: services, instances: instances}
	sc.register(t)
	registered := time.Since(start)
	proxy := startCountingProxy(t, agent.HTTPAddr)
	srv := startServer(t, bin, fmt.Sprintf("{address: %q}", proxy.addr))
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var body struct {
			Services []ServiceSummaryView `json:"services"`
		}
		err := srv.GetJSON("/api/v1/services", &body)
		full := 0
		for _, s := range body.Services {
			if s.Endpoints == instances {
				full++
			}
		}
		if err == nil && full == services {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("osm-server lists %d of %d services with %d endpoints (%v)", full, services, instances, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d services x %d instances: registered in %v, listed by osm-server %v later", services, instances,
		registered.Round(time.Millisecond), (time.Since(start) - registered).Round(time.Millisecond))
	return &scaleRun{sc: sc, srv: srv, proxy: proxy}
}

// ServiceSummaryView is a row of GET /api/v1/services.
type ServiceSummaryView struct {
	Namespace, Name string
	Endpoints       int
}

// flip turns one instance's check critical and returns how long until
// osm-server's API no longer lists it, and the provider's requests to
// Consul meanwhile (service list, health); then it turns the check
// passing again and waits for the instance to be back (not measured).
func (r *scaleRun) flip(t testing.TB, n int) (took time.Duration, catalogReads, healthReads int64) {
	t.Helper()
	s, i := (n*37)%r.sc.services, n%r.sc.instances
	addr := instanceAddr(s, i) + ":8080"
	listed := func() bool {
		got, err := r.srv.Addrs("default/" + serviceName(s))
		if err != nil {
			t.Fatalf("endpoints of %s: %v", serviceName(s), err)
		}
		return slices.Contains(strings.Split(got, ","), addr)
	}
	c0, h0 := r.proxy.catalog.Load(), r.proxy.health.Load()
	start := time.Now()
	r.sc.setCheck(t, s, i, api.HealthCritical)
	for listed() {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s of %s still listed 30s after its check turned critical", addr, serviceName(s))
		}
		time.Sleep(time.Millisecond)
	}
	took = time.Since(start)
	catalogReads, healthReads = r.proxy.catalog.Load()-c0, r.proxy.health.Load()-h0
	if b, ok := t.(*testing.B); ok {
		b.StopTimer()
		defer b.StartTimer()
	}
	r.sc.setCheck(t, s, i, api.HealthPassing)
	deadline := time.Now().Add(30 * time.Second)
	for !listed() {
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s not back 30s after its check passed again", addr, serviceName(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return took, catalogReads, healthReads
}

// TestOneCheckReadsOneService: in a catalog of 1,000 services x 10
// instances, one check turning critical reaches osm-server with a read of
// that one service, never of the service list or the other services.
func TestOneCheckReadsOneService(t *testing.T) {
	r := startScale(t, 1000, 10)
	var times []time.Duration
	for n := range 5 {
		took, catalogReads, healthReads := r.flip(t, n)
		times = append(times, took.Round(time.Millisecond))
		if catalogReads != 0 || healthReads > 3 {
			t.Errorf("flip %d: the provider read the service list %d times and services' health %d times; want 0 and at most 3 (the changed service's query, answered and asked again)", n, catalogReads, healthReads)
		}
	}
	t.Logf("check critical -> osm-server API without the instance: %v", times)
}

// BenchmarkCheckCriticalToServer measures, per op, the time from a check
// turning critical to osm-server's API no longer listing the instance, in
// a catalog of 1,000 services x 10 instances.
func BenchmarkCheckCriticalToServer(b *testing.B) {
	r := startScale(b, 1000, 10)
	var times []time.Duration
	var catalogReads, healthReads int64
	for n := 0; b.Loop(); n++ {
		took, c, h := r.flip(b, n)
		times = append(times, took)
		catalogReads += c
		healthReads += h
	}
	slices.Sort(times)
	if len(times) > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(times[len(times)/2]), "p50-ms")
		b.ReportMetric(ms(times[len(times)*9/10]), "p90-ms")
		b.ReportMetric(ms(times[len(times)-1]), "max-ms")
		b.ReportMetric(float64(catalogReads)/float64(len(times)), "catalog-reads/op")
		b.ReportMetric(float64(healthReads)/float64(len(times)), "health-reads/op")
	}
}
