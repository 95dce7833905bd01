package render

import (
	"strconv"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Refusals. A proxyless gRPC client learns that a listener does not exist
// only from its own 15 s does-not-exist timer (gRPC-Go ignores a name
// missing from a state-of-the-world answer until then), so a caller that
// dials an upstream it may not call, or a name that is no service at all,
// would fail after 15 s with a vague UNAVAILABLE. Instead the server gives
// it, under the name it asked for, an API listener that refuses every RPC
// at once: the fault filter (gRFC A33, in gRPC-Go, C-core and grpc-js)
// aborts 100% of RPCs with a gRPC status before the router picks a
// connection, so the route's cluster is never called. The route still
// needs a cluster that resolves (gRPC waits for every routed cluster
// before it sends an RPC): RefusalCluster, an EDS cluster whose load
// assignment, RefusalLoadAssignment, is always empty. Both are the same for
// every proxy; the names cannot clash with a service's (no "/").
const (
	RefusalClusterName = "osm-refuse|grpc"
	refusalEDSName     = "osm-refuse"
	faultFilter        = "envoy.filters.http.fault"
)

// gRPC status codes of refusals (google.golang.org/grpc/codes).
const (
	// CodePermissionDenied: the name is a port of a Service in the mesh
	// that the caller may not call (no TrafficTarget allows it).
	CodePermissionDenied uint32 = 7
	// CodeNotFound: the name is no HTTP or gRPC port of any Service in
	// the mesh (a typo, or a Service not applied yet). Not UNAVAILABLE,
	// which gRPC uses for transient failures that are worth retrying and
	// which is what the 15 s timeout gives: a name that is not in the
	// mesh stays that way until an operator applies it.
	CodeNotFound uint32 = 5
)

// RefusalCode returns the gRPC status a refusal listener named name fails
// RPCs with: CodePermissionDenied when name is <svc>.<ns>.mesh:<port> of
// an HTTP or gRPC port of a Service in m, CodeNotFound otherwise.
func RefusalCode(m Mesh, name string) uint32 {
	host, portStr, ok := strings.Cut(name, ":")
	if !ok {
		return CodeNotFound
	}
	svcName, ns, ok := strings.Cut(strings.TrimSuffix(host, ".mesh"), ".")
	if !ok || !strings.HasSuffix(host, ".mesh") || strings.Contains(ns, ".") || m.Spec() == nil {
		return CodeNotFound
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return CodeNotFound
	}
	info, ok := m.Spec().Service(mesh.MeshService{Namespace: ns, Name: svcName})
	if !ok {
		return CodeNotFound
	}
	for _, p := range info.Ports {
		if p.Port == port && isHTTP(p) {
			return CodePermissionDenied
		}
	}
	return CodeNotFound
}

// RefusalListener returns the gRPC API listener named name that fails
// every RPC at once with RefusalCode(m, name) ("RPC terminated due to
// fault injection" in gRPC-Go). Its route goes to RefusalClusterName, so
// a proxy given it must also be given RefusalCluster and
// RefusalLoadAssignment. The HTTP connection manager is the same for
// every listener with the same code (shared through m.Memo): only the
// listener's name differs.
func RefusalListener(m Mesh, name string) (*listenerv3.Listener, error) {
	code := RefusalCode(m, name)
	b := &builder{}
	api := memoised(m, b, memoKey{kind: memoRefusal, name: strconv.FormatUint(uint64(code), 10)}, func() *listenerv3.ApiListener {
		abort := &faultv3.HTTPFault{Abort: &faultv3.FaultAbort{
			ErrorType:  &faultv3.FaultAbort_GrpcStatus{GrpcStatus: code},
			Percentage: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED},
		}}
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix: refusalEDSName,
			CodecType:  hcmv3.HttpConnectionManager_AUTO,
			RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: routeConfig(refusalEDSName, &routev3.Route{
				Match:  prefixMatch(),
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: RefusalClusterName}}},
			})},
			HttpFilters: []*hcmv3.HttpFilter{
				{Name: faultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: b.any(abort)}},
				routerHTTPFilter,
			},
		}
		return &listenerv3.ApiListener{ApiListener: b.any(hcm)}
	})
	if b.err != nil {
		return nil, b.err
	}
	return &listenerv3.Listener{Name: name, ApiListener: api}, nil
}

// RefusalCluster returns the cluster refusal listeners route to: EDS,
// with the always empty RefusalLoadAssignment. It is never connected to,
// so it has no TLS.
func RefusalCluster() *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 RefusalClusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource, ServiceName: refusalEDSName},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

// RefusalLoadAssignment returns RefusalCluster's load assignment: no
// endpoints.
func RefusalLoadAssignment() *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: refusalEDSName}
}
