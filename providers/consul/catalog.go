package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

// catalog follows one Consul datacenter: a blocking query on the catalog's
// service list says which services exist, and one blocking query per
// selected service on its health endpoint says which instances serve it.
// A change of one instance wakes only its service's query, so it costs
// one read of that service, never of the whole catalog; the service list
// wakes only when services are registered or deregistered.
type catalog struct {
	log      *slog.Logger
	cfg      config
	client   *api.Client
	agent    string // the agent's URL, for messages
	pace     pacing
	state    *provider.State
	problems *problems

	mu       sync.Mutex
	synced   bool // the first complete read was published
	listed   bool // the service list was read at least once
	services map[string]*serviceWatch
	byMesh   map[provider.Service]map[*serviceWatch]struct{}
	warned   map[string]bool // Consul names already logged as unusable
	wg       sync.WaitGroup

	// reread is set when the service list's query failed or its index
	// went backwards: Consul may have restarted meanwhile, so every
	// service's loop reads afresh at the list's next answer. A service
	// loop whose own query never failed (it was between two queries
	// while Consul was down) would otherwise block with an index from
	// before the restart, which a restarted Consul may not reach for
	// minutes, and miss every change until then.
	reread bool // guarded by mu
}

// serviceWatch is the blocking-query loop of one Consul service.
type serviceWatch struct {
	name   string
	mesh   provider.Service
	cancel context.CancelFunc
	read   bool // its first answer is in
	insts  []instance
}

func newCatalog(log *slog.Logger, cfg config, client *api.Client, agent string, pace pacing, s *provider.State) *catalog {
	return &catalog{
		log: log, cfg: cfg, client: client, agent: agent, pace: pace, state: s,
		problems: &problems{state: s, bySource: map[string]problem{}},
		services: map[string]*serviceWatch{},
		byMesh:   map[provider.Service]map[*serviceWatch]struct{}{},
		warned:   map[string]bool{},
	}
}

// errFiltered is an answer Consul shortened because the token may not
// read all of it. It is never applied: a partial view would withdraw the
// endpoints the token no longer sees.
var errFiltered = errors.New("results filtered by ACLs")

// run follows the catalog until ctx is done and waits for every service
// loop to end.
func (c *catalog) run(ctx context.Context) {
	follow(ctx, c.pace,
		func(q *api.QueryOptions) (map[string][]string, *api.QueryMeta, error) {
			svcs, meta, err := c.client.Catalog().Services(q)
			if err == nil && meta.ResultsFilteredByACLs {
				err = errFiltered
			}
			return svcs, meta, err
		},
		func(svcs map[string][]string) { c.applyServices(ctx, svcs) },
		func(err error) {
			if err != nil {
				c.mu.Lock()
				c.reread = true
				c.mu.Unlock()
			}
			c.problems.set("catalog", c.describe(err, "the service list"))
		},
		func() {
			c.log.Info("consul's catalog index went backwards (a restart or a snapshot restore); reading it again")
			c.mu.Lock()
			c.reread = true
			c.mu.Unlock()
		})
	c.wg.Wait()
}

// applyServices starts a loop for each selected service that has none and
// stops the loops of services that are gone or no longer selected.
func (c *catalog) applyServices(ctx context.Context, svcs map[string][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]provider.Service{}
	for name, tags := range svcs {
		if !c.cfg.selected(name, tags) {
			continue
		}
		mesh, ok := c.cfg.meshService(name)
		if !ok {
			if !c.warned[name] {
				c.warned[name] = true
				c.log.Warn("consul service left out: its name is not a mesh service name (a DNS-1123 label); map it with serviceMap", "consul_service", name)
			}
			continue
		}
		want[name] = mesh
	}
	for _, name := range slices.Collect(maps.Keys(c.services)) {
		sw := c.services[name]
		if _, ok := want[name]; ok && !c.reread {
			continue
		}
		sw.cancel()
		delete(c.services, name)
		delete(c.byMesh[sw.mesh], sw)
		if _, ok := want[name]; ok {
			// Read afresh (see reread); its last instances stay in
			// force until the new loop's first answer.
			c.startServiceLocked(ctx, name, want[name], sw)
			continue
		}
		c.publishLocked(sw.mesh)
	}
	c.reread = false
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := c.services[name]; ok {
			continue
		}
		c.startServiceLocked(ctx, name, want[name], nil)
	}
	c.listed = true
	c.syncLocked()
}

// startServiceLocked starts the loop of one Consul service; prev, when not
// nil, is the loop it replaces, whose instances it keeps until its own
// first answer.
func (c *catalog) startServiceLocked(ctx context.Context, name string, mesh provider.Service, prev *serviceWatch) {
	sctx, cancel := context.WithCancel(ctx)
	sw := &serviceWatch{name: name, mesh: mesh, cancel: cancel}
	if prev != nil {
		sw.insts, sw.read = prev.insts, prev.read
	}
	c.services[name] = sw
	if c.byMesh[sw.mesh] == nil {
		c.byMesh[sw.mesh] = map[*serviceWatch]struct{}{}
	}
	c.byMesh[sw.mesh][sw] = struct{}{}
	c.wg.Go(func() { c.followService(sctx, sw) })
}

// followService runs one service's health query until its ctx is done.
func (c *catalog) followService(ctx context.Context, sw *serviceWatch) {
	defer c.serviceProblem(sw, nil)
	follow(ctx, c.pace,
		func(q *api.QueryOptions) ([]*api.ServiceEntry, *api.QueryMeta, error) {
			entries, meta, err := c.client.Health().ServiceMultipleTags(sw.name, c.cfg.Tags, !c.cfg.IncludeWarning, q)
			if err == nil && meta.ResultsFilteredByACLs {
				err = errFiltered
			}
			return entries, meta, err
		},
		func(entries []*api.ServiceEntry) { c.applyService(sw, entries) },
		func(err error) {
			if ctx.Err() == nil {
				c.serviceProblem(sw, c.describe(err, "its instances"))
			}
		},
		nil)
}

// serviceProblem sets (or with nil clears) the problem of sw's service
// while sw is that service's loop, or no loop has replaced it. A loop
// replaced by a re-read ends after its successor started: its last word
// must not clear (or set) the successor's problem, which would report
// a failing service healthy.
func (c *catalog) serviceProblem(sw *serviceWatch, pr *problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.services[sw.name]; ok && cur != sw {
		return
	}
	c.problems.set("service "+sw.name, pr)
}

func (c *catalog) applyService(sw *serviceWatch, entries []*api.ServiceEntry) {
	insts, skipped := instances(entries, c.cfg.IncludeWarning)
	for _, s := range skipped {
		c.log.Debug("consul instance left out", "consul_service", sw.name, "node", s.node, "service_id", s.id, "reason", s.why)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.services[sw.name] != sw {
		return // stopped meanwhile
	}
	sw.insts, sw.read = insts, true
	if c.synced {
		c.publishLocked(sw.mesh)
		return
	}
	c.syncLocked()
}

// syncLocked publishes the first complete read once the service list and
// every selected service's instances are in.
func (c *catalog) syncLocked() {
	if c.synced || !c.listed {
		return
	}
	for _, sw := range c.services {
		if !sw.read {
			return
		}
	}
	all := map[provider.Service][]provider.Endpoint{}
	for mesh := range c.byMesh {
		if eps, ok := c.endpointsLocked(mesh); ok {
			all[mesh] = eps
		}
	}
	c.synced = true
	c.state.ReplaceAll(all)
	c.log.Info("read consul's catalog", "agent", c.agent, "consul_services", len(c.services), "mesh_services", len(all))
}

// publishLocked tells the state the endpoints of one mesh service (after
// the first complete read).
func (c *catalog) publishLocked(mesh provider.Service) {
	if !c.synced {
		return
	}
	if len(c.byMesh[mesh]) == 0 {
		delete(c.byMesh, mesh)
		c.state.DeleteService(mesh)
		return
	}
	if eps, ok := c.endpointsLocked(mesh); ok {
		c.state.SetEndpoints(mesh, eps)
	}
}

// endpointsLocked merges the instances of the Consul services of mesh
// that have been read; false when none has.
func (c *catalog) endpointsLocked(mesh provider.Service) ([]provider.Endpoint, bool) {
	var lists [][]instance
	for sw := range c.byMesh[mesh] {
		if sw.read {
			lists = append(lists, sw.insts)
		}
	}
	if len(lists) == 0 {
		return nil, false
	}
	return mergeEndpoints(lists...), true
}

// watching returns how many service loops run.
func (c *catalog) watching() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.services)
}

var serviceInBody = regexp.MustCompile(`\s+on\s+"[^"]*"`)

// describe turns a failed query into a problem: a cause shared by every
// loop that fails the same way (so one outage reads as one problem) and
// the fix.
func (c *catalog) describe(err error, what string) *problem {
	if err == nil {
		return nil
	}
	const keeps = "the provider keeps serving the last known endpoints and retries"
	if errors.Is(err, errFiltered) {
		return &problem{cause: fmt.Sprintf("consul %s: the ACL token may not read all of %s (Consul filtered the answer)", c.agent, what),
			fix: "give the token the read-only policy in docs/plugins/consul.md (service_prefix \"\" and node_prefix \"\" read); " + keeps}
	}
	var se api.StatusError
	if errors.As(err, &se) {
		body := serviceInBody.ReplaceAllString(strings.TrimSpace(se.Body), "")
		switch {
		case se.Code == http.StatusForbidden || se.Code == http.StatusUnauthorized:
			return &problem{cause: fmt.Sprintf("consul %s refused the ACL token (%d %s)", c.agent, se.Code, body),
				fix: "set token or tokenFile to a valid token with the read-only policy in docs/plugins/consul.md; " + keeps}
		case se.Code == http.StatusTooManyRequests:
			return &problem{cause: fmt.Sprintf("consul %s: too many connections from this host (429)", c.agent),
				fix: fmt.Sprintf("the provider holds one blocking query per service (%d now): raise limits.http_max_conns_per_client on the agent above that, or reach it over https, where HTTP/2 shares a few connections; %s", c.watching(), keeps)}
		case se.Code == http.StatusBadRequest && strings.Contains(body, "Consul Enterprise feature"):
			return &problem{cause: fmt.Sprintf("consul %s: %s", c.agent, body),
				fix: "this Consul is Community Edition: remove namespace and partition from the config (and CONSUL_NAMESPACE, CONSUL_PARTITION from the environment); " + keeps}
		}
		return &problem{cause: fmt.Sprintf("consul %s: %d %s", c.agent, se.Code, body), fix: keeps}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return &problem{cause: fmt.Sprintf("consul %s: %v", c.agent, err),
		fix: "check that the Consul agent is up and reachable from this host (address, tls); " + keeps}
}

// problem is what is wrong with one source (the service list, or one
// service's instances).
type problem struct{ cause, fix string }

// problems are the current problems by source; the provider is healthy
// when there are none. One outage fails every loop, so the message names
// each cause once, with a count and the first few sources.
type problems struct {
	state *provider.State

	mu       sync.Mutex
	bySource map[string]problem
}

const namedSources = 3

func (p *problems) set(source string, pr *problem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, had := p.bySource[source]
	switch {
	case pr == nil && !had:
		return
	case pr != nil && had && old == *pr:
		return
	case pr == nil:
		delete(p.bySource, source)
	default:
		p.bySource[source] = *pr
	}
	byCause := map[problem][]string{}
	for src, pr := range p.bySource {
		byCause[pr] = append(byCause[pr], src)
	}
	var msgs []string
	for _, pr := range slices.SortedFunc(maps.Keys(byCause), func(a, b problem) int { return strings.Compare(a.cause, b.cause) }) {
		srcs := slices.Sorted(slices.Values(byCause[pr]))
		failing := strings.Join(srcs[:min(len(srcs), namedSources)], ", ")
		if len(srcs) > namedSources {
			failing += fmt.Sprintf(" and %d more", len(srcs)-namedSources)
		}
		msgs = append(msgs, fmt.Sprintf("%s; %s (failing: %s)", pr.cause, pr.fix, failing))
	}
	if len(msgs) == 0 {
		p.state.SetHealthy()
		return
	}
	p.state.SetUnhealthy(errors.New(strings.Join(msgs, "; also ")))
}
