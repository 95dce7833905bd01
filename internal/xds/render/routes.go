package render

import (
	"maps"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Routes returns the proxy's route configurations, sorted by name: one per
// upstream HTTP/gRPC port (a TrafficSplit root gets weighted clusters over
// its backends, limited to the split's matches when it has some), and for
// Envoy one per inbound HTTP/gRPC port, routing to the local application.
// Outbound route configurations depend only on the upstream (and on which
// of its split backends the caller may reach), never on the caller.
func Routes(m Mesh, p Proxy) ([]*routev3.RouteConfiguration, error) {
	out, _, err := routes(m, p, false, nil)
	return out, err
}

// RouteResources returns the route configurations of Routes, the inbound
// ones and those of upstreams called directly (no split, no Gateway API
// routes) written as bytes from the stamp of their shape (see stamp): the
// xDS publisher's form. It needs m.Memo; without one every route
// configuration is a message. The encoded ones are appended to enc (nil,
// or a buffer the caller reuses).
func RouteResources(m Mesh, p Proxy, enc []Encoded) ([]*routev3.RouteConfiguration, []Encoded, error) {
	return routes(m, p, m.Memo != nil, enc)
}

func routes(m Mesh, p Proxy, encode bool, enc []Encoded) ([]*routev3.RouteConfiguration, []Encoded, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := egressGatewayOf(m, p); ok {
		return nil, nil, nil // its filter chains forward bytes
	}
	if p.Flavor == Gateway {
		out, err := gatewayRoutes(m, p)
		return out, nil, err
	}
	var out []*routev3.RouteConfiguration
	outbounds := plan(m, p, self)
	if encode {
		enc = slices.Grow(enc, len(self.Ports)+len(outbounds))
	}
	if p.Flavor == Envoy {
		rl := m.Spec().InboundRateLimit(self.Service)
		for _, port := range sortedPorts(self) {
			if !isHTTP(port) {
				continue
			}
			if encode {
				if e, ok := encodedInboundRoute(m, self.Service, port, rl); ok {
					enc = append(enc, e)
					continue
				}
			}
			out = append(out, inboundRoute(self.Service, port, rl))
		}
	}
	for _, o := range outbounds {
		if !isHTTP(o.port) {
			continue
		}
		if encode {
			if e, ok := encodedOutboundRoute(m, o, p.Flavor); ok {
				enc = append(enc, e)
				continue
			}
		}
		out = append(out, memoised(m, &builder{}, memoKey{kind: memoRoute, name: o.routeName(p.Flavor)}, func() *routev3.RouteConfiguration {
			return outboundRoutes(o, p.Flavor)
		}))
	}
	for _, r := range egressRoutes(m, p, self) {
		if r.Protocol == spec.EgressHTTP {
			out = append(out, egressRouteConfig(r))
		}
	}
	sortByName(out, (*routev3.RouteConfiguration).GetName)
	return out, enc, nil
}

// inboundRoute is the route configuration of an Envoy inbound HTTP or
// gRPC port: everything to the local application, limited by rl (the
// Service's inbound rate limits; nil: none, see ratelimit.go).
func inboundRoute(svc mesh.MeshService, port spec.ServicePort, rl *resilience.RateLimit) *routev3.RouteConfiguration {
	name := InboundName(svc, port.Port)
	action := func() *routev3.Route_Route {
		return &routev3.Route_Route{Route: routeAction(port, &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: LocalClusterName(svc, port.Port)}})}
	}
	grpc := port.AppProtocol == "grpc"
	rc := routeConfig(name, append(rateLimitedRoutes(name, rl, grpc, action), &routev3.Route{Match: prefixMatch(), Action: action()})...)
	rateLimitHost(rc, name, rl, grpc)
	return rc
}

func routeConfig(name string, routes ...*routev3.Route) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: routes}},
	}
}

func prefixMatch() *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
}

// routeAction disables the 15 s route timeout on gRPC ports (streams).
func routeAction(port spec.ServicePort, a *routev3.RouteAction) *routev3.RouteAction {
	if port.AppProtocol == "grpc" {
		a.Timeout = durationpb.New(0)
	}
	return a
}

func outboundRoutes(o outbound, f Flavor) *routev3.RouteConfiguration {
	if o.gw != nil {
		return gatewayRouteConfig(o, f)
	}
	var routes []*routev3.Route
	if len(o.split) > 0 {
		var ws []*routev3.WeightedCluster_ClusterWeight
		var total uint32 // at most MaxUint32: spec validation bounds the sum
		for _, b := range o.split {
			ws = append(ws, &routev3.WeightedCluster_ClusterWeight{Name: ClusterName(b.svc, f), Weight: wrapperspb.UInt32(b.weight)})
			total += b.weight
		}
		weighted := func() *routev3.Route_Route {
			wc := &routev3.WeightedCluster{Clusters: ws}
			if f == GRPC {
				// gRPC C-core 1.51 takes an unset total_weight as 100 and
				// NACKs weights with another sum ("weighted_cluster has
				// incorrect total weight"); gRPC-Go and grpc-js ignore it.
				// Envoy, where it is deprecated, uses the sum.
				wc.TotalWeight = wrapperspb.UInt32(total)
			}
			return &routev3.Route_Route{Route: routeAction(o.port, &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}})}
		}
		for _, hm := range o.splitMatches {
			if match, ok := httpRouteMatch(hm, f); ok {
				routes = append(routes, &routev3.Route{Name: hm.Group + "/" + hm.Name, Match: match, Action: weighted()})
			}
		}
		if len(o.splitMatches) == 0 {
			routes = append(routes, &routev3.Route{Match: prefixMatch(), Action: weighted()})
		}
	}
	if o.direct {
		routes = append(routes, &routev3.Route{
			Match:  prefixMatch(),
			Action: &routev3.Route_Route{Route: routeAction(o.port, &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: ClusterName(o.info.Service, f)}})},
		})
	}
	for _, rt := range routes {
		applyCall(rt, rt.GetRoute(), o, f, false, false)
	}
	return routeConfig(o.routeName(f), routes...)
}

// httpRouteMatch matches the requests of one HTTPRouteGroup match; false
// when no request of flavour f can match it (a gRPC client's methods).
func httpRouteMatch(hm spec.HTTPRouteMatch, f Flavor) (*routev3.RouteMatch, bool) {
	rm := prefixMatch()
	if hm.PathRegex != "" {
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: hm.PathRegex}}
	}
	methods, ok := methodsFor(hm, f)
	if !ok {
		return nil, false
	}
	if len(methods) == 1 {
		rm.Headers = append(rm.Headers, exactHeader(":method", methods[0]))
	} else if len(methods) > 1 {
		rm.Headers = append(rm.Headers, regexHeader(":method", strings.Join(methods, "|")))
	}
	for _, name := range slices.Sorted(maps.Keys(hm.Headers)) {
		rm.Headers = append(rm.Headers, regexHeader(name, hm.Headers[name]))
	}
	return rm, true
}
