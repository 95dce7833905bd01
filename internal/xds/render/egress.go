package render

import (
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/osm-vm/osm-vm/internal/spec"
)

// Egress: a proxy whose service account an Egress lists gets, for each
// external host and port it may call (spec.Snapshot.Egress), without an
// egress gateway:
//
//	LDS  egress|<host>|<port>[|by=<ns>/<egress>,...]   on <host's VIP>:<port>
//	RDS  (the listener's name)                        http ports: routes by Host
//	CDS  egress|<host>|<targetPort>[|tls]             LOGICAL_DNS <host>:<targetPort>
//
// The agent's hosts block maps the host to its VIP, so the application
// connects to the VIP; Envoy resolves the real name and forwards. tcp
// ports forward bytes; tls ports pass the application's TLS through,
// accepting only connections whose SNI is the host (tls_inspector and a
// filter chain match); http ports route requests whose Host is the host
// (optionally only the Egress's HTTPRouteGroup matches; "by=" names the
// Egresses whose matches apply, so equal names mean equal content). With
// originateTLS the cluster speaks TLS to the host, checking its certificate
// against the system's roots and the host name. gRPC (proxyless) clients
// get no egress resources: they resolve and dial external names
// themselves.

// Extension names of the egress resources.
const (
	tlsInspectorFilter = "envoy.filters.listener.tls_inspector"
)

// egressClusterName is the cluster for r's host and target port (or,
// through an egress gateway, for its host and port at the gateway).
func egressClusterName(r spec.EgressRoute) string {
	if !r.Gateway.IsZero() {
		return "egress|" + r.Host + "|" + strconv.Itoa(r.Number) + "|via=" + r.Gateway.Service.String()
	}
	name := "egress|" + r.Host + "|" + strconv.Itoa(r.TargetPort)
	if r.OriginateTLS {
		name += "|tls"
	}
	return name
}

// egressName names r's listener (and, for http, its route configuration).
func egressName(r spec.EgressRoute) string {
	name := "egress|" + r.Host + "|" + strconv.Itoa(r.Number)
	if r.Protocol == spec.EgressHTTP && len(r.RestrictedBy) > 0 {
		by := make([]string, len(r.RestrictedBy))
		for i, k := range r.RestrictedBy {
			by[i] = k.Namespace + "/" + k.Name
		}
		name += "|by=" + strings.Join(by, ",")
	}
	return name
}

// egressRoutes returns what the proxy's service account may call outside
// the mesh (Envoy only).
func egressRoutes(m Mesh, p Proxy, self spec.ServiceInfo) []spec.EgressRoute {
	if p.Flavor != Envoy {
		return nil
	}
	return m.Spec().Egress(self.ServiceAccount)
}

func (b *builder) egressListener(r spec.EgressRoute) *listenerv3.Listener {
	name := egressName(r)
	l := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(r.VIP, r.Number),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
	tcp := func() *listenerv3.Filter {
		return b.networkFilter(tcpProxyFilter, &tcpproxyv3.TcpProxy{
			StatPrefix:       name,
			ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: egressClusterName(r)},
		})
	}
	switch r.Protocol {
	case spec.EgressHTTP:
		l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{b.networkFilter(hcmFilter, rdsHCM(name, name, routerHTTPFilter))}}}
	case spec.EgressTLS:
		l.ListenerFilters = []*listenerv3.ListenerFilter{{
			Name:       tlsInspectorFilter,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: b.any(&tlsinspectorv3.TlsInspector{})},
		}}
		l.FilterChains = []*listenerv3.FilterChain{{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{r.Host}, TransportProtocol: "tls"},
			Filters:          []*listenerv3.Filter{tcp()},
		}}
	default:
		l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{tcp()}}}
	}
	return l
}

// egressRouteConfig routes requests for r's host (as Host, with or
// without the port) to its cluster: all of them, or those of its matches.
func egressRouteConfig(r spec.EgressRoute) *routev3.RouteConfiguration {
	name := egressName(r)
	action := func() *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: egressClusterName(r)}}}
	}
	var routes []*routev3.Route
	if len(r.RestrictedBy) == 0 {
		routes = append(routes, &routev3.Route{Match: prefixMatch(), Action: action()})
	}
	for _, hm := range r.Matches {
		if match, ok := httpRouteMatch(hm, Envoy); ok {
			routes = append(routes, &routev3.Route{Name: hm.Group + "/" + hm.Name, Match: match, Action: action()})
		}
	}
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    name,
			Domains: []string{r.Host, r.Host + ":" + strconv.Itoa(r.Number)},
			Routes:  routes,
		}},
	}
}

// egressCluster resolves r's host by DNS (LOGICAL_DNS: one connection
// target at a time, as for large web services) and, with originateTLS,
// speaks TLS to it.
func (b *builder) egressCluster(r spec.EgressRoute) *clusterv3.Cluster {
	name := egressClusterName(r)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
		ConnectTimeout:       durationpb.New(connectTimeout),
		DnsLookupFamily:      clusterv3.Cluster_V4_PREFERRED,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address:       r.Host,
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(r.TargetPort)},
					}}},
					Hostname: r.Host,
				}},
			}}}},
		},
	}
	if r.OriginateTLS {
		c.TransportSocket = b.transportSocket(originateTLS(r.Host))
	}
	return c
}

// originateTLS is TLS to host outside the mesh: its certificate checked
// against the system's roots and the host name.
func originateTLS(host string) *tlsv3.UpstreamTlsContext {
	return &tlsv3.UpstreamTlsContext{
		Sni: host,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				SystemRootCerts: &tlsv3.CertificateValidationContext_SystemRootCerts{},
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
					SanType: tlsv3.SubjectAltNameMatcher_DNS,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: host}},
				}},
			}},
		},
	}
}

// egressClusters returns the distinct clusters of routes (sorted by the
// routes' order; the caller sorts by name); trustDomain names the egress
// gateways' identities.
func (b *builder) egressClusters(trustDomain string, routes []spec.EgressRoute) []*clusterv3.Cluster {
	seen := map[string]bool{}
	var out []*clusterv3.Cluster
	for _, r := range routes {
		n := egressClusterName(r)
		switch {
		case seen[n]:
		case !r.Gateway.IsZero():
			out = append(out, b.egressViaGatewayCluster(trustDomain, r))
		default:
			out = append(out, b.egressCluster(r))
		}
		seen[n] = true
	}
	return out
}

// originatesToOutside reports whether c is TLS to a host outside the mesh:
// no certificate of ours, the peer checked against the system's roots.
func originatesToOutside(c *tlsv3.CommonTlsContext) bool {
	return len(c.GetTlsCertificates()) == 0 && len(c.GetTlsCertificateSdsSecretConfigs()) == 0 &&
		c.GetTlsCertificateProviderInstance() == nil && c.GetValidationContext().GetSystemRootCerts() != nil
}

// dnsCluster checks a LOGICAL_DNS cluster: Envoy only here (egress), one
// endpoint naming a host and a port.
func (v *validation) dnsCluster(c *clusterv3.Cluster) {
	if v.flavor == GRPC {
		v.fail("LOGICAL_DNS cluster: rendered for Envoy's egress only, not for gRPC")
	}
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		v.fail("LOGICAL_DNS cluster needs exactly one endpoint (the host to resolve)")
		return
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() == "" || sa.GetPortValue() == 0 {
		v.fail("LOGICAL_DNS cluster endpoint %q:%d: give a host name and a port", sa.GetAddress(), sa.GetPortValue())
	}
}
