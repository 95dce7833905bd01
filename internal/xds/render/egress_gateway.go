package render

import (
	"encoding/json"
	"fmt"
	"slices"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/durationpb"

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
//	                                          port, tcp_proxy to
//	CDS  egress|<host>|<targetPort>[|tls]     the LOGICAL_DNS cluster of the host, the same one a
//	                                          source gets without a gateway (originateTLS there)
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
				b.networkFilter(tcpProxyFilter, &tcpproxyv3.TcpProxy{
					StatPrefix:       name + "|" + sni,
					ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: egressClusterName(out)},
				}),
			},
		})
	}
	return l
}

// egressGatewayClusters are the gateway's LOGICAL_DNS clusters.
func (b *builder) egressGatewayClusters(routes []spec.EgressGatewayRoute) []*clusterv3.Cluster {
	direct := make([]spec.EgressRoute, len(routes))
	for i, r := range routes {
		direct[i] = spec.EgressRoute{Host: r.Host, EgressPort: r.EgressPort}
	}
	out := b.egressClusters("", direct)
	sortByName(out, (*clusterv3.Cluster).GetName)
	return out
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
	out := b.egressGatewayClusters(m.Spec().EgressGatewayRoutes(gw.Service))
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
	}{gw, m.Spec().EgressGatewayRoutes(gw.Service)})
	if err != nil {
		return Inputs{}, fmt.Errorf("render: egress gateway %s: %w", gw.Service, err)
	}
	return Inputs{self: spec.ServiceInfo{Service: p.Service, ServiceAccount: gw.ServiceAccount}, gateway: "egress:" + string(b)}, nil
}
