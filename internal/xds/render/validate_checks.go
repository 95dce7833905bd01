package render

// The check validation runs on each message of a given type (the
// registry the walk consults, and one method per type): allowed Any
// types, references made, weights, regexes, flavour rules.

import (
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	dfpclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	localratelimithttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	localratelimitnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/local_ratelimit/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	setfilterstatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/set_filter_state/v3"
	snidfpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

var (
	hcmName, routerName       = nameOf(&hcmv3.HttpConnectionManager{}), nameOf(&routerv3.Router{})
	downstreamTLSName         = nameOf(&tlsv3.DownstreamTlsContext{})
	upstreamTLSName, httpOpts = nameOf(&tlsv3.UpstreamTlsContext{}), nameOf(&httpv3.HttpProtocolOptions{})
	networkFilterTypes        = []protoreflect.FullName{nameOf(&hcmv3.HttpConnectionManager{}), nameOf(&tcpproxyv3.TcpProxy{}), nameOf(&rbacnetv3.RBAC{}),
		nameOf(&setfilterstatev3.Config{}), nameOf(&snidfpv3.FilterConfig{}), nameOf(&localratelimitnetv3.LocalRateLimit{})}
	dfpClusterName  = nameOf(&dfpclusterv3.ClusterConfig{})
	httpFilterTypes = []protoreflect.FullName{nameOf(&routerv3.Router{}), nameOf(&rbachttpv3.RBAC{}), nameOf(&faultv3.HTTPFault{}), nameOf(&localratelimithttpv3.LocalRateLimit{})}
)

func anyIs(a *anypb.Any, want ...protoreflect.FullName) bool {
	return a != nil && slices.Contains(want, a.MessageName())
}

// check is what walk checks of one message of a given type (recording its
// references); checks lists every type that has one, and walk descends
// only towards those types and Anys. The typed walks (see typedWalks)
// call the same methods.
type check func(*validation, proto.Message)

func checkOf[T proto.Message](f func(*validation, T)) (protoreflect.FullName, check) {
	var zero T
	return nameOf(zero), func(v *validation, m proto.Message) { f(v, m.(T)) }
}

var checks = func() map[protoreflect.FullName]check {
	m := map[protoreflect.FullName]check{}
	add := func(name protoreflect.FullName, c check) { m[name] = c }
	add(checkOf((*validation).listener))
	add(checkOf((*validation).apiListener))
	add(checkOf((*validation).filterChain))
	add(checkOf((*validation).networkFilter))
	add(checkOf((*validation).hcm))
	add(checkOf((*validation).httpFilter))
	add(checkOf((*validation).rds))
	add(checkOf((*validation).configSource))
	add(checkOf((*validation).routeAction))
	add(checkOf((*validation).weightedClusters))
	add(checkOf((*validation).tcpProxy))
	add(checkOf((*validation).tcpWeightedClusters))
	add(checkOf((*validation).sdsSecretConfig))
	add(checkOf((*validation).commonTLS))
	add(checkOf((*validation).regex))
	add(checkOf((*validation).cluster))
	add(checkOf((*validation).loadAssignment))
	add(checkOf((*validation).dnsCache))
	add(checkOf((*validation).fault))
	add(checkOf((*validation).httpRateLimit))
	add(checkOf((*validation).networkRateLimit))
	return m
}()

func (v *validation) apiListener(m *listenerv3.ApiListener) {
	v.meet(m)
	if !anyIs(m.GetApiListener(), hcmName) {
		v.fail("api_listener holds %q, want an HttpConnectionManager", m.GetApiListener().GetTypeUrl())
	}
}

func (v *validation) filterChain(m *listenerv3.FilterChain) {
	v.meet(m)
	if ts := m.GetTransportSocket(); ts != nil && !anyIs(ts.GetTypedConfig(), downstreamTLSName) {
		v.fail("filter chain transport socket holds %q, want a DownstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
}

func (v *validation) networkFilter(m *listenerv3.Filter) {
	v.meet(m)
	if !anyIs(m.GetTypedConfig(), networkFilterTypes...) {
		v.fail("network filter %q holds %q, want one of %v", m.GetName(), m.GetTypedConfig().GetTypeUrl(), networkFilterTypes)
	}
}

func (v *validation) hcm(m *hcmv3.HttpConnectionManager) {
	v.meet(m)
	fs := m.GetHttpFilters()
	if len(fs) == 0 || !anyIs(fs[len(fs)-1].GetTypedConfig(), routerName) {
		v.fail("HTTP connection manager %q: http_filters must end in the router filter", m.GetStatPrefix())
	}
}

func (v *validation) httpFilter(m *hcmv3.HttpFilter) {
	v.meet(m)
	if !anyIs(m.GetTypedConfig(), httpFilterTypes...) {
		v.fail("HTTP filter %q holds %q, want one of %v", m.GetName(), m.GetTypedConfig().GetTypeUrl(), httpFilterTypes)
	}
}

func (v *validation) rds(m *hcmv3.Rds) {
	v.meet(m)
	v.ref("route configuration", m.GetRouteConfigName())
}

func (v *validation) configSource(m *corev3.ConfigSource) {
	v.meet(m)
	if v.flavor == GRPC && m.GetAds() == nil && m.GetSelf() == nil {
		v.fail("config source %v: gRPC accepts only ads or self", m)
	}
}

func (v *validation) routeAction(m *routev3.RouteAction) {
	v.meet(m)
	if c := m.GetCluster(); c != "" {
		v.ref("cluster", c)
	}
	for _, mp := range m.GetRequestMirrorPolicies() {
		v.ref("cluster", mp.GetCluster())
	}
	if rp := m.GetRetryPolicy(); rp != nil {
		// gRPC NACKs num_retries 0; C-core and grpc-js take retry_on
		// tokens as they are (no trimming).
		if n := rp.GetNumRetries(); n != nil && n.GetValue() == 0 {
			v.fail("retry_policy.num_retries 0: leave the retry policy out instead (gRPC NACKs it)")
		}
		if strings.Contains(rp.GetRetryOn(), " ") {
			v.fail("retry_policy.retry_on %q holds a space: join the conditions with commas only", rp.GetRetryOn())
		}
	}
}

// fault checks a fault filter's config: every delay and abort has a
// percentage (grpc-js NACKs one without).
func (v *validation) fault(m *faultv3.HTTPFault) {
	v.meet(m)
	if m.GetDelay() != nil && m.GetDelay().GetPercentage() == nil || m.GetAbort() != nil && m.GetAbort().GetPercentage() == nil {
		v.fail("fault filter: a delay or abort without a percentage (grpc-js NACKs it)")
	}
}

// httpRateLimit checks an HTTP local rate limit config: Envoy's only
// (gRPC's xDS server refuses a listener with it), and a bucket (a route's
// or virtual host's) enabled and enforced for every request (unset, Envoy
// limits none).
func (v *validation) httpRateLimit(m *localratelimithttpv3.LocalRateLimit) {
	v.meet(m)
	if v.flavor == GRPC {
		v.fail("local rate limit %q: gRPC does not support local rate limiting (its xDS server refuses the listener)", m.GetStatPrefix())
	}
	if m.GetTokenBucket() != nil && (!everyOf(m.GetFilterEnabled()) || !everyOf(m.GetFilterEnforced())) {
		v.fail("local rate limit %q: a token bucket without filter_enabled and filter_enforced at 100%% limits no request", m.GetStatPrefix())
	}
}

// networkRateLimit checks a network local rate limit filter: Envoy's only.
func (v *validation) networkRateLimit(m *localratelimitnetv3.LocalRateLimit) {
	v.meet(m)
	if v.flavor == GRPC {
		v.fail("local rate limit %q: gRPC does not support local rate limiting", m.GetStatPrefix())
	}
}

// everyOf reports whether p is 100% of requests.
func everyOf(p *corev3.RuntimeFractionalPercent) bool {
	d := p.GetDefaultValue()
	return d != nil && d.GetDenominator() == typev3.FractionalPercent_HUNDRED && d.GetNumerator() == 100
}

func (v *validation) weightedClusters(m *routev3.WeightedCluster) {
	v.meet(m)
	var sum uint64
	for _, c := range m.GetClusters() {
		v.ref("cluster", c.GetName())
		sum += uint64(c.GetWeight().GetValue())
	}
	switch {
	case sum == 0:
		v.fail("weighted clusters %v sum to 0: drop the route or give a backend weight", clusterNames(m.GetClusters()))
	case sum > math.MaxUint32:
		v.fail("weighted clusters %v sum to %d, more than %d (Envoy and gRPC refuse it)", clusterNames(m.GetClusters()), sum, uint32(math.MaxUint32))
	}
}

func (v *validation) tcpProxy(m *tcpproxyv3.TcpProxy) {
	v.meet(m)
	if c := m.GetCluster(); c != "" {
		v.ref("cluster", c)
	}
}

func (v *validation) tcpWeightedClusters(m *tcpproxyv3.TcpProxy_WeightedCluster) {
	v.meet(m)
	var sum uint64
	for _, c := range m.GetClusters() {
		v.ref("cluster", c.GetName())
		sum += uint64(c.GetWeight())
	}
	switch {
	case sum == 0:
		v.fail("tcp_proxy weighted clusters sum to 0: give a backend weight")
	case sum > math.MaxUint32:
		v.fail("tcp_proxy weighted clusters sum to %d, more than %d (kept within uint32, as Envoy and gRPC require of routes)", sum, uint32(math.MaxUint32))
	}
}

func (v *validation) sdsSecretConfig(m *tlsv3.SdsSecretConfig) {
	v.meet(m)
	v.ref("secret", m.GetName())
}

func (v *validation) regex(m *matcherv3.RegexMatcher) {
	v.meet(m)
	vr := v.vr
	vr.regexMu.Lock()
	err, ok := vr.regexes[m.GetRegex()]
	vr.regexMu.Unlock()
	if !ok {
		_, err = regexp.Compile(m.GetRegex())
		vr.regexMu.Lock()
		if len(vr.regexes) >= maxRegexes {
			clear(vr.regexes)
		}
		vr.regexes[m.GetRegex()] = err
		vr.regexMu.Unlock()
	}
	if err != nil {
		v.fail("regex %q is not RE2: %v", m.GetRegex(), err)
	}
}

type endpointAddr struct {
	ip   string
	port uint32
}

func (v *validation) loadAssignment(m *endpointv3.ClusterLoadAssignment) {
	v.meet(m)
	if v.endpoints == nil {
		v.endpoints = map[endpointAddr]bool{}
	}
	seen := v.endpoints
	defer clear(seen)
	for _, loc := range m.GetEndpoints() {
		for _, e := range loc.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			a := endpointAddr{sa.GetAddress(), sa.GetPortValue()}
			if seen[a] {
				v.fail("endpoint %s:%d appears twice (gRPC rejects duplicate endpoint addresses)", a.ip, a.port)
			}
			seen[a] = true
		}
		if v.flavor == GRPC && loc.GetLoadBalancingWeight().GetValue() == 0 {
			v.fail("locality without load_balancing_weight (gRPC ignores it)")
		}
	}
}

func clusterNames(ws []*routev3.WeightedCluster_ClusterWeight) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.GetName())
	}
	return out
}

func (v *validation) listener(l *listenerv3.Listener) {
	v.meet(l)
	if l.GetApiListener() != nil {
		if v.flavor == Envoy {
			v.fail("api_listener is for gRPC clients; Envoy needs an address")
		}
		return
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		v.fail("no socket address and no api_listener")
		return
	}
	if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
		v.fail("address %q is not an IP address", sa.GetAddress())
	}
}

func (v *validation) commonTLS(c *tlsv3.CommonTlsContext) {
	v.meet(c)
	usesSDS := len(c.GetTlsCertificateSdsSecretConfigs()) > 0 || c.GetValidationContextSdsSecretConfig() != nil ||
		c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig() != nil
	usesProvider := c.GetTlsCertificateProviderInstance() != nil || c.GetValidationContext().GetCaCertificateProviderInstance() != nil ||
		c.GetCombinedValidationContext().GetDefaultValidationContext().GetCaCertificateProviderInstance() != nil
	switch v.flavor {
	case GRPC:
		if usesSDS || c.GetTlsCertificateProviderInstance() == nil {
			v.fail("gRPC TLS must use certificate provider instance %q for its certificate and CA (gRPC has no SDS)", CertProviderInstance)
		}
	case Envoy:
		if usesProvider || !usesSDS && !originatesToOutside(c) && !gatewayFileCert(c) {
			v.fail("Envoy TLS must take its certificate and CA by SDS (%q, %q), not certificate provider instances (or, to a host outside the mesh, no certificate and the system's roots)", ServiceCertSecret, RootCASecret)
		}
	}
}

func (v *validation) cluster(c *clusterv3.Cluster) {
	v.meet(c)
	if ts := c.GetTransportSocket(); ts != nil && !anyIs(ts.GetTypedConfig(), upstreamTLSName) {
		v.fail("transport socket holds %q, want an UpstreamTlsContext", ts.GetTypedConfig().GetTypeUrl())
	}
	for k, a := range c.GetTypedExtensionProtocolOptions() {
		if k != httpProtocolOpts || !anyIs(a, httpOpts) {
			v.fail("typed_extension_protocol_options[%q] holds %q, want %s", k, a.GetTypeUrl(), httpProtocolOpts)
		}
	}
	if ct := c.GetClusterType(); ct != nil {
		v.customCluster(c, ct)
		return
	}
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		if c.GetEdsClusterConfig() == nil {
			v.fail("EDS cluster without eds_cluster_config")
			return
		}
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		v.ref("load assignment", name)
	case clusterv3.Cluster_LOGICAL_DNS:
		v.dnsCluster(c)
	case clusterv3.Cluster_STATIC:
		if v.flavor == GRPC {
			v.fail("STATIC cluster: gRPC accepts only EDS, LOGICAL_DNS and aggregate clusters")
		}
		// A load assignment without endpoints is a black hole (as
		// Istio's BlackHoleCluster): GatewayRefuseCluster.
		if c.GetLoadAssignment() == nil || len(c.GetLoadAssignment().GetEndpoints()) == 0 && c.GetName() != GatewayRefuseCluster {
			v.fail("STATIC cluster without load_assignment")
		}
	default:
		v.fail("cluster type %s is not rendered here: want EDS, STATIC, LOGICAL_DNS or a dynamic forward proxy", c.GetType())
	}
	if v.flavor == GRPC && c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN && c.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		// gRPC-Go takes LEAST_REQUEST; C-core 1.51 and grpc-js NACK it.
		v.fail("lb_policy %s: proxyless gRPC clients take only ROUND_ROBIN and RING_HASH (C-core 1.51 and grpc-js NACK the cluster otherwise)", c.GetLbPolicy())
	}
	v.outlierDetection(c.GetOutlierDetection())
	v.ringHash(c)
}

// outlierDetection checks what would make a proxyless client NACK a
// cluster, or the data planes differ: every percentage at most 100, and
// enforcing_success_rate written (unset, Envoy and gRPC-Go enable
// success-rate ejection and C-core does not).
func (v *validation) outlierDetection(od *clusterv3.OutlierDetection) {
	if od == nil {
		return
	}
	if od.GetEnforcingSuccessRate() == nil {
		v.fail("outlier_detection without enforcing_success_rate: write it (0 or 100) so that every data plane does the same")
	}
	for name, p := range map[string]interface{ GetValue() uint32 }{
		"max_ejection_percent": od.GetMaxEjectionPercent(), "enforcing_success_rate": od.GetEnforcingSuccessRate(),
		"failure_percentage_threshold": od.GetFailurePercentageThreshold(), "enforcing_failure_percentage": od.GetEnforcingFailurePercentage(),
	} {
		if p.GetValue() > 100 {
			v.fail("outlier_detection.%s %d is over 100", name, p.GetValue())
		}
	}
}

// ringHash checks a ring hash's sizes as C-core 1.51 does (it NACKs a
// minimum over the maximum), and its hash function (gRPC takes XX_HASH
// only).
func (v *validation) ringHash(c *clusterv3.Cluster) {
	rh := c.GetRingHashLbConfig()
	if rh == nil {
		return
	}
	lo, hi := uint64(envoyMinRingSize), uint64(envoyMaxRingSize)
	if rh.GetMinimumRingSize() != nil {
		lo = rh.GetMinimumRingSize().GetValue()
	}
	if rh.GetMaximumRingSize() != nil {
		hi = rh.GetMaximumRingSize().GetValue()
	}
	if lo < 1 || lo > hi || hi > envoyMaxRingSize {
		v.fail("ring_hash_lb_config: sizes %d-%d: want 1 <= minimum <= maximum <= %d", lo, hi, envoyMaxRingSize)
	}
	if rh.GetHashFunction() != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
		v.fail("ring_hash_lb_config.hash_function %s: gRPC takes XX_HASH only", rh.GetHashFunction())
	}
}

// customCluster checks a cluster of an extension type: only the dynamic
// forward proxy, for an egress gateway's Envoy (its DNS cache is checked by
// dnsCache, as the walk meets it).
func (v *validation) customCluster(c *clusterv3.Cluster, ct *clusterv3.Cluster_CustomClusterType) {
	switch {
	case v.flavor == GRPC:
		v.fail("cluster type %q: rendered for an egress gateway's Envoy only, not for gRPC", ct.GetName())
	case ct.GetName() != dfpCluster || !anyIs(ct.GetTypedConfig(), dfpClusterName):
		v.fail("cluster type %q holding %q is not rendered here: want %s with a %s", ct.GetName(), ct.GetTypedConfig().GetTypeUrl(), dfpCluster, dfpClusterName)
	case c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED:
		v.fail("%s cluster with lb_policy %s: Envoy requires CLUSTER_PROVIDED", dfpCluster, c.GetLbPolicy())
	}
}

// dnsCache checks a dynamic forward proxy DNS cache (of a cluster or the
// SNI dynamic forward proxy filter): it must drop internal addresses (at
// least the unspecified ones, which no MeshConfig may allow).
func (v *validation) dnsCache(m *dfpcommonv3.DnsCacheConfig) {
	v.meet(m)
	f := m.GetResolvedAddressFilter()
	if f == nil || f.GetInvertMatch() || len(f.GetRanges()) == 0 {
		v.fail("DNS cache %q has no resolved_address_filter: an egress gateway must drop internal addresses (loopback, link-local, metadata services) from the answers", m.GetName())
		return
	}
	for _, r := range f.GetRanges() {
		if _, err := netip.ParseAddr(r.GetAddressPrefix()); err != nil {
			v.fail("DNS cache %q: resolved_address_filter range %q is not an IP address", m.GetName(), r.GetAddressPrefix())
		}
	}
}
