package xds

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// GatewayReports holds the certificate problems gateway machines' agents
// reported (api.GatewayReports, through GatewayMachines), by proxy CN. The
// publisher reads it (PublisherOptions.UnusableCertificates) to render a
// machine's listeners without those whose certificates it reported
// unusable.
type GatewayReports struct {
	mu      sync.Mutex
	reports map[string]map[string]string // CN -> listener -> problem
}

// NewGatewayReports returns an empty GatewayReports.
func NewGatewayReports() *GatewayReports {
	return &GatewayReports{reports: map[string]map[string]string{}}
}

// UnusableCertificates returns the listeners the machine cn reported
// unusable certificates for, sorted.
func (r *GatewayReports) UnusableCertificates(cn string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.reports[cn]))
}

// set records cn's report, and says whether the listeners it names changed.
func (r *GatewayReports) set(cn string, rep meshapi.GatewayReport) (changed bool) {
	m := map[string]string{}
	for _, c := range rep.Certificates {
		m[c.Listener] = c.Error
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = !slices.Equal(slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(r.reports[cn])))
	if len(m) == 0 {
		delete(r.reports, cn)
	} else {
		r.reports[cn] = m
	}
	return changed
}

// certificates returns a copy of cn's reported problems, by listener.
func (r *GatewayReports) certificates(cn string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.reports[cn])
}

// GatewayMachinesOptions is what GatewayMachines joins.
type GatewayMachinesOptions struct {
	// Proxies gives the connected proxies (the Server).
	Proxies interface{ Proxies() []Proxy }
	// Status gives what each proxy acknowledged or rejected (the cache).
	Status interface {
		Status(nodeID string) []cache.TypeStatus
	}
	// Reports holds the agents' reports, also read by the publisher.
	Reports *GatewayReports
	// Refresher renders a node's configuration again (the Publisher),
	// when its machine's report changes.
	Refresher interface{ Refresh(nodeID string) }
}

// GatewayMachines gives the specification's Gateway status the machines
// connected as each Gateway (gateway.Machines): the xDS server's
// connected gateway proxies, what each acknowledged or rejected (the xDS
// cache's record), and the certificate problems their agents reported
// (api.GatewayReports, kept in GatewayReports by proxy CN). A report is
// shown only while its machine is connected; each replica shows the
// machines connected to it and the reports sent to it. The publisher
// renders a machine's listeners without those whose certificates it
// reported unusable, and again when its report changes.
type GatewayMachines struct {
	o GatewayMachinesOptions
}

// NewGatewayMachines returns the join of o.
func NewGatewayMachines(o GatewayMachinesOptions) *GatewayMachines {
	return &GatewayMachines{o: o}
}

// SetGatewayReport implements api.GatewayReports.
func (g *GatewayMachines) SetGatewayReport(cn string, r meshapi.GatewayReport) {
	if g.o.Reports.set(cn, r) {
		g.o.Refresher.Refresh(cn) // a gateway proxy's node ID is its CN
	}
}

// GatewayMachines implements gateway.Machines.
func (g *GatewayMachines) GatewayMachines(gw mesh.MeshService) []gateway.Machine {
	var out []gateway.Machine
	for _, p := range g.o.Proxies.Proxies() {
		if p.Flavor != render.Gateway || p.Service != gw {
			continue
		}
		m := gateway.Machine{Node: p.NodeID}
		m.ACKed, m.Rejected = answered(g.o.Status.Status(p.NodeID))
		m.Certificates = g.o.Reports.certificates(p.CN)
		out = append(out, m)
	}
	return out
}

// answered says whether a proxy acknowledged every response sent to it,
// its listeners among them (Envoy asks for listeners once its clusters are
// in), and the error details of the types whose last answer was a
// rejection.
func answered(types []cache.TypeStatus) (acked bool, rejected string) {
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
