package render

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// set is a mutable copy of one proxy's resources.
type set []proto.Message

func (s set) find(t *testing.T, label string) proto.Message {
	t.Helper()
	for _, m := range s {
		if labelOf(m) == label {
			return m
		}
	}
	t.Fatalf("no %s in the set", label)
	return nil
}

func (s set) without(t *testing.T, label string) set {
	t.Helper()
	s.find(t, label)
	var out set
	for _, m := range s {
		if labelOf(m) != label {
			out = append(out, m)
		}
	}
	return out
}

func cloneSet(ms []proto.Message) set {
	out := make(set, len(ms))
	for i, m := range ms {
		out[i] = proto.Clone(m)
	}
	return out
}

// hcmOf returns the (copied) HCM of a listener and a function storing it back.
func hcmOf(t *testing.T, l *listenerv3.Listener) (*hcmv3.HttpConnectionManager, func()) {
	t.Helper()
	a := l.GetApiListener().GetApiListener()
	if a == nil {
		a = l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig()
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	hcm := m.(*hcmv3.HttpConnectionManager)
	return hcm, func() {
		b, err := anypb.New(hcm)
		if err != nil {
			t.Fatal(err)
		}
		proto.Reset(a)
		proto.Merge(a, b)
	}
}

func mustAnyT(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestValidateRejects(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	envoy := renderAll(t, m, Proxy{Service: svc("bookbuyer"), Address: netip.MustParseAddr("127.0.10.1")}).all()
	grpc := renderAll(t, m, Proxy{Service: svc("bookbuyer"), Flavor: GRPC, Address: netip.MustParseAddr("127.0.10.1")}).all()
	const (
		splitRoute   = `route configuration "outbound|default/bookstore|14001"`
		v1Listener   = `listener "outbound|default/bookstore-v1|14001"`
		v1Cluster    = `cluster "default/bookstore-v1"`
		grpcAPI      = `listener "bookstore.default.mesh:14001"`
		grpcV1       = `cluster "default/bookstore-v1|grpc"`
		grpcV1Assign = `load assignment "default/bookstore-v1"`
	)
	for _, tc := range []struct {
		name   string
		flavor Flavor
		base   []proto.Message
		break_ func(t *testing.T, s set) set
		want   string
	}{
		{"dangling RDS name", Envoy, envoy, func(t *testing.T, s set) set { return s.without(t, splitRoute) },
			`references route configuration "outbound|default/bookstore|14001", which is not in the set`},
		{"dangling weighted cluster", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters().Clusters[0].Name = "default/bookstore-v9"
			return s
		}, `references cluster "default/bookstore-v9"`},
		{"dangling route cluster", Envoy, envoy, func(t *testing.T, s set) set { return s.without(t, `cluster "local|default/bookbuyer|14001"`) },
			`route configuration "inbound|default/bookbuyer|14001": references cluster "local|default/bookbuyer|14001"`},
		{"dangling EDS name", Envoy, envoy, func(t *testing.T, s set) set { return s.without(t, grpcV1Assign) },
			`cluster "default/bookstore-v1": references load assignment "default/bookstore-v1"`},
		{"dangling SDS name", Envoy, envoy, func(t *testing.T, s set) set { return s.without(t, `secret "root-ca"`) },
			`references secret "root-ca"`},
		{"duplicate listener address", Envoy, envoy, func(t *testing.T, s set) set {
			l := proto.Clone(s.find(t, v1Listener)).(*listenerv3.Listener)
			l.Name = "copy"
			return append(s, l)
		}, `listener "copy": listens on 127.77.`},
		{"header string_match (C-core 1.51 NACKs it)", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].Match.Headers = append(rc.VirtualHosts[0].Routes[0].Match.Headers, &routev3.HeaderMatcher{
				Name: "x-user", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "a"}}},
			})
			return s
		}, `header matcher "x-user": string_match is refused by gRPC C-core 1.51`},
		{"pseudo-header matcher for gRPC", GRPC, grpc, func(t *testing.T, s set) set {
			for _, m := range s {
				if rc, ok := m.(*routev3.RouteConfiguration); ok {
					rc.VirtualHosts[0].Routes[0].Match.Headers = append(rc.VirtualHosts[0].Routes[0].Match.Headers, &routev3.HeaderMatcher{
						Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: "POST"},
					})
					return s
				}
			}
			t.Fatal("no route configuration in the gRPC set")
			return s
		}, `header matcher ":method": gRPC clients match no pseudo-header`},
		{"duplicate name", Envoy, envoy, func(t *testing.T, s set) set { return append(s, proto.Clone(s.find(t, v1Cluster))) },
			`cluster "default/bookstore-v1" appears twice`},
		{"weights sum to 0", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			for _, c := range rc.VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters().Clusters {
				c.Weight = wrapperspb.UInt32(0)
			}
			return s
		}, "sum to 0"},
		{"weights sum past uint32", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			for _, c := range rc.VirtualHosts[0].Routes[0].GetRoute().GetWeightedClusters().Clusters {
				c.Weight = wrapperspb.UInt32(1<<32 - 1)
			}
			return s
		}, "sum to 8589934590, more than 4294967295 (Envoy and gRPC refuse it)"},
		{"tcp_proxy weights sum past uint32", Envoy, envoy, func(t *testing.T, s set) set {
			l := s.find(t, v1Listener).(*listenerv3.Listener)
			l.FilterChains[0].Filters[0] = &listenerv3.Filter{Name: tcpProxyFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAnyT(t, &tcpproxyv3.TcpProxy{
				StatPrefix: "x",
				ClusterSpecifier: &tcpproxyv3.TcpProxy_WeightedClusters{WeightedClusters: &tcpproxyv3.TcpProxy_WeightedCluster{Clusters: []*tcpproxyv3.TcpProxy_WeightedCluster_ClusterWeight{
					{Name: "default/bookstore-v1", Weight: 1<<32 - 1}, {Name: "default/bookstore-v1", Weight: 1},
				}}},
			})}}
			return s
		}, "sum to 4294967296, more than 4294967295 (kept within uint32"},
		{"Perl-only regex", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `/books(?=/new)`}}
			return s
		}, `regex "/books(?=/new)" is not RE2`},
		{"EDS cluster without eds_cluster_config", Envoy, envoy, func(t *testing.T, s set) set {
			s.find(t, v1Cluster).(*clusterv3.Cluster).EdsClusterConfig = nil
			return s
		}, `cluster "default/bookstore-v1": EDS cluster without eds_cluster_config`},
		{"ValidateAll inside an Any", Envoy, envoy, func(t *testing.T, s set) set {
			l := s.find(t, v1Listener).(*listenerv3.Listener)
			l.FilterChains[0].Filters[0] = &listenerv3.Filter{Name: tcpProxyFilter, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAnyT(t, &tcpproxyv3.TcpProxy{
				ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: "default/bookstore-v1"},
			})}}
			return s
		}, "TcpProxy.StatPrefix"},
		{"ValidateAll on the resource", Envoy, envoy, func(t *testing.T, s set) set {
			s.find(t, splitRoute).(*routev3.RouteConfiguration).VirtualHosts[0].Domains = nil
			return s
		}, "VirtualHost.Domains"},
		{"Any of the wrong type", Envoy, envoy, func(t *testing.T, s set) set {
			l := s.find(t, v1Listener).(*listenerv3.Listener)
			l.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAnyT(t, &routerv3.Router{})}
			return s
		}, `network filter "envoy.filters.network.http_connection_manager" holds "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"`},
		{"Any of an unknown type", Envoy, envoy, func(t *testing.T, s set) set {
			l := s.find(t, v1Listener).(*listenerv3.Listener)
			l.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Filter"}}
			return s
		}, `Any "type.googleapis.com/no.such.Filter"`},
		{"upstream TLS by certificate provider in Envoy", Envoy, envoy, func(t *testing.T, s set) set {
			c := s.find(t, v1Cluster).(*clusterv3.Cluster)
			c.TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustAnyT(t, upstreamTLS(GRPC, []string{"spiffe://osm.local/ns/default/sa/bookstore"}, true))}
			return s
		}, "Envoy TLS must take its certificate and CA by SDS"},
		{"api listener in Envoy", Envoy, envoy, func(t *testing.T, s set) set {
			return append(s, proto.Clone(grpcSetFind(t, grpc, grpcAPI)))
		}, "api_listener is for gRPC clients"},
		{"gRPC: router not last", GRPC, grpc, func(t *testing.T, s set) set {
			hcm, store := hcmOf(t, s.find(t, grpcAPI).(*listenerv3.Listener))
			hcm.HttpFilters = append(hcm.HttpFilters, &hcmv3.HttpFilter{Name: httpRBACFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAnyT(t, &rbachttpv3.RBAC{})}})
			store()
			return s
		}, "http_filters must end in the router filter"},
		{"gRPC: STATIC cluster", GRPC, grpc, func(t *testing.T, s set) set {
			c := s.find(t, grpcV1).(*clusterv3.Cluster)
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
			c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: c.Name, Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{lbEndpoint(netip.MustParseAddrPort("127.0.0.1:1"))}}}}
			return s
		}, "STATIC cluster: gRPC accepts only"},
		{"gRPC: duplicate endpoint addresses", GRPC, grpc, func(t *testing.T, s set) set {
			cla := s.find(t, grpcV1Assign).(*endpointv3.ClusterLoadAssignment)
			cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, proto.Clone(cla.Endpoints[0].LbEndpoints[0]).(*endpointv3.LbEndpoint))
			return s
		}, "endpoint 127.0.10.3:14001 appears twice"},
		{"gRPC: SDS", GRPC, grpc, func(t *testing.T, s set) set {
			c := s.find(t, grpcV1).(*clusterv3.Cluster)
			c.TransportSocket.ConfigType = &corev3.TransportSocket_TypedConfig{TypedConfig: mustAnyT(t, upstreamTLS(Envoy, []string{"spiffe://osm.local/ns/default/sa/bookstore"}, true))}
			return s
		}, "gRPC TLS must use certificate provider instance"},
		{"gRPC: secrets", GRPC, grpc, func(t *testing.T, s set) set {
			return append(s, &tlsv3.Secret{Name: RootCASecret})
		}, "gRPC has no SDS"},
		{"gRPC: num_retries 0", GRPC, grpc, func(t *testing.T, s set) set {
			rc := s.find(t, `route configuration "outbound|default/bookstore|14001|grpc"`).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "unavailable", NumRetries: wrapperspb.UInt32(0)}
			return s
		}, "retry_policy.num_retries 0"},
		{"retry_on with a space", Envoy, envoy, func(t *testing.T, s set) set {
			rc := s.find(t, splitRoute).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "5xx, reset"}
			return s
		}, "holds a space"},
		{"gRPC: fault abort without a percentage (grpc-js NACKs it)", GRPC, grpc, func(t *testing.T, s set) set {
			rc := s.find(t, `route configuration "outbound|default/bookstore|14001|grpc"`).(*routev3.RouteConfiguration)
			rc.VirtualHosts[0].Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{faultFilter: mustAny(&faultv3.HTTPFault{Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_GrpcStatus{GrpcStatus: 14}}})}
			return s
		}, "without a percentage"},
		{"gRPC: LEAST_REQUEST (C-core 1.51 and grpc-js NACK it)", GRPC, grpc, func(t *testing.T, s set) set {
			s.find(t, grpcV1).(*clusterv3.Cluster).LbPolicy = clusterv3.Cluster_LEAST_REQUEST
			return s
		}, "proxyless gRPC clients take only ROUND_ROBIN and RING_HASH"},
		{"outlier detection without enforcing_success_rate", Envoy, envoy, func(t *testing.T, s set) set {
			s.find(t, v1Cluster).(*clusterv3.Cluster).OutlierDetection.EnforcingSuccessRate = nil
			return s
		}, "outlier_detection without enforcing_success_rate"},
		{"gRPC: max_ejection_percent over 100", GRPC, grpc, func(t *testing.T, s set) set {
			s.find(t, grpcV1).(*clusterv3.Cluster).OutlierDetection = &clusterv3.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0), MaxEjectionPercent: wrapperspb.UInt32(101)}
			return s
		}, "outlier_detection.max_ejection_percent 101 is over 100"},
		{"gRPC: ring sizes minimum over maximum (C-core 1.51 NACKs it)", GRPC, grpc, func(t *testing.T, s set) set {
			c := s.find(t, grpcV1).(*clusterv3.Cluster)
			c.LbPolicy = clusterv3.Cluster_RING_HASH
			c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(4096), MaximumRingSize: wrapperspb.UInt64(2048)}}
			return s
		}, "ring_hash_lb_config: sizes 4096-2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cloneSet(tc.base)
			if err := Validate(tc.flavor, s...); err != nil {
				t.Fatalf("the unbroken set fails: %v", err)
			}
			err := Validate(tc.flavor, tc.break_(t, s)...)
			if err == nil {
				t.Fatalf("Validate accepted the broken set, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate error:\n%v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

func grpcSetFind(t *testing.T, ms []proto.Message, label string) proto.Message {
	t.Helper()
	return set(ms).find(t, label)
}

// TestValidatorForgetsPerProxyListeners: a Validator shared across many
// proxies remembers shared resources but not each proxy's own listeners,
// so proxies connecting and reconnecting do not grow it.
func TestValidatorForgetsPerProxyListeners(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	proxy := func(i int) Proxy {
		return Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}
	}
	// What every bookbuyer proxy shares, rendered once (one pointer each).
	var shared []proto.Message
	rs, _ := Routes(m, proxy(0))
	cs, _ := Clusters(m, proxy(0))
	es, _ := LoadAssignments(m, proxy(0))
	ss, _ := Secrets([]byte("chain"), []byte("key"), []byte("root"))
	for _, r := range rs {
		shared = append(shared, r)
	}
	for _, c := range cs {
		shared = append(shared, c)
	}
	for _, e := range es {
		shared = append(shared, e)
	}
	for _, x := range ss {
		shared = append(shared, x)
	}
	first, _ := Listeners(m, proxy(0))
	for _, l := range first {
		if !PerProxy(l.GetName()) {
			shared = append(shared, l)
		}
	}
	vr := NewValidator(Envoy)
	for i := range 50 {
		ls, err := Listeners(m, proxy(i))
		if err != nil {
			t.Fatal(err)
		}
		set := slices.Clone(shared)
		for _, l := range ls {
			if PerProxy(l.GetName()) {
				set = append(set, l)
			}
		}
		if err := vr.Validate(set...); err != nil {
			t.Fatalf("proxy %d: %v", i, err)
		}
	}
	if got, want := len(vr.memo), len(shared); got != want {
		t.Errorf("after 50 proxies the validator remembers %d resources, want the %d shared ones", got, want)
	}
}

func TestPerProxy(t *testing.T) {
	for name, want := range map[string]bool{
		InboundName(svc("bookstore"), 14001):                                true,
		GRPCServerListenerName(netip.MustParseAddrPort("127.0.10.3:14001")): true,
		"outbound|default/bookstore|14001":                                  false,
		"bookstore.default.mesh:14001":                                      false,
	} {
		if got := PerProxy(name); got != want {
			t.Errorf("PerProxy(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestWalkReachesEveryCheckedMessage walks every golden set twice: with
// the validator's walk, which descends only towards checked types and
// Anys, and with a full walk of every populated field. Both must meet the
// same checked messages (counted per type). Rendered with a Memo, the
// validator's walk takes the messages Anys were packed from from the Memo
// (and must use every one of them) instead of unpacking them.
func TestWalkReachesEveryCheckedMessage(t *testing.T) {
	eps := bookstoreEndpoints(t)
	for _, withMemo := range []bool{false, true} {
		for _, tc := range goldenCases() {
			m := meshOf(bookstoreSpec(t, tc.permissive).Snapshot(), eps)
			if withMemo {
				m.Memo = NewMemo()
			}
			r := renderAll(t, m, Proxy{Service: svc(tc.service), Flavor: tc.flavor, Address: netip.MustParseAddr("10.0.0.1")})
			if withMemo && m.Memo.packed.Len() == 0 {
				t.Fatalf("%s: the Memo holds no packed message", tc.name)
			}
			pruned, full := map[protoreflect.FullName]int{}, map[protoreflect.FullName]int{}
			v := &validation{vr: NewValidator(tc.flavor), flavor: tc.flavor, memo: m.Memo, met: pruned}
			for _, msg := range r.all() {
				v.walk(msg.ProtoReflect())
				fullWalk(t, msg.ProtoReflect(), full)
			}
			if len(full) < 5 {
				t.Fatalf("%s: the full walk met only %v", tc.name, full)
			}
			if diff := cmp.Diff(full, pruned); diff != "" {
				t.Errorf("%s (Memo %v): checked messages met (-full +pruned):\n%s", tc.name, withMemo, diff)
			}
			if withMemo && m.Memo.packed.Len() != 0 {
				t.Errorf("%s: %d packed messages left unused in the Memo", tc.name, m.Memo.packed.Len())
			}
		}
	}
}

// TestValidateWithReplacedAny: an Any of a memoised message whose content
// is replaced after rendering is unpacked, not taken from the Memo.
func TestValidateWithReplacedAny(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	m.Memo = NewMemo()
	s := set(renderAll(t, m, Proxy{Service: svc("bookbuyer"), Flavor: GRPC, Address: netip.MustParseAddr("127.0.10.1")}).all())
	hcm, store := hcmOf(t, s.find(t, `listener "bookstore.default.mesh:14001"`).(*listenerv3.Listener))
	hcm.HttpFilters = append(hcm.HttpFilters, &hcmv3.HttpFilter{Name: httpRBACFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAnyT(t, &rbachttpv3.RBAC{})}})
	store()
	err := NewValidator(GRPC).ValidateWith(m.Memo, s...)
	if want := "http_filters must end in the router filter"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ValidateWith = %v, want an error containing %q", err, want)
	}
}

// fullWalk counts the checked messages below m, visiting every populated
// message field.
func fullWalk(t *testing.T, m protoreflect.Message, seen map[protoreflect.FullName]int) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		fullWalk(t, inner.ProtoReflect(), seen)
		return
	}
	if checks[m.Descriptor().FullName()] != nil {
		seen[m.Descriptor().FullName()]++
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		switch {
		case messageOf(fd) == nil:
		case fd.IsList():
			for i, l := 0, val.List(); i < l.Len(); i++ {
				fullWalk(t, l.Get(i).Message(), seen)
			}
		case fd.IsMap():
			val.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				fullWalk(t, mv.Message(), seen)
				return true
			})
		default:
			fullWalk(t, val.Message(), seen)
		}
		return true
	})
}

// TestValidatorSharesPerProxyChains: per-proxy listeners sharing a filter
// chain have it walked once, and what it finds is reported under each
// listener's own name.
func TestValidatorSharesPerProxyChains(t *testing.T) {
	bad, err := anypb.New(&clusterv3.Cluster{Name: "not-a-filter"})
	if err != nil {
		t.Fatal(err)
	}
	chain := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: bad}}}}
	listener := func(ip string) *listenerv3.Listener {
		ap := netip.MustParseAddrPort(ip + ":14001")
		return &listenerv3.Listener{Name: GRPCServerListenerName(ap), Address: socketAddress(ap.Addr(), 14001), FilterChains: []*listenerv3.FilterChain{chain}}
	}
	vr := NewValidator(GRPC)
	for _, ips := range [][]string{{"10.0.0.1", "10.0.0.2"}, {"10.0.0.3"}} {
		var set []proto.Message
		for _, ip := range ips {
			set = append(set, listener(ip))
		}
		err := vr.Validate(set...)
		for _, ip := range ips {
			want := fmt.Sprintf("listener %q: network filter \"f\" holds", GRPCServerListenerName(netip.MustParseAddrPort(ip+":14001")))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate(%v) = %v, want an error containing %s", ips, err, want)
			}
		}
		if n := strings.Count(err.Error(), "holds"); n != len(ips) {
			t.Errorf("Validate(%v): %d findings, want %d:\n%v", ips, n, len(ips), err)
		}
	}
	if len(vr.chains) != 1 || len(vr.memo) != 0 {
		t.Errorf("validator remembers %d chains and %d resources, want 1 and 0", len(vr.chains), len(vr.memo))
	}
	vr.ForgetChains()
	if len(vr.chains) != 0 {
		t.Errorf("after ForgetChains: %d chains", len(vr.chains))
	}
}

// TestTypedWalkFieldByField checks the validator's walk field by field:
// for every type reachable from the resources and typed configs render
// produces (through fields that can lead to a checked message or an Any),
// and for every such field of it, a message with only that field set,
// to a value that leads to a checked message by the shortest way, must
// make the walk meet the same checked messages as a walk of every field.
// So a typed walk (see typedWalks) that skips a field, or visits one
// twice, fails here, whatever render fills in.
func TestTypedWalkFieldByField(t *testing.T) {
	vr := NewValidator(Envoy)
	roots := []proto.Message{
		&listenerv3.Listener{}, &routev3.RouteConfiguration{}, &clusterv3.Cluster{}, &endpointv3.ClusterLoadAssignment{}, &tlsv3.Secret{},
		&hcmv3.HttpConnectionManager{}, &tcpproxyv3.TcpProxy{}, &rbacnetv3.RBAC{}, &rbachttpv3.RBAC{}, &routerv3.Router{},
		&tlsv3.DownstreamTlsContext{}, &tlsv3.UpstreamTlsContext{}, &httpv3.HttpProtocolOptions{},
	}
	// Every type of interest reachable from the roots.
	reach := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	var collect func(md protoreflect.MessageDescriptor)
	collect = func(md protoreflect.MessageDescriptor) {
		if _, ok := reach[md.FullName()]; ok || md.FullName() == anyName {
			return
		}
		reach[md.FullName()] = md
		for _, fd := range vr.fieldsOf(md) {
			collect(messageOf(fd))
		}
	}
	for _, r := range roots {
		collect(r.ProtoReflect().Descriptor())
	}
	for id, tw := range typedWalks {
		md := tw.msg.ProtoReflect().Descriptor()
		if _, ok := reach[md.FullName()]; !ok {
			t.Errorf("typed walk %d of %s: not reachable from render's types", id, md.FullName())
		}
		if got := len(vr.restOf(typedID(id))); got != tw.guarded {
			t.Errorf("typed walk of %s: its guard tests %d fields, but %d are left to it (see validation.rest)", md.FullName(), tw.guarded, got)
		}
		for _, n := range tw.handled {
			found := false
			for _, fd := range vr.fieldsOf(md) {
				found = found || fd.Name() == n || fd.ContainingOneof() != nil && fd.ContainingOneof().Name() == n
			}
			if !found {
				t.Errorf("typed walk of %s handles %q, which names no field or oneof of interest", md.FullName(), n)
			}
		}
	}
	if len(reach) < 100 {
		t.Fatalf("only %d types reachable", len(reach))
	}
	// dist is how many messages down from a type the nearest checked
	// message or Any is.
	dist := map[protoreflect.FullName]int{anyName: 0}
	for name := range reach {
		if checks[name] != nil {
			dist[name] = 0
		}
	}
	for changed := true; changed; {
		changed = false
		for name, md := range reach {
			for _, fd := range vr.fieldsOf(md) {
				if d, ok := dist[messageOf(fd).FullName()]; ok {
					if cur, ok := dist[name]; !ok || d+1 < cur {
						dist[name], changed = d+1, true
					}
				}
			}
		}
	}
	rds, err := anypb.New(&hcmv3.Rds{RouteConfigName: "r"})
	if err != nil {
		t.Fatal(err)
	}
	// probe returns a message of type md that leads to a checked message.
	var probe func(md protoreflect.MessageDescriptor) protoreflect.Message
	probe = func(md protoreflect.MessageDescriptor) protoreflect.Message {
		if md.FullName() == anyName {
			return proto.Clone(rds).ProtoReflect()
		}
		m := newMessage(t, md)
		if checks[md.FullName()] != nil {
			return m
		}
		var next protoreflect.FieldDescriptor
		for _, fd := range vr.fieldsOf(md) {
			if d, ok := dist[messageOf(fd).FullName()]; ok && (next == nil || d < dist[messageOf(next).FullName()]) {
				next = fd
			}
		}
		if next == nil {
			t.Fatalf("%s leads to no checked message", md.FullName())
		}
		setProbe(m, next, probe(messageOf(next)))
		return m
	}
	fields := 0
	for name, md := range reach {
		for _, fd := range vr.fieldsOf(md) {
			m := newMessage(t, md)
			setProbe(m, fd, probe(messageOf(fd)))
			pruned, full := map[protoreflect.FullName]int{}, map[protoreflect.FullName]int{}
			v := &validation{vr: vr, flavor: Envoy, met: pruned}
			v.walkMsg(m.Interface())
			fullWalk(t, m, full)
			if len(full) == 0 {
				t.Errorf("%s.%s: the probe reaches no checked message", name, fd.Name())
			}
			if diff := cmp.Diff(full, pruned); diff != "" {
				t.Errorf("%s with only %s set: checked messages met (-full +walk):\n%s", name, fd.Name(), diff)
			}
			fields++
		}
	}
	// Every member of every oneof of the typed types, of interest or not
	// (scalars too): the type switches' other cases.
	for _, tw := range typedWalks {
		md := tw.msg.ProtoReflect().Descriptor()
		for i := range md.Oneofs().Len() {
			od := md.Oneofs().Get(i)
			for j := range od.Fields().Len() {
				fd := od.Fields().Get(j)
				m := newMessage(t, md)
				switch {
				case fd.Message() == nil:
					m.Set(fd, fd.Default())
				case slices.Contains(vr.fieldsOf(md), fd):
					m.Set(fd, protoreflect.ValueOfMessage(probe(fd.Message())))
				default:
					m.Set(fd, protoreflect.ValueOfMessage(newMessage(t, fd.Message())))
				}
				pruned, full := map[protoreflect.FullName]int{}, map[protoreflect.FullName]int{}
				v := &validation{vr: vr, flavor: Envoy, met: pruned}
				v.walkMsg(m.Interface())
				fullWalk(t, m, full)
				if diff := cmp.Diff(full, pruned); diff != "" {
					t.Errorf("%s with only %s set: checked messages met (-full +walk):\n%s", md.FullName(), fd.Name(), diff)
				}
				fields++
			}
		}
	}
	t.Logf("%d types, %d fields and oneof members", len(reach), fields)
}

// newMessage returns an empty message of the generated type of md.
func newMessage(t *testing.T, md protoreflect.MessageDescriptor) protoreflect.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New()
}

// setProbe sets field fd of m to (a list or map holding) val.
func setProbe(m protoreflect.Message, fd protoreflect.FieldDescriptor, val protoreflect.Message) {
	switch {
	case fd.IsList():
		m.Mutable(fd).List().Append(protoreflect.ValueOfMessage(val))
	case fd.IsMap():
		m.Mutable(fd).Map().Set(fd.MapKey().Default().MapKey(), protoreflect.ValueOfMessage(val))
	default:
		m.Set(fd, protoreflect.ValueOfMessage(val))
	}
}

// TestValidatorReuse: a Validator that found problems in one set finds
// none in a good one after it (nothing is left over from the earlier call),
// and the same problems again in an equal broken set (the regex it
// remembers as not compiling included).
func TestValidatorReuse(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	good := renderAll(t, m, Proxy{Service: svc("bookbuyer"), Address: netip.MustParseAddr("127.0.10.1")}).all()
	broken := func() set {
		s := cloneSet(good).without(t, `secret "root-ca"`)
		rc := s.find(t, `route configuration "outbound|default/bookstore|14001"`).(*routev3.RouteConfiguration)
		rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `/books(?=/new)`}}
		return s
	}
	vr := NewValidator(Envoy)
	first := vr.Validate(broken()...)
	for _, want := range []string{`regex "/books(?=/new)" is not RE2`, `references secret "root-ca"`} {
		if first == nil || !strings.Contains(first.Error(), want) {
			t.Fatalf("Validate(broken) = %v, want an error containing %q", first, want)
		}
	}
	if err := vr.Validate(good...); err != nil {
		t.Errorf("Validate(good) after Validate(broken) = %v", err)
	}
	if again := vr.Validate(broken()...); again == nil || again.Error() != first.Error() {
		t.Errorf("Validate(broken) again:\n%v\nwant\n%v", again, first)
	}
}

// TestValidateSetEncoded: load assignments given as encoded (by type URL
// and name) stand in for their messages: the clusters that reference
// them validate, a missing or repeated one is reported; an encoded
// cluster's references are checked; only clusters and load assignments
// may be given so.
func TestValidateSetEncoded(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	r := renderAll(t, m, Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.1")})
	if len(r.Endpoints) == 0 {
		t.Fatal("bookbuyer receives no load assignments")
	}
	var encoded []Encoded
	for _, e := range r.Endpoints {
		encoded = append(encoded, Encoded{TypeURL: loadAssignmentType, Name: e.(*endpointv3.ClusterLoadAssignment).GetClusterName()})
	}
	rest := slices.Concat(r.Listeners, r.Routes, r.Clusters, r.Secrets)
	vr := NewValidator(Envoy)
	if err := vr.ValidateSet(nil, encoded, rest...); err != nil {
		t.Fatalf("the set with its load assignments encoded: %v", err)
	}
	for _, tc := range []struct {
		name    string
		encoded []Encoded
		want    string
	}{
		{"one missing", encoded[1:], fmt.Sprintf("references load assignment %q, which is not in the set", encoded[0].Name)},
		{"one twice", append(slices.Clone(encoded), encoded[0]), fmt.Sprintf("load assignment %q appears twice in the set", encoded[0].Name)},
		{"a filter chain", append(slices.Clone(encoded), Encoded{TypeURL: "type.googleapis.com/envoy.config.listener.v3.FilterChain", Name: "x"}), `type.googleapis.com/envoy.config.listener.v3.FilterChain "x": only listeners, route configurations, clusters, load assignments and secrets are encoded`},
		{"a secret twice", append(slices.Clone(encoded), Encoded{TypeURL: secretType, Name: ServiceCertSecret}), `secret "service-cert" appears twice in the set`},
		{"a cluster without its load assignment", append(slices.Clone(encoded), Encoded{TypeURL: clusterType, Name: "x", Refs: []Ref{{loadAssignmentType, "default/x"}}}), `cluster "x": references load assignment "default/x", which is not in the set`},
		{"a cluster twice", append(slices.Clone(encoded), Encoded{TypeURL: clusterType, Name: r.Clusters[0].(*clusterv3.Cluster).GetName()}), "appears twice in the set"},
		{"a listener on another's address", append(slices.Clone(encoded), Encoded{TypeURL: listenerType, Name: "copy", Bytes: mustMarshal(t, &listenerv3.Listener{Name: "copy", Address: r.Listeners[0].(*listenerv3.Listener).GetAddress()})}), fmt.Sprintf(`listener %q: listens on %s like listener "copy"`, r.Listeners[0].(*listenerv3.Listener).GetName(), listenerAddr(r.Listeners[0].(*listenerv3.Listener)))},
		{"a listener without its routes", append(slices.Clone(encoded), Encoded{TypeURL: listenerType, Name: "l", Refs: []Ref{{typeOfKind["route configuration"], "r"}}}), `listener "l": references route configuration "r", which is not in the set`},
		{"no name", append(slices.Clone(encoded), Encoded{TypeURL: loadAssignmentType}), "load assignment without a name"},
	} {
		err := vr.ValidateSet(nil, tc.encoded, rest...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// gRPC has no SDS, encoded or not.
	err := NewValidator(GRPC).ValidateSet(nil, []Encoded{{TypeURL: secretType, Name: ServiceCertSecret}})
	if err == nil || !strings.Contains(err.Error(), `secret "service-cert": gRPC has no SDS`) {
		t.Errorf("an encoded secret for gRPC: error = %v", err)
	}
}

// TestEncodeServiceCertSecret: the encoder writes exactly the bytes
// protobuf-go's deterministic marshal gives for the service certificate
// secret Secrets builds, for PEMs of every varint length of their own and
// of the messages around them, and what it writes validates; an empty
// PEM is an error naming it.
func TestEncodeServiceCertSecret(t *testing.T) {
	for _, n := range []int{1, 100, 119, 120, 127, 128, 16000, 16380, 16384, 70000} {
		chain, key := []byte(strings.Repeat("c", n)), []byte(strings.Repeat("k", n/2+1))
		ss, err := Secrets(chain, key, testRootPEM)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, s := range ss {
			if s.GetName() == ServiceCertSecret {
				want = mustMarshal(t, s)
			}
		}
		got, err := EncodeServiceCertSecret([]byte("kept"), chain, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, append([]byte("kept"), want...)) {
			t.Fatalf("PEMs of %d bytes: encoded\n%x\nwant\n%x", n, got, want)
		}
		s := &tlsv3.Secret{}
		if err := proto.Unmarshal(got[4:], s); err != nil {
			t.Fatal(err)
		}
		if err := Validate(Envoy, s); err != nil {
			t.Errorf("PEMs of %d bytes: %v", n, err)
		}
	}
	for _, tc := range []struct {
		chain, key []byte
		want       string
	}{{nil, testKeyPEM, "empty service certificate chain"}, {testCertPEM, nil, "empty service private key"}} {
		if _, err := EncodeServiceCertSecret(nil, tc.chain, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error = %v, want one containing %q", err, tc.want)
		}
	}
	if _, err := RootSecret(nil); err == nil {
		t.Error("RootSecret of no PEM: no error")
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func listenerAddr(l *listenerv3.Listener) netip.AddrPort {
	sa := l.GetAddress().GetSocketAddress()
	return netip.AddrPortFrom(netip.MustParseAddr(sa.GetAddress()), uint16(sa.GetPortValue()))
}

// TestListenerAddress: the address of an encoded listener is read from
// its bytes as from its message; an API listener and one without an IP
// address have none.
func TestListenerAddress(t *testing.T) {
	for _, tc := range []struct {
		l    *listenerv3.Listener
		want string
	}{
		{&listenerv3.Listener{Name: "a", Address: socketAddress(netip.MustParseAddr("10.0.0.1"), 8080)}, "10.0.0.1:8080"},
		{&listenerv3.Listener{Name: "b", Address: socketAddress(netip.MustParseAddr("2001:db8::1"), 65535)}, "[2001:db8::1]:65535"},
		{&listenerv3.Listener{Name: "c", Address: socketAddress(netip.MustParseAddr("10.0.0.1"), 80), ApiListener: &listenerv3.ApiListener{}}, ""},
		{&listenerv3.Listener{Name: "d"}, ""},
	} {
		got, ok := listenerAddress(mustMarshal(t, tc.l))
		if ok != (tc.want != "") || ok && got.String() != tc.want {
			t.Errorf("%s: %v %v, want %q", tc.l.GetName(), got, ok, tc.want)
		}
	}
}

// TestKindOfType: kindOfType names the five types render writes as the
// Validator's messages do, knows no other, and typeOfKind is its inverse.
func TestKindOfType(t *testing.T) {
	want := map[string]string{
		"listener":            typeURLOf(&listenerv3.Listener{}),
		"route configuration": typeURLOf(&routev3.RouteConfiguration{}),
		"cluster":             typeURLOf(&clusterv3.Cluster{}),
		"load assignment":     typeURLOf(&endpointv3.ClusterLoadAssignment{}),
		"secret":              typeURLOf(&tlsv3.Secret{}),
	}
	for kind, typ := range want {
		if got := kindOfType(typ); got != kind {
			t.Errorf("kindOfType(%s) = %q, want %q", typ, got, kind)
		}
	}
	if !maps.Equal(typeOfKind, want) {
		t.Errorf("typeOfKind = %v, want %v", typeOfKind, want)
	}
	if got := kindOfType(typeURLOf(&corev3.Node{})); got != "" {
		t.Errorf("kindOfType of a Node = %q, want none", got)
	}
}
