package render

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	dfpclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	filterstatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/set_filter_state/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	setfilterstatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/set_filter_state/v3"
	snidfpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// Egress gateways (spec.EgressGateway). A source whose Egress names a
// gateway keeps its listener on the host's VIP (and, for http, its routes
// by Host and matches) exactly as without one; only the cluster differs:
//
//	CDS  egress|<host>|<port>|via=<ns>/<gw>   EDS of the gateway's machines (EDS <ns>/<gw>),
//	                                          mTLS with the source's service certificate,
//	                                          the peer checked for the gateway's SPIFFE ID,
//	                                          SNI <port>.<host> (spec.EgressGatewaySNI)
//	EDS  <ns>/<gw>                            the gateway machines (as a provider lists them)
//
// The gateway machine's Envoy (flavour [Gateway], enrolled as the
// EgressGateway's namespace and name) receives
//
//	LDS  gateway|<ns>/<gw>|<port>             on its address and the EgressGateway's port
//	                                          (per proxy): tls_inspector, and a filter chain per
//	                                          host and port chosen by that SNI, terminating the
//	                                          sources' mTLS (client certificate from the mesh CA
//	                                          required), network RBAC allowing the SPIFFE IDs of
//	                                          the accounts the Egresses list for the host and
//	                                          port, set_filter_state (the host and target port)
//	                                          and the SNI dynamic forward proxy (resolving them),
//	                                          tcp_proxy to
//	CDS  egress|<host>|<targetPort>[|tls]     a dynamic forward proxy cluster of the host (TLS
//	                                          as a source's LOGICAL_DNS cluster has it with
//	                                          originateTLS), whose DNS cache drops internal
//	                                          addresses (see egressDNSCache)
//	SDS  service-cert, root-ca                the gateway's service certificate and the mesh CA
//
// Bytes cross the gateway as they are: the application's own TLS (tls
// ports; its SNI checked by the source's listener), plain tcp, or http
// (routed and restricted to the Egress's matches by the source's Envoy).

// egressGatewayListener is the gateway machine's listener, or nil when
// no Egress goes through the gateway (a listener needs a filter chain).
func (b *builder) egressGatewayListener(m Mesh, p Proxy, gw spec.EgressGatewayInfo, routes []spec.EgressGatewayRoute) *listenerv3.Listener {
	if len(routes) == 0 {
		return nil
	}
	name := GatewayListenerName(gw.Service, gw.Port)
	l := &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(p.Address, gw.Port),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		ListenerFilters: []*listenerv3.ListenerFilter{{
			Name:       tlsInspectorFilter,
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: b.any(&tlsinspectorv3.TlsInspector{})},
		}},
	}
	// The sources' mTLS carries bytes, not HTTP: no ALPN.
	tls := downstreamTLS(Envoy)
	tls.CommonTlsContext.AlpnProtocols = nil
	cache := egressDNSCache(m.Spec().MeshConfig().EgressDeniedPrefixes())
	for _, r := range routes {
		sni := spec.EgressGatewaySNI(r.Host, r.Number)
		out := spec.EgressRoute{Host: r.Host, EgressPort: r.EgressPort}
		principals := rbacPrincipals(m, r.Sources)
		rules := &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{"egress|" + sni: {
			Permissions: []*rbacv3.Permission{{Rule: &rbacv3.Permission_Any{Any: true}}},
			Principals:  principals,
		}}}
		l.FilterChains = append(l.FilterChains, &listenerv3.FilterChain{
			Name:             sni,
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{sni}, TransportProtocol: "tls"},
			TransportSocket:  b.transportSocket(tls),
			Filters: []*listenerv3.Filter{
				b.networkFilter(networkRBACFilter, &rbacnetv3.RBAC{StatPrefix: name + "|" + sni, Rules: rules}),
				b.networkFilter(setFilterStateFilter, &setfilterstatev3.Config{OnNewConnection: []*filterstatev3.FilterStateValue{
					filterStateConst(dynamicHostKey, r.Host),
					filterStateConst(dynamicPortKey, strconv.Itoa(r.TargetPort)),
				}}),
				b.networkFilter(sniDFPFilter, &snidfpv3.FilterConfig{
					DnsCacheConfig: cache,
					PortSpecifier:  &snidfpv3.FilterConfig_PortValue{PortValue: uint32(r.TargetPort)},
				}),
				b.networkFilter(tcpProxyFilter, &tcpproxyv3.TcpProxy{
					StatPrefix:       name + "|" + sni,
					ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: egressClusterName(out)},
				}),
			},
		})
	}
	return l
}

// egressGatewayClusters are the gateway's dynamic forward proxy clusters,
// one per host, target port and originateTLS, all on one DNS cache that
// drops the denied addresses from every answer.
func (b *builder) egressGatewayClusters(routes []spec.EgressGatewayRoute, denied []netip.Prefix) []*clusterv3.Cluster {
	cache := egressDNSCache(denied)
	seen := map[string]bool{}
	var out []*clusterv3.Cluster
	for _, gr := range routes {
		r := spec.EgressRoute{Host: gr.Host, EgressPort: gr.EgressPort}
		name := egressClusterName(r)
		if seen[name] {
			continue
		}
		seen[name] = true
		c := &clusterv3.Cluster{
			Name: name,
			ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
				Name:        dfpCluster,
				TypedConfig: b.any(&dfpclusterv3.ClusterConfig{ClusterImplementationSpecifier: &dfpclusterv3.ClusterConfig_DnsCacheConfig{DnsCacheConfig: cache}}),
			}},
			LbPolicy:       clusterv3.Cluster_CLUSTER_PROVIDED,
			ConnectTimeout: durationpb.New(connectTimeout),
		}
		if r.OriginateTLS {
			c.TransportSocket = b.transportSocket(originateTLS(r.Host))
		}
		out = append(out, c)
	}
	sortByName(out, (*clusterv3.Cluster).GetName)
	return out
}

// The egress gateway's connect-time refusal. Its Envoy resolves an
// external host with the dynamic forward proxy: per filter chain,
// set_filter_state names the host and target port
// (envoy.upstream.dynamic_host, envoy.upstream.dynamic_port), the SNI
// dynamic forward proxy filter resolves them into the DNS cache (holding
// the connection until it has), and tcp_proxy connects through a dynamic
// forward proxy cluster, which takes the address from that cache. The
// cache's resolved_address_filter drops every answer in the denied
// ranges (spec.MeshConfigSpec.EgressDeniedPrefixes: loopback, link-local,
// unspecified, metadata services, and their IPv4-mapped forms, less what
// MeshConfig allows); a name with no address left fails to resolve, and
// tcp_proxy closes the connection (no healthy upstream). A LOGICAL_DNS
// cluster has no such filter, so the gateway no longer uses one.
const (
	setFilterStateFilter = "envoy.filters.network.set_filter_state"
	sniDFPFilter         = "envoy.filters.network.sni_dynamic_forward_proxy"
	dfpCluster           = "envoy.clusters.dynamic_forward_proxy"
	dynamicHostKey       = "envoy.upstream.dynamic_host"
	dynamicPortKey       = "envoy.upstream.dynamic_port"
)

// egressDNSCache is the gateway's DNS cache configuration, the same in its
// filters and clusters (Envoy requires it). Its name carries a hash of the
// denied ranges: Envoy refuses a cache of an existing name with other
// settings, so a MeshConfig change makes a new cache.
func egressDNSCache(denied []netip.Prefix) *dfpcommonv3.DnsCacheConfig {
	h := fnv.New64a()
	ranges := make([]*xdscorev3.CidrRange, len(denied))
	for i, p := range denied {
		h.Write([]byte(p.String() + ","))
		ranges[i] = &xdscorev3.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
	}
	return &dfpcommonv3.DnsCacheConfig{
		Name:                  fmt.Sprintf("egress_gateway_%016x", h.Sum64()),
		DnsLookupFamily:       clusterv3.Cluster_V4_PREFERRED,
		ResolvedAddressFilter: &matcherv3.AddressMatcher{Ranges: ranges},
	}
}

// filterStateConst sets the connection's filter state key to value.
func filterStateConst(key, value string) *filterstatev3.FilterStateValue {
	return &filterstatev3.FilterStateValue{
		Key: &filterstatev3.FilterStateValue_ObjectKey{ObjectKey: key},
		Value: &filterstatev3.FilterStateValue_FormatString{FormatString: &corev3.SubstitutionFormatString{
			Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
				Specifier: &corev3.DataSource_InlineString{InlineString: value},
			}},
		}},
		ReadOnly: true,
	}
}

// egressViaGatewayCluster is a source's cluster for r through its egress
// gateway.
func (b *builder) egressViaGatewayCluster(trustDomain string, r spec.EgressRoute) *clusterv3.Cluster {
	tls := upstreamTLS(Envoy, []string{r.Gateway.ServiceAccount.SPIFFEID(trustDomain)}, false)
	tls.Sni = spec.EgressGatewaySNI(r.Host, r.Number)
	return &clusterv3.Cluster{
		Name:                 egressClusterName(r),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource, ServiceName: EDSName(r.Gateway.Service)},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		ConnectTimeout:       durationpb.New(connectTimeout),
		TransportSocket:      b.transportSocket(tls),
	}
}

// egressGateways returns the egress gateways of routes (appended to svcs,
// sorted and distinct): their machines' endpoints are the proxy's too.
func egressGateways(svcs []mesh.MeshService, routes []spec.EgressRoute) []mesh.MeshService {
	added := false
	for _, r := range routes {
		if !r.Gateway.IsZero() {
			svcs, added = append(svcs, r.Gateway.Service), true
		}
	}
	if added {
		slices.SortFunc(svcs, mesh.MeshService.Compare)
		svcs = slices.Compact(svcs)
	}
	return svcs
}

// egressGatewayOf returns the EgressGateway a gateway proxy is enrolled
// as, if it is one (else it is an ingress gateway's).
func egressGatewayOf(m Mesh, p Proxy) (spec.EgressGatewayInfo, bool) {
	if p.Flavor != Gateway {
		return spec.EgressGatewayInfo{}, false
	}
	return m.Spec().EgressGateway(p.Service)
}

func egressGatewayListeners(m Mesh, p Proxy, gw spec.EgressGatewayInfo) ([]*listenerv3.Listener, error) {
	b := &builder{}
	l := b.egressGatewayListener(m, p, gw, m.Spec().EgressGatewayRoutes(gw.Service))
	if b.err != nil {
		return nil, b.err
	}
	if l == nil {
		return nil, nil
	}
	return []*listenerv3.Listener{l}, nil
}

func egressGatewayClustersOf(m Mesh, gw spec.EgressGatewayInfo) ([]*clusterv3.Cluster, error) {
	b := &builder{}
	out := b.egressGatewayClusters(m.Spec().EgressGatewayRoutes(gw.Service), m.Spec().MeshConfig().EgressDeniedPrefixes())
	if b.err != nil {
		return nil, b.err
	}
	return out, nil
}

// egressGatewayInputs: everything the gateway's resources are rendered
// from, as a fingerprint (the gateway field).
func egressGatewayInputs(m Mesh, p Proxy, gw spec.EgressGatewayInfo) (Inputs, error) {
	b, err := json.Marshal(struct {
		Gateway spec.EgressGatewayInfo
		Routes  []spec.EgressGatewayRoute
		Denied  []netip.Prefix
	}{gw, m.Spec().EgressGatewayRoutes(gw.Service), m.Spec().MeshConfig().EgressDeniedPrefixes()})
	if err != nil {
		return Inputs{}, fmt.Errorf("render: egress gateway %s: %w", gw.Service, err)
	}
	return Inputs{self: spec.ServiceInfo{Service: p.Service, ServiceAccount: gw.ServiceAccount}, gateway: "egress:" + string(b)}, nil
}
