//go:build consulintegration

package main

// Integration tests against a real Consul agent (consul agent -dev on
// loopback). Run with
//
//	OSM_CONSUL_BIN=$(hack/build-consul.sh | tail -1) \
//	  go test -race -tags consulintegration ./providers/consul/

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// realHarness runs the conformance suite against one real dev agent. Each
// case gets its own Consul service names ("c<N>-svc-a"), mapped by
// serviceMap to the suite's mesh services, so cases never see each
// other's leftovers. The Backend registers instances through the agent
// API with TTL checks; it breaks the source by stopping Consul, and
// repairs it by restarting Consul (which comes back empty, its index
// starting again) and registering again what it had.
type realHarness struct {
	agent  *consultest.Agent
	plugin string // path of the built osm-provider-consul; "" runs in-process
	cases  *atomic.Int32
}

func (h realHarness) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	prefix := fmt.Sprintf("c%d-", h.cases.Add(1))
	names := []string{"svc-a", "svc-b", "probe"}
	services, serviceMap := []string{}, map[string]string{}
	for _, n := range names {
		services = append(services, prefix+n)
		serviceMap[prefix+n] = "conformance/" + n
	}
	cfg, err := json.Marshal(map[string]any{"address": h.agent.HTTPAddr, "services": services, "serviceMap": serviceMap})
	if err != nil {
		t.Fatal(err)
	}
	var p provider.Provider
	if h.plugin == "" {
		cp := newProvider(testLogger(t))
		t.Cleanup(func() { cp.Close() })
		p = cp
	} else {
		p = providertest.StartPlugin(t, exec.Command(h.plugin))
	}
	if err := p.Configure(ctx, "it", cfg); err != nil {
		t.Fatalf("Configure(%s): %v", cfg, err)
	}
	return p, &agentBackend{t: t, agent: h.agent, prefix: prefix, have: map[provider.Service]map[string]instanceSpec{}}
}

// agentBackend registers a mesh service's endpoints as instances of the
// Consul service prefix+name, one per endpoint, with passing TTL checks.
type agentBackend struct {
	t      *testing.T
	agent  *consultest.Agent
	prefix string

	mu   sync.Mutex
	have map[provider.Service]map[string]instanceSpec // by service ID
}

func (b *agentBackend) SetEndpoints(_ context.Context, svc provider.Service, eps []provider.Endpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := apiClient(b.t, b.agent, "")
	name := b.prefix + svc.Name
	next := map[string]instanceSpec{}
	for _, e := range eps {
		in := instanceSpec{service: name, id: fmt.Sprintf("%s-%s-%d", name, e.IP, e.Port), addr: e.IP.String(), port: int(e.Port)}
		next[in.id] = in
		register(b.t, c, in, api.HealthPassing)
	}
	for id := range b.have[svc] {
		if _, ok := next[id]; !ok {
			if err := c.Agent().ServiceDeregister(id); err != nil {
				return err
			}
		}
	}
	b.have[svc] = next
	return nil
}

func (b *agentBackend) DeleteService(_ context.Context, svc provider.Service) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := apiClient(b.t, b.agent, "")
	for id := range b.have[svc] {
		if err := c.Agent().ServiceDeregister(id); err != nil {
			return err
		}
	}
	delete(b.have, svc)
	return nil
}

func (b *agentBackend) Break(context.Context) error {
	b.agent.Stop()
	return nil
}

func (b *agentBackend) Repair(context.Context) error {
	b.agent.Restart(b.t)
	b.mu.Lock()
	defer b.mu.Unlock()
	c := apiClient(b.t, b.agent, "")
	for _, ins := range b.have {
		for _, in := range ins {
			register(b.t, c, in, api.HealthPassing)
		}
	}
	return nil
}

func TestConformanceRealConsul(t *testing.T) {
	providertest.Run(t, realHarness{agent: consultest.StartDev(t), cases: new(atomic.Int32)})
}

func TestConformanceRealPluginSubprocess(t *testing.T) {
	bin := filepath.Join(buildBinaries(t), "osm-provider-consul")
	providertest.Run(t, realHarness{agent: consultest.StartDev(t), plugin: bin, cases: new(atomic.Int32)})
}

// TestTTLChecks flips real TTL checks and deregisters instances and
// services: only passing instances are endpoints (warning too with
// includeWarning), and each change reaches a watcher.
func TestTTLChecks(t *testing.T) {
	agent := consultest.StartDev(t)
	c := apiClient(t, agent, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	web1 := instanceSpec{service: "web", id: "web-1", addr: "192.0.2.1", port: 8080, tags: []string{"mesh", "v1"}, meta: map[string]string{"version": "1.4"}}
	web2 := instanceSpec{service: "web", id: "web-2", addr: "192.0.2.2", port: 8080, tags: []string{"mesh"}}
	db := instanceSpec{service: "db_primary", id: "db-1", addr: "192.0.2.9", port: 5432, tags: []string{"mesh"}}
	other := instanceSpec{service: "billing", id: "billing-1", addr: "192.0.2.20", port: 80} // no mesh tag
	for _, in := range []instanceSpec{web1, web2, db, other} {
		register(t, c, in, api.HealthPassing)
	}
	passing := startProvider(ctx, t, agent, map[string]any{"tags": []string{"mesh"}, "serviceMap": map[string]string{"db_primary": "data/db"}})
	warning := startProvider(ctx, t, agent, map[string]any{"services": []string{"web"}, "includeWarning": true, "meshNamespace": "shop"})
	pe, we := watchEvents(ctx, t, passing), watchEvents(ctx, t, warning)

	w1 := "192.0.2.1:8080 meta.version=1.4 tags=mesh,v1"
	w2 := "192.0.2.2:8080 tags=mesh"
	waitFor(t, "tagged services, db mapped", pe.stateIs(map[string][]string{
		"default/web": {w1, w2}, "data/db": {"192.0.2.9:5432 tags=mesh"}}))
	waitFor(t, "listed service in its mesh namespace", we.stateIs(map[string][]string{"shop/web": {w1, w2}}))

	setTTL(t, c, "web-1", api.HealthWarning)
	waitFor(t, "warning: left out by default", pe.stateIs(map[string][]string{
		"default/web": {w2}, "data/db": {"192.0.2.9:5432 tags=mesh"}}))
	waitFor(t, "warning: kept with includeWarning, labelled", we.stateIs(map[string][]string{
		"shop/web": {"192.0.2.1:8080 consul-health=warning meta.version=1.4 tags=mesh,v1", w2}}))

	setTTL(t, c, "web-1", api.HealthCritical)
	waitFor(t, "critical: left out with includeWarning too", we.stateIs(map[string][]string{"shop/web": {w2}}))

	setTTL(t, c, "web-1", api.HealthPassing)
	waitFor(t, "passing again", pe.stateIs(map[string][]string{
		"default/web": {w1, w2}, "data/db": {"192.0.2.9:5432 tags=mesh"}}))

	if err := c.Agent().ServiceDeregister("web-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deregistered instance gone", we.stateIs(map[string][]string{"shop/web": {w1}}))
	if err := c.Agent().ServiceDeregister("db-1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deregistered service deleted", pe.stateIs(map[string][]string{"default/web": {w1}}))

	// A service gaining the tag joins; all its instances critical leaves
	// it with no endpoints (it is still in the catalog).
	other.tags = []string{"mesh"}
	register(t, c, other, api.HealthPassing)
	waitFor(t, "newly tagged service joins", pe.stateIs(map[string][]string{
		"default/web": {w1}, "default/billing": {"192.0.2.20:80 tags=mesh"}}))
	setTTL(t, c, "billing-1", api.HealthCritical)
	waitFor(t, "its only instance critical: no endpoints", pe.stateIs(map[string][]string{
		"default/web": {w1}, "default/billing": {}}))
	if h := pe.lastHealth(); h != nil && !h.Healthy {
		t.Errorf("provider unhealthy: %s", h.Message)
	}
}

// TestLabels checks the labels that describeEndpoints leaves out.
func TestLabels(t *testing.T) {
	agent := consultest.StartDev(t)
	c := apiClient(t, agent, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	register(t, c, instanceSpec{service: "web", id: "web-1", port: 8080}, api.HealthPassing) // no address: the node's
	p := startProvider(ctx, t, agent, map[string]any{})
	eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 {
		t.Fatalf("endpoints %v; want one", eps)
	}
	got := eps[0]
	want := map[string]string{labelNode: "dev", labelDatacenter: "dc1", labelService: "web", labelServiceID: "web-1"}
	if got.IP.String() != agent.Host || fmt.Sprint(got.Labels) != fmt.Sprint(want) {
		t.Errorf("endpoint %s %v; want the node address %s with labels %v", got, got.Labels, agent.Host, want)
	}
	if svcs, _ := p.ListServices(ctx); len(svcs) != 1 {
		t.Errorf("services %v; want only default/web (not Consul's own consul service)", svcs)
	}
}

// TestConsulRestart stops Consul: the provider reports unhealthy and keeps
// its endpoints. Consul comes back empty (a dev agent keeps nothing), its
// index starting again: the provider reads it again, follows what is
// registered now, and reports healthy, without a restart of its own.
func TestConsulRestart(t *testing.T) {
	agent := consultest.StartDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	register(t, apiClient(t, agent, ""), instanceSpec{service: "web", id: "web-1", addr: "192.0.2.1", port: 80}, api.HealthPassing)
	p := startProvider(ctx, t, agent, map[string]any{})
	ev := watchEvents(ctx, t, p)
	want := map[string][]string{"default/web": {"192.0.2.1:80"}}
	waitFor(t, "first read", ev.stateIs(want))

	agent.Stop()
	waitFor(t, "unhealthy with the cause and the fix", ev.healthIs(false, "connection refused", "check that the Consul agent is up", "last known endpoints", "failing: catalog, service web"))
	if eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "web"}); err != nil || len(eps) != 1 {
		t.Errorf("while Consul is down: ListEndpoints = %v, %v; want the last good endpoint", eps, err)
	}

	agent.Restart(t)
	c := apiClient(t, agent, "")
	register(t, c, instanceSpec{service: "web", id: "web-2", addr: "192.0.2.2", port: 80}, api.HealthPassing)
	register(t, c, instanceSpec{service: "api", id: "api-1", addr: "192.0.2.3", port: 81}, api.HealthPassing)
	waitFor(t, "healthy again", ev.healthIs(true))
	waitFor(t, "what Consul holds after the restart", ev.stateIs(map[string][]string{
		"default/web": {"192.0.2.2:80"}, "default/api": {"192.0.2.3:81"}}))
	setTTL(t, c, "web-2", api.HealthCritical)
	waitFor(t, "and it keeps following", ev.stateIs(map[string][]string{"default/web": {}, "default/api": {"192.0.2.3:81"}}))
}

// TestDeniedToken runs Consul with ACLs (default deny): a token with the
// documented read-only policy works; the same token without its policy
// (Consul then filters what it may not read) and a deleted token (403)
// make the provider unhealthy with the fix while the last good endpoints
// stay; giving the policy back, or the token, heals it.
func TestDeniedToken(t *testing.T) {
	agent := consultest.StartDev(t, `acl { enabled = true, default_policy = "deny", tokens { initial_management = "root-secret" } }`)
	root := apiClient(t, agent, "root-secret")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policy, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: "osm-provider-consul", Rules: readPolicy}, nil)
	if err != nil {
		t.Fatalf("create the documented policy: %v", err)
	}
	const secret = "9b1a6a1e-5f37-4d0c-9a55-4b6f0c2d7e11"
	token := &api.ACLToken{SecretID: secret, Description: "osm-provider-consul", Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}
	token, _, err = root.ACL().TokenCreate(token, nil)
	if err != nil {
		t.Fatal(err)
	}
	register(t, root, instanceSpec{service: "web", id: "web-1", addr: "192.0.2.1", port: 80}, api.HealthPassing)

	// waitTime bounds how long a query that is already waiting takes to
	// notice a changed token: Consul checks the token when a query starts.
	p := startProvider(ctx, t, agent, map[string]any{"token": secret, "waitTime": "1s"})
	ev := watchEvents(ctx, t, p)
	want := map[string][]string{"default/web": {"192.0.2.1:80"}}
	waitFor(t, "read with the read-only policy", ev.stateIs(want))

	token.Policies = nil
	if _, _, err := root.ACL().TokenUpdate(token, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "policy taken away: unhealthy", ev.healthIs(false, "may not read all of", "read-only policy in docs/plugins/consul.md"))
	if got := ev.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("with the policy taken away: state %v; want the last good %v", got, want)
	}
	token.Policies = []*api.ACLTokenPolicyLink{{ID: policy.ID}}
	if _, _, err := root.ACL().TokenUpdate(token, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "policy back: healthy", ev.healthIs(true))

	if _, err := root.ACL().TokenDelete(token.AccessorID, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "token deleted: unhealthy", ev.healthIs(false, "refused the ACL token (403", "set token or tokenFile"))
	register(t, root, instanceSpec{service: "web", id: "web-2", addr: "192.0.2.2", port: 80}, api.HealthPassing)
	if got := ev.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("with the token deleted: state %v; want the last good %v", got, want)
	}
	if _, _, err := root.ACL().TokenCreate(&api.ACLToken{SecretID: secret, Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "token back: healthy", ev.healthIs(true))
	waitFor(t, "and current", ev.stateIs(map[string][]string{"default/web": {"192.0.2.1:80", "192.0.2.2:80"}}))
}

// readPolicy is the policy docs/plugins/consul.md gives the provider.
const readPolicy = `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }
`

// TestEnterpriseKeysOnCommunity: namespace and partition are Enterprise
// features; against Community Edition the provider says so and how to fix.
func TestEnterpriseKeysOnCommunity(t *testing.T) {
	agent := consultest.StartDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startProvider(ctx, t, agent, map[string]any{"namespace": "shop"})
	_, err := p.ListServices(ctx)
	if err == nil || !strings.Contains(err.Error(), "Community Edition: remove namespace and partition") {
		t.Errorf("ListServices with namespace on Community Edition: %v; want unavailable, naming the fix", err)
	}
}
