package render

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// Gateway TCP and TLS listeners (TCPRoutes and TLSRoutes attached). Each
// port of them is one listener, gateway|<ns>/<gw>|<port>, without RDS:
//
//   - TCP: one filter chain, a tcp_proxy to the rule's backends.
//   - TLS: tls_inspector reads the client's SNI, and a filter chain per
//     SNI name (the route's host names intersected with the listener's;
//     the listener with the most specific hostname wins a name, so no two
//     chains match alike; a route without host names under a listener
//     without one is the chain without a name) holds a tcp_proxy to that
//     name's rule. Passthrough chains forward the client's TLS bytes
//     unterminated; Terminate chains end the client's TLS with the
//     listener's certificate files (as HTTPS does, but without ALPN) and
//     forward the plaintext.
//
// Either way the tcp_proxy's clusters are the backends' mesh EDS clusters,
// so the bytes cross the mesh inside the gateway's mTLS (its service
// certificate, the backend's SPIFFE ID checked) to the backend's Envoy,
// whose tcp inbound listener checks its RBAC and hands them to the
// application: in Passthrough mode the application terminates the
// client's own TLS, tunnelled inside the mesh's, as OSM and Istio do.
// A rule's backends are weighted (weighted_clusters); a backend that does
// not resolve, or that TrafficTargets do not let the gateway call, gets no
// share; a rule (or a port) left with none sends its connections to
// GatewayRefuseCluster, which has no endpoints, so they are closed at once.

// GatewayRefuseCluster is the gateway proxy's cluster without endpoints:
// TCP and TLS connections with nowhere to go are closed.
const GatewayRefuseCluster = "gateway|refuse"

func isL4(protocol string) bool { return protocol == "TCP" || protocol == "TLS" }

func (gp gatewayProxyPlan) hasL4() bool {
	return slices.ContainsFunc(gp.info.Listeners, func(l gateway.Listener) bool { return isL4(l.Protocol) })
}

// gatewayL4Listener renders the TCP or TLS listeners ls of one port.
func (b *builder) gatewayL4Listener(gp gatewayProxyPlan, p Proxy, ls []gateway.Listener) *listenerv3.Listener {
	name := GatewayListenerName(gp.info.Gateway, ls[0].Port)
	l := &listenerv3.Listener{Name: name, Address: socketAddress(p.Address, ls[0].Port), TrafficDirection: corev3.TrafficDirection_INBOUND}
	if ls[0].Protocol == "TCP" {
		var rules []gateway.Rule
		for _, gl := range ls {
			for _, h := range gl.Hosts {
				rules = append(rules, h.Rules...)
			}
		}
		l.FilterChains = []*listenerv3.FilterChain{{Name: ls[0].Name, Filters: []*listenerv3.Filter{b.networkFilter(tcpProxyFilter, gp.tcpProxy(name+"|"+ls[0].Name, rules))}}}
		return l
	}
	l.ListenerFilters = []*listenerv3.ListenerFilter{{Name: tlsInspector,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: b.any(&tlsinspectorv3.TlsInspector{})}}}
	used := map[string]bool{}
	for _, gl := range bySpecificity(ls) {
		if gl.TLSMode == "Terminate" && slices.Contains(p.UnusableCertificates, gl.Name) {
			continue // the machine reported its certificate files unusable
		}
		for _, h := range gl.Hosts {
			if used[h.Hostname] {
				continue // a more specific listener of the port has it
			}
			used[h.Hostname] = true
			fc := &listenerv3.FilterChain{
				Name:    gl.Name + "|" + h.Hostname,
				Filters: []*listenerv3.Filter{b.networkFilter(tcpProxyFilter, gp.tcpProxy(name+"|"+gl.Name+"|"+h.Hostname, h.Rules))},
			}
			if h.Hostname != "*" {
				fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: []string{h.Hostname}}
			}
			if gl.TLSMode == "Terminate" {
				tls := gatewayTLS(p.GatewayCertDir, gl.Certificate)
				tls.CommonTlsContext.AlpnProtocols = nil // not HTTP
				fc.TransportSocket = b.transportSocket(tls)
			}
			l.FilterChains = append(l.FilterChains, fc)
		}
	}
	if len(l.FilterChains) == 0 {
		// No route attached: a listener needs a chain; this one closes.
		l.FilterChains = []*listenerv3.FilterChain{{Name: "refuse", Filters: []*listenerv3.Filter{b.networkFilter(tcpProxyFilter, gp.tcpProxy(name, nil))}}}
	}
	return l
}

// bySpecificity orders a port's listeners as the Gateway API picks among
// them: a precise hostname first, then longer wildcards, then none.
func bySpecificity(ls []gateway.Listener) []gateway.Listener {
	out := slices.Clone(ls)
	rank := func(l gateway.Listener) int {
		switch {
		case l.Hostname == "":
			return 0
		case strings.HasPrefix(l.Hostname, "*"):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b gateway.Listener) int {
		return cmp.Or(cmp.Compare(rank(b), rank(a)), cmp.Compare(len(b.Hostname), len(a.Hostname)), strings.Compare(a.Name, b.Name))
	})
	return out
}

// tcpProxy forwards to the first rule of rules in precedence order (the
// Gateway API: among routes attached alike, the first by namespace and
// name), weighted among the backends the gateway may reach.
func (gp gatewayProxyPlan) tcpProxy(statPrefix string, rules []gateway.Rule) *tcpproxyv3.TcpProxy {
	tp := &tcpproxyv3.TcpProxy{StatPrefix: statPrefix, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: GatewayRefuseCluster}}
	if len(rules) == 0 {
		return tp
	}
	weights := map[mesh.MeshService]uint32{}
	for _, bk := range gateway.SortRules(rules)[0].Backends {
		if _, ok := slices.BinarySearchFunc(gp.allowed, bk.Service, mesh.MeshService.Compare); bk.Valid && bk.Weight > 0 && ok {
			weights[bk.Service] += uint32(bk.Weight)
		}
	}
	svcs := slices.SortedFunc(maps.Keys(weights), mesh.MeshService.Compare)
	switch len(svcs) {
	case 0:
	case 1:
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: ClusterName(svcs[0], Envoy)}
	default:
		var ws []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight
		for _, s := range svcs {
			ws = append(ws, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: ClusterName(s, Envoy), Weight: weights[s]})
		}
		tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: ws}}
	}
	return tp
}

// gatewayRefuseCluster has no endpoints: a connection sent to it closes.
func gatewayRefuseCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 GatewayRefuseCluster,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadAssignment:       &endpointv3.ClusterLoadAssignment{ClusterName: GatewayRefuseCluster},
	}
}
