package render

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

const connectTimeout = time.Second

// Clusters returns the proxy's clusters, sorted by name: an EDS cluster per
// upstream service and split backend it may call (upstream mTLS with the
// proxy's service certificate, the peer checked against the SPIFFE ID of
// the account the upstream runs as), and for Envoy a STATIC cluster per
// port of its own service for the local application on 127.0.0.1:targetPort.
func Clusters(m Mesh, p Proxy) ([]*clusterv3.Cluster, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, err
	}
	if gw, ok := egressGatewayOf(m, p); ok {
		return egressGatewayClustersOf(m, gw)
	}
	if p.Flavor == Gateway {
		return gatewayClusters(m, p)
	}
	b := &builder{}
	var out []*clusterv3.Cluster
	for _, svc := range upstreamServices(plan(m, p, self)) {
		info, _ := m.Spec().Service(svc)
		out = append(out, memoised(m, b, memoKey{kind: memoCluster, svc: svc, flavor: p.Flavor}, func() *clusterv3.Cluster {
			return b.edsCluster(m, info, p.Flavor)
		}))
	}
	if p.Flavor == Envoy {
		for _, port := range sortedPorts(self) {
			out = append(out, b.localCluster(self.Service, port))
		}
	}
	out = append(out, b.egressClusters(m.TrustDomain(), egressRoutes(m, p, self))...)
	if b.err != nil {
		return nil, b.err
	}
	sortByName(out, (*clusterv3.Cluster).GetName)
	return out, nil
}

func (b *builder) edsCluster(m Mesh, info spec.ServiceInfo, f Flavor) *clusterv3.Cluster {
	eds := EDSName(info.Service)
	c := &clusterv3.Cluster{
		Name:                 clusterName(eds, f),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		TransportSocket:      b.transportSocket(upstreamTLS(f, []string{info.ServiceAccount.SPIFFEID(m.TrustDomain())}, hasHTTP(info))),
	}
	// Envoy asks for the cluster's name when service_name is empty; the
	// gRPC cluster's name differs from the EDS name it shares. Leaving out
	// what is implied keeps a 10,000-cluster CDS response under gRPC's
	// 4 MiB message limit.
	if eds != c.Name {
		c.EdsClusterConfig.ServiceName = eds
	}
	if f == Envoy {
		c.ConnectTimeout = durationpb.New(connectTimeout)
	}
	if f == Envoy && hasHTTP(info) {
		// The upstream is an Envoy inbound listener that speaks HTTP/1.1
		// and HTTP/2; ALPN picks, so gRPC keeps HTTP/2 end to end.
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOpts: b.any(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_AutoConfig{AutoConfig: &httpv3.HttpProtocolOptions_AutoHttpConfig{}},
		})}
	}
	return c
}

func (b *builder) localCluster(svc mesh.MeshService, port spec.ServicePort) *clusterv3.Cluster {
	name := LocalClusterName(svc, port.Port)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{
				lbEndpoint(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port.TargetPort))),
			}}},
		},
	}
	if port.AppProtocol == "grpc" {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOpts: b.any(&httpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
			}},
		})}
	}
	return c
}

func lbEndpoint(ap netip.AddrPort) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: socketAddress(ap.Addr(), int(ap.Port())),
	}}}
}

// ClusterLoadAssignment returns the EDS resource of svc, named EDSName(svc)
// and shared by both flavours: one locality (weight 1) with the service's
// endpoints, each address:port once, sorted.
func ClusterLoadAssignment(m Mesh, svc mesh.MeshService) (*endpointv3.ClusterLoadAssignment, error) {
	if m.View == nil {
		return nil, fmt.Errorf("render: no mesh view: set Mesh.View")
	}
	eps := m.Endpoints(svc)
	addrs := make([]netip.AddrPort, 0, len(eps))
	for _, e := range eps {
		if e.IP.IsValid() && e.Port != 0 {
			addrs = append(addrs, e.AddrPort())
		}
	}
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	addrs = slices.Compact(addrs)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: EDSName(svc)}
	if len(addrs) > 0 {
		loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{}, LoadBalancingWeight: wrapperspb.UInt32(1)}
		// The messages of all endpoints in one allocation (a load
		// assignment is rebuilt at every change of its endpoints).
		slab := make([]lbEndpointMessages, len(addrs))
		loc.LbEndpoints = make([]*endpointv3.LbEndpoint, len(addrs))
		for i, ap := range addrs {
			loc.LbEndpoints[i] = slab[i].of(ap)
		}
		cla.Endpoints = []*endpointv3.LocalityLbEndpoints{loc}
	}
	return cla, nil
}

// lbEndpointMessages are the messages of one endpoint of a load
// assignment (as lbEndpoint builds them), allocated together.
type lbEndpointMessages struct {
	lb   endpointv3.LbEndpoint
	host endpointv3.LbEndpoint_Endpoint
	ep   endpointv3.Endpoint
	addr corev3.Address
	sock corev3.Address_SocketAddress
	sa   corev3.SocketAddress
	port corev3.SocketAddress_PortValue
}

// of fills the messages with ap and returns the LbEndpoint, equal to
// lbEndpoint(ap).
func (x *lbEndpointMessages) of(ap netip.AddrPort) *endpointv3.LbEndpoint {
	x.port.PortValue = uint32(ap.Port())
	x.sa.Address, x.sa.PortSpecifier = ap.Addr().String(), &x.port
	x.sock.SocketAddress = &x.sa
	x.addr.Address = &x.sock
	x.ep.Address = &x.addr
	x.host.Endpoint = &x.ep
	x.lb.HostIdentifier = &x.host
	return &x.lb
}

// LoadAssignments returns the EDS resources of every EDS cluster the proxy
// receives (the services Dependencies lists), sorted by name.
func LoadAssignments(m Mesh, p Proxy) ([]*endpointv3.ClusterLoadAssignment, error) {
	deps, err := Dependencies(m, p)
	if err != nil {
		return nil, err
	}
	var out []*endpointv3.ClusterLoadAssignment
	for _, svc := range deps {
		cla, err := ClusterLoadAssignment(m, svc)
		if err != nil {
			return nil, err
		}
		out = append(out, cla)
	}
	return out, nil
}

// hasHTTP reports whether a service has an HTTP or gRPC port (a TCP-only
// upstream needs no HTTP protocol options or ALPN).
func hasHTTP(info spec.ServiceInfo) bool {
	for _, p := range info.Ports {
		if isHTTP(p) {
			return true
		}
	}
	return false
}
