package spec

import (
	"slices"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// HasEndpoints tells apply whether a service has endpoints (any provider
// reports one), for the warnings of [unservedWarnings]. osm-server passes
// the catalog's answer; the specification itself knows no endpoints.
type HasEndpoints func(mesh.MeshService) bool

// unservedWarnings warns, for a TrafficSplit or TrafficTarget of the batch
// applied into st, about each service it leads callers to that nobody
// serves: the service has no endpoints, and it is not the root of a
// TrafficSplit with a backend (of non-zero weight) that has some. Calls to
// it fail until a machine of it (or of a backend) enrolls. A warning, not
// an error: apply order should not matter, and machines often enroll after
// the policy is applied.
func unservedWarnings(st *state, d Document, has HasEndpoints) []string {
	var field string
	var svcs []mesh.MeshService
	switch o := d.Object.(type) {
	case *TrafficSplit:
		field = "spec.service"
		svcs = []mesh.MeshService{{Namespace: o.Metadata.Namespace, Name: o.Spec.Service}}
	case *TrafficTarget:
		field = "spec.destination"
		d := o.Spec.Destination
		for _, name := range st.index().runAs[[2]string{d.Namespace, d.Name}] {
			svcs = append(svcs, mesh.MeshService{Namespace: d.Namespace, Name: name})
		}
	default:
		return nil
	}
	v := &validator{doc: d.describe()}
	for _, svc := range svcs {
		if _, ok := st.objects[Key{Kind: KindService, Namespace: svc.Namespace, Name: svc.Name}]; !ok || has(svc) {
			continue
		}
		backends, served := splitBackendsOf(st, svc, has)
		switch {
		case served:
		case len(backends) > 0:
			v.warnf(field, "service %q has no endpoints, nor has any backend of its TrafficSplit (%s): calls to it fail until a machine of one of them enrolls (or a provider reports one)", svc.Name, strings.Join(backends, ", "))
		default:
			v.warnf(field, "service %q has no endpoints: calls to it fail until a machine of it enrolls (or a provider reports one)", svc.Name)
		}
	}
	return v.warnings
}

// splitBackendsOf returns the backends (of non-zero weight) of the first
// TrafficSplit, by name, whose root is root, and whether one has endpoints.
func splitBackendsOf(st *state, root mesh.MeshService, has HasEndpoints) (backends []string, served bool) {
	for _, name := range namesOfKind(st, KindTrafficSplit, root.Namespace) {
		k := Key{Kind: KindTrafficSplit, Namespace: root.Namespace, Name: name}
		ts, ok := st.objects[k].(*TrafficSplit)
		if !ok || ts.Spec.Service != root.Name {
			continue
		}
		for _, b := range ts.Spec.Backends {
			if b.Weight <= 0 {
				continue
			}
			backends = append(backends, b.Service)
			served = served || has(mesh.MeshService{Namespace: k.Namespace, Name: b.Service})
		}
		return slices.Compact(backends), served
	}
	return nil, false
}
