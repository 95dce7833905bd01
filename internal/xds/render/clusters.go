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
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// connectTimeout is the connect timeout of the clusters no
// failure-handling policy governs: the local application's (loopback),
// egress and gateway clusters.
const connectTimeout = time.Second

// Clusters returns the proxy's clusters, sorted by name: an EDS cluster per
// upstream service and split backend it may call (upstream mTLS with the
// proxy's service certificate, the peer checked against the SPIFFE ID of
// the account the upstream runs as), and for Envoy a STATIC cluster per
// port of its own service for the local application on 127.0.0.1:targetPort.
func Clusters(m Mesh, p Proxy) ([]*clusterv3.Cluster, error) {
	out, _, err := clusters(m, p, false, nil)
	return out, err
}

// ClusterResources returns the clusters of Clusters, the EDS clusters of
// the proxy's upstreams and its local clusters written as bytes from the
// stamp of their shape (see stamp) rather than built: the xDS
// publisher's form. It needs
// m.Memo, which keeps the stamps and what was written from them; without
// one every cluster is a message. The encoded ones are appended to enc
// (nil, or a buffer the caller reuses).
func ClusterResources(m Mesh, p Proxy, enc []Encoded) ([]*clusterv3.Cluster, []Encoded, error) {
	return clusters(m, p, m.Memo != nil, enc)
}

func clusters(m Mesh, p Proxy, encode bool, enc []Encoded) ([]*clusterv3.Cluster, []Encoded, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, nil, err
	}
	if gw, ok := egressGatewayOf(m, p); ok {
		out, err := egressGatewayClustersOf(m, gw)
		return out, nil, err
	}
	if p.Flavor == Gateway {
		out, err := gatewayClusters(m, p)
		return out, nil, err
	}
	b := &builder{}
	var out []*clusterv3.Cluster
	upstreams := upstreamServices(plan(m, p, self))
	if encode {
		enc = slices.Grow(enc, len(upstreams)+len(self.Ports))
	}
	for _, svc := range upstreams {
		info, _ := m.Spec().Service(svc)
		if encode {
			if e, ok := encodedEDSCluster(m, info, p.Flavor); ok {
				enc = append(enc, e)
				continue
			}
		}
		out = append(out, memoised(m, b, memoKey{kind: memoCluster, svc: svc, flavor: p.Flavor}, func() *clusterv3.Cluster {
			return b.edsCluster(m, info, p.Flavor, clusterPolicyOf(m.Spec().ServiceResilience(svc), p.Flavor))
		}))
	}
	if p.Flavor == Envoy {
		for _, port := range sortedPorts(self) {
			if encode {
				if e, ok := encodedLocalCluster(m, self.Service, port); ok {
					enc = append(enc, e)
					continue
				}
			}
			out = append(out, b.localCluster(self.Service, port))
		}
	}
	out = append(out, b.egressClusters(m.TrustDomain(), egressRoutes(m, p, self))...)
	if b.err != nil {
		return nil, nil, b.err
	}
	sortByName(out, (*clusterv3.Cluster).GetName)
	return out, enc, nil
}

// edsCluster is the cluster of calls to info's service, with its
// failure-handling policy pol (see resilience.go).
func (b *builder) edsCluster(m Mesh, info spec.ServiceInfo, f Flavor, pol clusterPolicy) *clusterv3.Cluster {
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
	pol.apply(c, f)
	if f == Envoy && hasHTTP(info) {
		// The upstream is an Envoy inbound listener that speaks HTTP/1.1
		// and HTTP/2; ALPN picks, so gRPC keeps HTTP/2 end to end.
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOpts: b.any(&httpv3.HttpProtocolOptions{
			CommonHttpProtocolOptions: pol.commonHTTPOptions(),
			UpstreamProtocolOptions:   &httpv3.HttpProtocolOptions_AutoConfig{AutoConfig: &httpv3.HttpProtocolOptions_AutoHttpConfig{}},
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
// endpoints, each address:port once, sorted. It is the message of
// [EncodeClusterLoadAssignment]'s bytes (which the xDS publisher sends
// without building it).
func ClusterLoadAssignment(m Mesh, svc mesh.MeshService) (*endpointv3.ClusterLoadAssignment, error) {
	b, err := EncodeClusterLoadAssignment(nil, m, svc)
	if err != nil {
		return nil, err
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := proto.Unmarshal(b, cla); err != nil {
		return nil, fmt.Errorf("render: load assignment of %s: %w", svc, err) // a bug: the encoder wrote what protobuf cannot read
	}
	return cla, nil
}

// Field numbers of the messages EncodeClusterLoadAssignment writes
// (envoy/config/endpoint/v3 and envoy/config/core/v3).
const (
	claClusterName     = 1 // ClusterLoadAssignment.cluster_name
	claEndpoints       = 2 // ClusterLoadAssignment.endpoints (LocalityLbEndpoints)
	localityLocality   = 1 // LocalityLbEndpoints.locality (Locality)
	localityLbEndpoint = 2 // LocalityLbEndpoints.lb_endpoints (LbEndpoint)
	localityWeight     = 3 // LocalityLbEndpoints.load_balancing_weight (UInt32Value)
	lbEndpointEndpoint = 1 // LbEndpoint.endpoint (Endpoint), of the oneof host_identifier
	endpointAddress    = 1 // Endpoint.address (Address)
	addressSocket      = 1 // Address.socket_address (SocketAddress), of the oneof address
	socketAddr         = 2 // SocketAddress.address
	socketPortValue    = 3 // SocketAddress.port_value, of the oneof port_specifier
	uint32Value        = 1 // UInt32Value.value
)

// EncodeClusterLoadAssignment appends to b the wire encoding of svc's
// load assignment (see [ClusterLoadAssignment]) and returns it: byte for
// byte what protobuf-go's deterministic marshal of the message gives
// (TestEncodeClusterLoadAssignment), written directly. A load assignment
// is rebuilt at every change of its service's endpoints, and a full
// generation builds one per service: as a message it was 71 messages
// for ten endpoints, marshalled and validated one by one.
//
// What protoc-gen-validate would check of the result holds by
// construction: the cluster name is not empty (checked), every address
// is a valid IP's text and every port in 1..65535 (others are left out),
// and the locality's weight is 1. Each address:port appears once.
func EncodeClusterLoadAssignment(b []byte, m Mesh, svc mesh.MeshService) ([]byte, error) {
	if m.View == nil {
		return nil, fmt.Errorf("render: no mesh view: set Mesh.View")
	}
	name := EDSName(svc)
	if name == "" {
		return nil, fmt.Errorf("render: load assignment of %q: no name", svc)
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
	b = protowire.AppendTag(b, claClusterName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	if len(addrs) == 0 {
		return b, nil
	}
	// The locality's size first, then its bytes: each endpoint's
	// address text is written twice (into text, then into b).
	var text [64]byte // the longest IPv6 address with a zone fits
	size := 2 + 4     // locality {} and load_balancing_weight {value: 1}
	for _, ap := range addrs {
		size += sizeNested(lbEndpointSize(len(ap.Addr().AppendTo(text[:0])), ap.Port()))
	}
	b = slices.Grow(b, sizeNested(size))
	b = protowire.AppendTag(b, claEndpoints, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, localityLocality, protowire.BytesType)
	b = protowire.AppendVarint(b, 0)
	for _, ap := range addrs {
		a := ap.Addr().AppendTo(text[:0])
		sock := socketAddressSize(len(a), ap.Port())
		addr := sizeNested(sock)
		ep := sizeNested(addr)
		b = protowire.AppendTag(b, localityLbEndpoint, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeNested(ep)))
		b = protowire.AppendTag(b, lbEndpointEndpoint, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(ep))
		b = protowire.AppendTag(b, endpointAddress, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(addr))
		b = protowire.AppendTag(b, addressSocket, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sock))
		b = protowire.AppendTag(b, socketAddr, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
		b = protowire.AppendTag(b, socketPortValue, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(ap.Port()))
	}
	b = protowire.AppendTag(b, localityWeight, protowire.BytesType)
	b = protowire.AppendVarint(b, 2)
	b = protowire.AppendTag(b, uint32Value, protowire.VarintType)
	return protowire.AppendVarint(b, 1), nil
}

// sizeNested is the size of a length-delimited field of field number
// below 16 (a one-byte tag) holding n bytes.
func sizeNested(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// socketAddressSize is the size of a SocketAddress of an address text of
// n bytes and port.
func socketAddressSize(n int, port uint16) int {
	return sizeNested(n) + 1 + protowire.SizeVarint(uint64(port))
}

// lbEndpointSize is the size of the LbEndpoint of an address text of n
// bytes and port.
func lbEndpointSize(n int, port uint16) int {
	return sizeNested(sizeNested(sizeNested(socketAddressSize(n, port))))
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
