package main

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/xds"
	xdscache "github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// gatewayMachines gives the specification's Gateway status the machines
// connected as each Gateway (spec.GatewayMachines): the xDS server's
// connected gateway proxies, what each acknowledged or rejected (the xDS
// cache's record), and the certificate problems their agents reported
// (api.GatewayReports, kept here by proxy CN). A report is shown only
// while its machine is connected; each replica shows the machines
// connected to it and the reports sent to it. The publisher renders a
// machine's listeners without those whose certificates it reported
// unusable, and again when its report changes.
type gatewayMachines struct {
	server    *xds.Server
	cache     *xdscache.Cache
	publisher *xds.Publisher

	mu      sync.Mutex
	reports map[string]map[string]string // CN -> listener -> problem
}

func newGatewayMachines(server *xds.Server, cache *xdscache.Cache, publisher *xds.Publisher) *gatewayMachines {
	g := &gatewayMachines{server: server, cache: cache, publisher: publisher, reports: map[string]map[string]string{}}
	publisher.SetUnusableCertificates(g.unusable)
	return g
}

// unusable returns the listeners the machine cn reported unusable certificates for, sorted.
func (g *gatewayMachines) unusable(cn string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.reports[cn]))
}

// SetGatewayReport implements api.GatewayReports.
func (g *gatewayMachines) SetGatewayReport(cn string, r meshapi.GatewayReport) {
	m := map[string]string{}
	for _, c := range r.Certificates {
		m[c.Listener] = c.Error
	}
	g.mu.Lock()
	changed := !slices.Equal(slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(g.reports[cn])))
	if len(m) == 0 {
		delete(g.reports, cn)
	} else {
		g.reports[cn] = m
	}
	g.mu.Unlock()
	if changed {
		g.publisher.Refresh(cn) // a gateway proxy's node ID is its CN
	}
}

// GatewayMachines implements spec.GatewayMachines.
func (g *gatewayMachines) GatewayMachines(gw mesh.MeshService) []spec.GatewayMachine {
	var out []spec.GatewayMachine
	for _, p := range g.server.Proxies() {
		if p.Flavor != render.Gateway || p.Service != gw {
			continue
		}
		m := spec.GatewayMachine{Node: p.NodeID}
		m.ACKed, m.Rejected = answered(g.cache.Status(p.NodeID))
		g.mu.Lock()
		m.Certificates = maps.Clone(g.reports[p.CN])
		g.mu.Unlock()
		out = append(out, m)
	}
	return out
}

// answered says whether a proxy acknowledged every response sent to it,
// its listeners among them (Envoy asks for listeners once its clusters are
// in), and the error details of the types whose last answer was a
// rejection.
func answered(types []xdscache.TypeStatus) (acked bool, rejected string) {
	listeners, pending := false, false
	var nacks []string
	for _, t := range types {
		if k := t.NACK; k != nil && !k.Time.Before(t.ACKedAt) {
			nacks = append(nacks, k.Error)
		}
		if t.Sent == "" {
			continue
		}
		listeners = listeners || t.TypeURL == resource.ListenerType
		if t.ACKed != t.Sent {
			pending = true
		}
	}
	sort.Strings(nacks)
	return listeners && !pending && len(nacks) == 0, strings.Join(nacks, "; ")
}
