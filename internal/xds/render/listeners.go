package render

import (
	"net/netip"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Listeners returns the proxy's listeners, sorted by name: those of
// [PerProxyListeners] and [SharedListeners].
//
// Envoy: an inbound listener per port of the proxy's service on
// Address:port (mTLS, RBAC, forwarding to the local cluster) and an outbound
// listener on VIP:port for every upstream port the service may call.
// gRPC: an API listener per upstream HTTP/gRPC port and a server listener
// per HTTP/gRPC port of the proxy's service on Address:port.
func Listeners(m Mesh, p Proxy) ([]*listenerv3.Listener, error) {
	own, err := PerProxyListeners(m, p)
	if err != nil {
		return nil, err
	}
	shared, err := SharedListeners(m, p)
	if err != nil {
		return nil, err
	}
	out := append(own, shared...)
	sortByName(out, (*listenerv3.Listener).GetName)
	return out, nil
}

// PerProxyListeners returns the listeners that bind the proxy's own
// address, sorted by name: Envoy's inbound listeners and gRPC's server
// listeners (the listeners [PerProxy] names).
func PerProxyListeners(m Mesh, p Proxy) ([]*listenerv3.Listener, error) {
	out, _, err := perProxyListeners(m, p, false, nil)
	return out, err
}

// PerProxyListenerResources returns the listeners of PerProxyListeners,
// Envoy's inbound listeners written as bytes from the stamp of their shape
// (see stamp), their RBAC rules built, validated and encoded once per
// service and port: the xDS publisher's form. It needs m.Memo; without
// one every listener is a message. The encoded ones are appended to enc
// (nil, or a buffer the caller reuses).
func PerProxyListenerResources(m Mesh, p Proxy, enc []Encoded) ([]*listenerv3.Listener, []Encoded, error) {
	return perProxyListeners(m, p, m.Memo != nil, enc)
}

func perProxyListeners(m Mesh, p Proxy, encode bool, enc []Encoded) ([]*listenerv3.Listener, []Encoded, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, nil, err
	}
	if gw, ok := egressGatewayOf(m, p); ok {
		out, err := egressGatewayListeners(m, p, gw)
		return out, nil, err
	}
	if p.Flavor == Gateway {
		out, err := gatewayListeners(m, p)
		return out, nil, err
	}
	b := &builder{}
	var out []*listenerv3.Listener
	for _, port := range sortedPorts(self) {
		if p.Flavor == GRPC {
			if isHTTP(port) {
				out = append(out, b.grpcServerListener(m, p, self, port))
			}
			continue
		}
		if encode {
			if e, ok := encodedInboundListener(m, p, self, port); ok {
				enc = append(enc, e)
				continue
			}
		}
		out = append(out, b.inboundListener(m, p, self, port))
	}
	if b.err != nil {
		return nil, nil, b.err
	}
	sortByName(out, (*listenerv3.Listener).GetName)
	return out, enc, nil
}

// SharedListeners returns the listeners that are the same for every proxy
// of the service and flavour, sorted by name: Envoy's outbound listeners
// and gRPC's API listeners, one per upstream port the service may call.
func SharedListeners(m Mesh, p Proxy) ([]*listenerv3.Listener, error) {
	out, _, err := sharedListeners(m, p, false, nil)
	return out, err
}

// SharedListenerResources returns the listeners of SharedListeners, the
// outbound listeners of upstreams called directly (no split, no Gateway
// API routes) written as bytes from the stamp of their shape (see
// stamp): the xDS publisher's form. It needs m.Memo; without one every
// listener is a message. The encoded ones are appended to enc (nil, or a
// buffer the caller reuses).
func SharedListenerResources(m Mesh, p Proxy, enc []Encoded) ([]*listenerv3.Listener, []Encoded, error) {
	return sharedListeners(m, p, m.Memo != nil, enc)
}

func sharedListeners(m Mesh, p Proxy, encode bool, enc []Encoded) ([]*listenerv3.Listener, []Encoded, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, nil, err
	}
	if p.Flavor == Gateway {
		return nil, nil, nil // its listeners bind its address
	}
	b := &builder{}
	var out []*listenerv3.Listener
	outbounds := plan(m, p, self)
	if encode {
		enc = slices.Grow(enc, len(outbounds))
	}
	for _, o := range outbounds {
		if p.Flavor == GRPC {
			out = append(out, memoised(m, b, memoKey{kind: memoAPIListener, name: o.routeName(GRPC)}, func() *listenerv3.Listener { return b.apiListener(o) }))
			continue
		}
		if encode {
			if e, ok := encodedOutboundListener(m, o); ok {
				enc = append(enc, e)
				continue
			}
		}
		out = append(out, memoised(m, b, memoKey{kind: memoOutboundListener, name: o.routeName(Envoy)}, func() *listenerv3.Listener { return b.outboundListener(o) }))
	}
	for _, r := range egressRoutes(m, p, self) {
		out = append(out, b.egressListener(r))
	}
	if b.err != nil {
		return nil, nil, b.err
	}
	sortByName(out, (*listenerv3.Listener).GetName)
	return out, enc, nil
}

func socketAddress(ip netip.Addr, port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       ip.String(),
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

func (b *builder) httpRBACFilter(rules *rbacv3.RBAC) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: httpRBACFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: b.any(&rbachttpv3.RBAC{Rules: rules})}}
}

func (b *builder) networkFilter(name string, m proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: b.any(m)}}
}

func rdsHCM(statPrefix, routeName string, filters ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: routeName,
			ConfigSource:    adsSource,
		}},
		HttpFilters: filters,
	}
}

// inboundListener binds the proxy's address; its filter chain is the same
// for every proxy of the service (shared through the Memo).
func (b *builder) inboundListener(m Mesh, p Proxy, self spec.ServiceInfo, port spec.ServicePort) *listenerv3.Listener {
	name := InboundName(self.Service, port.Port)
	chain := memoised(m, b, memoKey{kind: memoInboundChain, name: name}, func() *listenerv3.FilterChain {
		return b.inboundChain(self.Service, port, inboundRBAC(m, self.Service, port, Envoy), m.Spec().InboundRateLimit(self.Service))
	})
	return inboundListenerOf(name, p.Address, port, chain)
}

// inboundChain is the filter chain of svc's inbound listener on port,
// allowing what rules allow, limited by rl (the Service's inbound rate
// limits; nil: none, see ratelimit.go).
func (b *builder) inboundChain(svc mesh.MeshService, port spec.ServicePort, rules *rbacv3.RBAC, rl *resilience.RateLimit) *listenerv3.FilterChain {
	name := InboundName(svc, port.Port)
	var limit *listenerv3.Filter
	if rl != nil && rl.TCP != nil {
		limit = b.tcpRateLimitFilter(name, rl.TCP)
	}
	var filters []*listenerv3.Filter
	if isHTTP(port) {
		httpFilters := []*hcmv3.HttpFilter{b.httpRBACFilter(rules), routerHTTPFilter}
		if limitsHTTP(rl) {
			httpFilters = []*hcmv3.HttpFilter{httpFilters[0], b.httpRateLimitHTTPFilter(name), routerHTTPFilter}
		}
		if limit != nil {
			filters = append(filters, limit)
		}
		filters = append(filters, b.networkFilter(hcmFilter, rdsHCM(name, name, httpFilters...)))
	} else {
		filters = append(filters, b.networkFilter(networkRBACFilter, &rbacnetv3.RBAC{StatPrefix: name, Rules: rules}))
		if limit != nil {
			filters = append(filters, limit)
		}
		filters = append(filters, b.networkFilter(tcpProxyFilter, &tcpproxyv3.TcpProxy{
			StatPrefix:       name,
			ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: LocalClusterName(svc, port.Port)},
		}))
	}
	return &listenerv3.FilterChain{Filters: filters, TransportSocket: downstreamSocket[Envoy]}
}

// inboundListenerOf is the inbound listener name on addr:port with chain.
func inboundListenerOf(name string, addr netip.Addr, port spec.ServicePort, chain *listenerv3.FilterChain) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(addr, port.Port),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		FilterChains:     []*listenerv3.FilterChain{chain},
	}
}

func (b *builder) outboundListener(o outbound) *listenerv3.Listener {
	name := o.routeName(Envoy)
	var filter *listenerv3.Filter
	if isHTTP(o.port) {
		filter = b.networkFilter(hcmFilter, rdsHCM(name, name, o.httpFilters()...))
	} else {
		tp := &tcpproxyv3.TcpProxy{StatPrefix: name}
		if len(o.split) > 0 {
			var ws []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight
			for _, bk := range o.split {
				ws = append(ws, &tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{Name: ClusterName(bk.svc, Envoy), Weight: bk.weight})
			}
			tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: ws}}
		} else {
			tp.ClusterSpecifier = &tcpproxyv3.TcpProxy_Cluster{Cluster: ClusterName(o.info.Service, Envoy)}
		}
		filter = b.networkFilter(tcpProxyFilter, tp)
	}
	return &listenerv3.Listener{
		Name:             name,
		Address:          socketAddress(o.info.VIP, o.port.Port),
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		FilterChains:     []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{filter}}},
	}
}

func (b *builder) apiListener(o outbound) *listenerv3.Listener {
	name := APIListenerName(o.info, o.port.Port)
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: b.any(rdsHCM(name, o.routeName(GRPC), o.httpFilters()...))},
	}
}

// httpFilters are the HTTP filters of an outbound's listener: the fault
// filter (empty: its routes' typed_per_filter_config says what) when its
// routes inject faults, and the router, last.
func (o outbound) httpFilters() []*hcmv3.HttpFilter {
	if o.call.Fault != nil {
		return []*hcmv3.HttpFilter{faultHTTPFilter, routerHTTPFilter}
	}
	return []*hcmv3.HttpFilter{routerHTTPFilter}
}

// grpcServerListener is what an xDS-enabled gRPC server on Address:port
// asks for: mTLS requiring a client certificate, the inbound RBAC and a
// non-forwarding route (gRPC serves the RPC itself). It has no inbound
// rate limit: gRPC's xDS server does not support local rate limiting.
func (b *builder) grpcServerListener(m Mesh, p Proxy, self spec.ServiceInfo, port spec.ServicePort) *listenerv3.Listener {
	addr := netip.AddrPortFrom(p.Address, uint16(port.Port))
	name := InboundName(self.Service, port.Port)
	chain := memoised(m, b, memoKey{kind: memoGRPCServerChain, name: name}, func() *listenerv3.FilterChain {
		return b.grpcServerChain(m, self, port, name)
	})
	return &listenerv3.Listener{
		Name:             GRPCServerListenerName(addr),
		Address:          socketAddress(p.Address, port.Port),
		TrafficDirection: corev3.TrafficDirection_INBOUND,
		FilterChains:     []*listenerv3.FilterChain{chain},
	}
}

func (b *builder) grpcServerChain(m Mesh, self spec.ServiceInfo, port spec.ServicePort, name string) *listenerv3.FilterChain {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{b.httpRBACFilter(inboundRBAC(m, self.Service, port, GRPC)), routerHTTPFilter},
	}
	return &listenerv3.FilterChain{
		Filters:         []*listenerv3.Filter{b.networkFilter(hcmFilter, hcm)},
		TransportSocket: downstreamSocket[GRPC],
	}
}
