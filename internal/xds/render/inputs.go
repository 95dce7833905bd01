package render

import (
	"reflect"

	"github.com/osm-vm/osm-vm/internal/spec"
)

// Inputs is everything in the specification that a proxy's listeners,
// route configurations and clusters are rendered from: its own Service,
// whether the mesh is permissive, the TrafficTargets into its service
// (resolved against their route groups), the upstream ports it may call
// (with their splits) and the Service of every upstream and split backend.
// Given the same trust domain, flavour and address, two specifications
// that give a proxy equal Inputs give it byte-identical resources, so a
// server can keep a proxy's configuration across a specification change
// when its Inputs did not change. Load assignments depend on endpoints,
// not on the specification; see [Dependencies].
//
// Everything rendering reads of the specification goes through [InputsOf];
// TestEqualInputsRenderEqually checks this against random specification
// changes.
type Inputs struct {
	self       spec.ServiceInfo
	permissive bool
	inbound    []spec.InboundRule
	plan       []outbound
	upstreams  []spec.ServiceInfo
}

// InputsOf returns p's Inputs under m (with m's Memo, the plan it
// computes is the one rendering then uses).
func InputsOf(m Mesh, p Proxy) (Inputs, error) {
	self, err := m.check(p)
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{self: self, permissive: m.Spec.Permissive(), plan: plan(m, p, self)}
	if !in.permissive {
		in.inbound = m.Spec.Inbound(p.Service)
	}
	for _, svc := range upstreamServices(in.plan) {
		info, _ := m.Spec.Service(svc)
		in.upstreams = append(in.upstreams, info)
	}
	return in, nil
}

// Equal reports whether a and b are the same inputs.
func (a Inputs) Equal(b Inputs) bool { return reflect.DeepEqual(a, b) }
