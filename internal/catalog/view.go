package catalog

import (
	"maps"
	"slices"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// View is an immutable, versioned view of the mesh: the specification
// snapshot, the trust domain, and each service's participant endpoints
// (the endpoints sent to other proxies; see [Model]). It is what xDS
// rendering reads, as a plain value. A View is never modified after it is
// published; the next one shares every unchanged service's endpoints.
type View struct {
	version     uint64
	spec        *spec.Snapshot
	trustDomain string
	// all is set while every discovered endpoint participates (no
	// participant rule), grace during the startup grace (see [Model]), and
	// allSince the version at which every service's participants were last
	// recomputed at once.
	all      bool
	grace    bool
	allSince uint64
	// While all is set, the participants are the discovered endpoints of
	// cat, shared as they are; otherwise services holds them.
	cat      *Snapshot
	services map[mesh.MeshService]*participants
	// history holds the services whose participants changed at each of
	// the last versions (oldest first, at most maxHistory), so Changed
	// against a recent view costs what changed, not the size of the mesh.
	// It covers every version from historyFrom on.
	history     []delta
	historyFrom uint64
}

// participants is one service's participant endpoints at a version.
type participants struct {
	version   uint64 // the view version at which they last changed
	endpoints []mesh.Endpoint
}

type delta struct {
	version  uint64
	services []mesh.MeshService
}

// maxHistory bounds View.history: a reader further behind compares
// per-service versions instead.
const maxHistory = 64

// NewView returns a view of the given specification, trust domain and
// participant endpoints (taken as they are: for tests and tools that render
// without a Model). Its version is 1.
func NewView(sp *spec.Snapshot, trustDomain string, endpoints map[mesh.MeshService][]mesh.Endpoint) *View {
	v := &View{version: 1, spec: sp, trustDomain: trustDomain, allSince: 1, historyFrom: 2, services: make(map[mesh.MeshService]*participants, len(endpoints))}
	for svc, eps := range endpoints {
		v.services[svc] = &participants{version: 1, endpoints: eps}
	}
	return v
}

// Version increases with every published view.
func (v *View) Version() uint64 {
	if v == nil {
		return 0
	}
	return v.version
}

// Spec returns the mesh specification snapshot (nil if there is none, or
// v is nil).
func (v *View) Spec() *spec.Snapshot {
	if v == nil {
		return nil
	}
	return v.spec
}

// TrustDomain returns the SPIFFE trust domain of service certificates.
func (v *View) TrustDomain() string {
	if v == nil {
		return ""
	}
	return v.trustDomain
}

// Endpoints returns svc's participant endpoints: the endpoints other
// proxies are sent, sorted by address. The result must not be modified.
func (v *View) Endpoints(svc mesh.MeshService) []mesh.Endpoint {
	if v == nil {
		return nil
	}
	if v.all && v.cat != nil {
		if se, ok := v.cat.Endpoints(svc); ok {
			return se.Endpoints
		}
		return nil
	}
	if p := v.services[svc]; p != nil {
		return p.endpoints
	}
	return nil
}

// Services returns every service with discovered endpoints, sorted.
func (v *View) Services() []mesh.MeshService {
	if v.all && v.cat != nil {
		return v.cat.Services()
	}
	out := slices.Collect(maps.Keys(v.services))
	slices.SortFunc(out, mesh.MeshService.Compare)
	return out
}

// Changed returns the services whose participant endpoints differ between
// old and v, sorted, or all=true when every service's may have (old is nil
// or older than the last change of the participant rule or startup
// grace). The specification's changes are told by its own version.
func (v *View) Changed(old *View) (services []mesh.MeshService, all bool) {
	if old == nil || old.version < v.allSince {
		return nil, true
	}
	if old.version >= v.version {
		return nil, false
	}
	if v.historyFrom != 0 && v.historyFrom <= old.version+1 {
		var out []mesh.MeshService
		for _, d := range v.history {
			if d.version > old.version {
				out = append(out, d.services...)
			}
		}
		slices.SortFunc(out, mesh.MeshService.Compare)
		return slices.Compact(out), false
	}
	if v.all && v.cat != nil {
		return v.cat.Changed(old.cat), false
	}
	var out []mesh.MeshService
	for svc, p := range v.services {
		if prev := old.services[svc]; prev == nil || prev.version != p.version {
			out = append(out, svc)
		}
	}
	for svc := range old.services {
		if _, ok := v.services[svc]; !ok {
			out = append(out, svc)
		}
	}
	slices.SortFunc(out, mesh.MeshService.Compare)
	return out, false
}
