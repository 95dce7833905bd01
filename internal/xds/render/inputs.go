package render

import (
	"maps"
	"slices"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// Inputs is everything in the specification that a proxy's listeners,
// route configurations and clusters are rendered from: its own Service,
// whether the mesh is permissive, the TrafficTargets into its service
// (resolved against their route groups), the upstream ports it may call
// (with their splits, as the View's endpoints shape them: a root without
// endpoints passes all its traffic to the backends, a backend without
// endpoints takes no share), the Service of every upstream and split
// backend, their failure handling and an Envoy proxy's inbound rate
// limits.
// Given the same trust domain, flavour and address, two specifications
// that give a proxy equal Inputs give it byte-identical resources, so a
// server can keep a proxy's configuration across a specification change
// when its Inputs did not change. Load assignments depend on endpoints,
// not on the specification; see [Inputs.Dependencies].
//
// InputsOf gathers everything rendering reads of the specification;
// TestEqualInputsRenderEqually checks this against random specifications
// and edits.
type Inputs struct {
	self       spec.ServiceInfo
	permissive bool
	inbound    []spec.InboundRule
	plan       []outbound
	upstreams  []spec.ServiceInfo
	// policies are the failure handling of each upstream's cluster (as
	// Envoy's, which keeps all that gRPC's keeps).
	policies []clusterPolicy
	egress   []spec.EgressRoute
	// gateway is a gateway proxy's Gateway (its Fingerprint).
	gateway string
	// limit is an Envoy proxy's inbound rate limits (their rateLimitKey).
	limit string
	// calls are a gateway proxy's failure handling of each of its rules'
	// calls (their callKeys, see gatewayProxyPlan.calls).
	calls []string
}

// InputsOf returns p's Inputs under m (with m's Memo, the plan it
// computes is the one rendering then uses).
func InputsOf(m Mesh, p Proxy) (Inputs, error) {
	self, err := m.check(p)
	if err != nil {
		return Inputs{}, err
	}
	if gw, ok := egressGatewayOf(m, p); ok {
		return egressGatewayInputs(m, p, gw)
	}
	if p.Flavor == Gateway {
		return gatewayInputs(m, p)
	}
	in := Inputs{self: self, permissive: m.Spec().Permissive(), plan: plan(m, p, self), egress: egressRoutes(m, p, self)}
	if !in.permissive {
		in.inbound = m.Spec().Inbound(p.Service)
	}
	if p.Flavor == Envoy {
		in.limit = rateLimitKey(m.Spec().InboundRateLimit(p.Service))
	}
	svcs := upstreamServices(in.plan)
	if len(svcs) > 0 {
		in.upstreams = make([]spec.ServiceInfo, 0, len(svcs))
	}
	for _, svc := range svcs {
		info, _ := m.Spec().Service(svc)
		in.upstreams = append(in.upstreams, info)
	}
	in.policies = upstreamPolicies(m, svcs)
	return in, nil
}

// upstreamPolicies returns the cluster policy of each of svcs.
func upstreamPolicies(m Mesh, svcs []mesh.MeshService) []clusterPolicy {
	if len(svcs) == 0 {
		return nil
	}
	out := make([]clusterPolicy, len(svcs))
	for i, svc := range svcs {
		out[i] = clusterPolicyOf(m.Spec().ServiceResilience(svc), Envoy)
	}
	return out
}

// Equal reports whether a and b are the same inputs. It compares field by
// field (reflect.DeepEqual took half of a specification change's time at
// 1,000 services); TestInputsEqualCoversEveryField fails when a field is
// added that it does not compare.
func (a Inputs) Equal(b Inputs) bool {
	return a.permissive == b.permissive && serviceInfoEqual(a.self, b.self) &&
		slices.EqualFunc(a.inbound, b.inbound, inboundRuleEqual) &&
		slices.EqualFunc(a.plan, b.plan, outboundEqual) &&
		slices.EqualFunc(a.upstreams, b.upstreams, serviceInfoEqual) && slices.Equal(a.policies, b.policies) &&
		slices.EqualFunc(a.egress, b.egress, egressRouteEqual) && a.gateway == b.gateway && a.limit == b.limit &&
		slices.Equal(a.calls, b.calls)
}

func egressRouteEqual(a, b spec.EgressRoute) bool {
	return a.Host == b.Host && a.VIP == b.VIP && a.EgressPort == b.EgressPort && a.Gateway == b.Gateway &&
		slices.EqualFunc(a.Matches, b.Matches, routeMatchEqual) && slices.Equal(a.RestrictedBy, b.RestrictedBy)
}

// Dependencies returns the services whose endpoints the proxy receives
// (as [Dependencies] does), sorted.
func (in Inputs) Dependencies() []mesh.MeshService {
	out := make([]mesh.MeshService, len(in.upstreams))
	for i, info := range in.upstreams {
		out[i] = info.Service
	}
	return egressGateways(out, in.egress)
}

func serviceInfoEqual(a, b spec.ServiceInfo) bool {
	return a.Service == b.Service && a.ServiceAccount == b.ServiceAccount && a.VIP == b.VIP && slices.Equal(a.Ports, b.Ports)
}

func inboundRuleEqual(a, b spec.InboundRule) bool {
	return a.Policy == b.Policy && a.Port == b.Port && a.TCPAllPorts == b.TCPAllPorts &&
		slices.Equal(a.Sources, b.Sources) && slices.Equal(a.TCPPorts, b.TCPPorts) &&
		slices.EqualFunc(a.HTTP, b.HTTP, routeMatchEqual)
}

func routeMatchEqual(a, b spec.HTTPRouteMatch) bool {
	return a.Group == b.Group && a.Name == b.Name && a.PathRegex == b.PathRegex &&
		slices.Equal(a.Methods, b.Methods) && maps.Equal(a.Headers, b.Headers)
}

func outboundEqual(a, b outbound) bool {
	// name and grpcName are worked out from the rest (see buildPlan);
	// call by callKey, what rendering takes from it (with retrySrc).
	return a.port == b.port && a.callKey == b.callKey && a.direct == b.direct && a.subset == b.subset && serviceInfoEqual(a.info, b.info) &&
		slices.Equal(a.split, b.split) && slices.EqualFunc(a.splitMatches, b.splitMatches, routeMatchEqual) &&
		gatewayPlanEqual(a.gw, b.gw)
}
