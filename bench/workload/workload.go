// Package workload is W, the benchmark's mesh: services, endpoints and
// proxies, who calls whom, which proxies a change reaches, and the Envoy
// resources (clusters, endpoints, listeners) the peer servers serve for it.
// Everything derives from three numbers, so the harness and the server
// processes build the same W from the same flags. It imports nothing of
// osm-vm or of the rest of the harness.
package workload

import (
	"fmt"
	"net/netip"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Namespace is the namespace every benchmark service lives in.
const Namespace = "bench"

// Workload is W: services × endpoints, proxies spread over the services, and
// a call graph in which every service calls up to five others. Two services
// are special so that the change metrics have a fixed scope:
//   - service 0 (the hub) is called by every other service: a change to it
//     affects every proxy but the hub's own (M2);
//   - service 1 is called by every twentieth service: a change to it affects
//     5% of the proxies (M3).
//
// No service calls itself.
//
// Everything is derived from the three numbers, so the generator and the
// server processes build the same workload from the same flags.
type Workload struct {
	Services  int // number of mesh services
	Endpoints int // endpoints per service
	Proxies   int // proxies in the fleet (proxy p belongs to service p % Services)
	// Wide makes every service call every service: the gateway-like view
	// M9 uses to find the largest message.
	Wide bool
}

// upstreamsPerService is how many services each service may call.
const upstreamsPerService = 5

// ServiceName is the name of service i.
func (w Workload) ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ClusterName is the Envoy cluster (and ClusterLoadAssignment) name of service i.
func (w Workload) ClusterName(i int) string { return w.ServiceName(i) + "." + Namespace }

// ProxyService is the service proxy p runs for.
func (w Workload) ProxyService(p int) int { return p % w.Services }

// ProxyCN is the certificate common name (and xDS node ID) of bench proxy p
// for the L and F servers: <uuid>.<service>.<namespace>, like osm-vm's.
func (w Workload) ProxyCN(p int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x.%s.%s", p, p, w.ServiceName(w.ProxyService(p)), Namespace)
}

// ProxyAddr is the address proxy p's VM advertises (data only).
func (w Workload) ProxyAddr(p int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 254, byte(p >> 8), byte(p)})
}

// Upstreams lists the services service s calls, hub first; never s itself.
func (w Workload) Upstreams(s int) []int {
	if w.Wide {
		all := make([]int, w.Services)
		for i := range all {
			all[i] = i
		}
		return all
	}
	var up []int
	if s != 0 {
		up = append(up, 0)
	}
	if s%20 == 0 && s != 1 {
		up = append(up, 1)
	}
	for k := 0; len(up) < upstreamsPerService && k < 4*upstreamsPerService; k++ {
		u := (s*7 + k*131 + 3) % w.Services
		if u <= 1 || u == s || contains(up, u) {
			continue
		}
		up = append(up, u)
	}
	return up
}

// ServedServices is how many services have proxies (proxies+extra of them
// in all): services [0, ServedServices) do, the others are only called.
func (w Workload) ServedServices(extra int) int { return min(w.Services, w.Proxies+extra) }

// Callers lists the services that call service u.
func (w Workload) Callers(u int) []int {
	var out []int
	for s := range w.Services {
		if contains(w.Upstreams(s), u) {
			out = append(out, s)
		}
	}
	return out
}

// AffectedProxies counts the proxies whose config includes service u.
func (w Workload) AffectedProxies(u int) []int {
	callers := map[int]bool{}
	for _, s := range w.Callers(u) {
		callers[s] = true
	}
	var out []int
	for p := range w.Proxies {
		if callers[w.ProxyService(p)] {
			out = append(out, p)
		}
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// EndpointAddr is the address of endpoint j of service i (documentation
// and private ranges: data only, nothing ever connects to them).
func (w Workload) EndpointAddr(i, j int) netip.Addr {
	n := i*w.Endpoints + j + 1
	return netip.AddrFrom4([4]byte{10, byte(n >> 16 & 0x7f), byte(n >> 8), byte(n)})
}

// ChangedAddr is the address a change with sequence number seq gives
// endpoint 0 of the changed service: 10.255.x.y, unique per change, never
// one of the workload's own addresses (those stay below 10.128.0.0).
func ChangedAddr(seq int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 255, byte(seq >> 8), byte(seq)})
}

// MarkerBytes is how an address appears inside a marshalled
// SocketAddress (field 2, string): the client looks for these bytes to
// recognise the response that carries a change without decoding it.
func MarkerBytes(a netip.Addr) []byte {
	s := a.String()
	return append([]byte{0x12, byte(len(s))}, s...)
}

// EndpointPort is the port of every workload endpoint.
const EndpointPort = 8080

// CLA builds the load assignment of service i; override, when valid,
// replaces the address of endpoint 0.
func (w Workload) CLA(i int, override netip.Addr) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, w.Endpoints)
	for j := range lbs {
		a := w.EndpointAddr(i, j)
		if j == 0 && override.IsValid() {
			a = override
		}
		lbs[j] = &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: a.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: EndpointPort},
			}}},
		}}}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: w.ClusterName(i),
		Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: lbs}},
	}
}

// Cluster builds the EDS cluster of service i.
func (w Workload) Cluster(i int) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 w.ClusterName(i),
		ConnectTimeout:       durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ResourceApiVersion:    corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		}},
	}
}

// Listener builds the outbound listener service s uses to reach upstream u:
// a TCP proxy on u's virtual IP.
func (w Workload) Listener(s, u int) (*listenerv3.Listener, error) {
	tcp, err := anypb.New(&tcpproxyv3.TcpProxy{
		StatPrefix:       "outbound." + w.ServiceName(u),
		ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: w.ClusterName(u)},
	})
	if err != nil {
		return nil, fmt.Errorf("listener %s -> %s: %w", w.ServiceName(s), w.ServiceName(u), err)
	}
	vip := netip.AddrFrom4([4]byte{127, 77, byte(u >> 8), byte(u)})
	return &listenerv3.Listener{
		Name: "outbound." + w.ServiceName(u),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: vip.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: EndpointPort},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       "envoy.filters.network.tcp_proxy",
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: tcp},
		}}}},
	}, nil
}
