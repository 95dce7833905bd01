package render

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// The validator's walk visits every message below a resource that a check
// applies to, and every Any (see [validation.walk]). Reflection can do
// that for any message (walkFields), but slowly; so the types render
// produces have a typed walk, Go code that visits the fields render fills
// in, tests the type's other fields of interest with one Go expression,
// and only if one of those is set walks them by reflection (see
// [validation.rest]). typedWalks names what each typed walk visits itself;
// TestTypedWalkFieldByField checks, for every field of interest of every
// type, that the walk meets the same checked messages as a walk of every
// field, and that each guard tests as many fields as are left to it.
type typedID int

const (
	tListener typedID = iota
	tFilterChain
	tFilter
	tAPIListener
	tTransportSocket
	tConfigSource
	tHCM
	tHTTPFilter
	tRds
	tHTTPRBAC
	tNetworkRBAC
	tRBAC
	tPolicy
	tPermission
	tPermissionSet
	tPrincipal
	tPrincipalSet
	tAuthenticated
	tHeaderMatcher
	tPathMatcher
	tStringMatcher
	tRouteConfiguration
	tVirtualHost
	tRoute
	tRouteMatch
	tRouteAction
	tWeightedCluster
	tClusterWeight
	tTCPProxy
	tTCPWeightedCluster
	tCluster
	tEDSClusterConfig
	tLoadAssignment
	tLocalityEndpoints
	tLbEndpoint
	tDownstreamTLS
	tUpstreamTLS
	tCommonTLS
	tCombinedValidation
	tValidationContext
	tSANMatcher
	tSdsSecretConfig
	tSecret
	tHTTPProtocolOptions
	tRegex
	numTyped
)

// typedWalks names, for each type with a typed walk, the fields and the
// oneofs (all their members) the typed walk visits itself; the type's
// other fields of interest (see [Validator.fieldsOf]) are left to
// reflection (see [validation.rest]).
var typedWalks = [numTyped]struct {
	msg     proto.Message
	handled []protoreflect.Name
	guarded int // how many other fields of interest the walk's guard tests (see rest)
}{
	tListener:            {&listenerv3.Listener{}, fieldNames("filter_chains", "api_listener"), 9},
	tFilterChain:         {&listenerv3.FilterChain{}, fieldNames("filters", "transport_socket"), 1},
	tFilter:              {&listenerv3.Filter{}, fieldNames("config_type"), 0},
	tAPIListener:         {&listenerv3.ApiListener{}, fieldNames("api_listener"), 0},
	tTransportSocket:     {&corev3.TransportSocket{}, fieldNames("config_type"), 0},
	tConfigSource:        {&corev3.ConfigSource{}, fieldNames("config_source_specifier"), 0},
	tHCM:                 {&hcmv3.HttpConnectionManager{}, fieldNames("route_specifier", "http_filters"), 11},
	tHTTPFilter:          {&hcmv3.HttpFilter{}, fieldNames("config_type"), 0},
	tRds:                 {&hcmv3.Rds{}, fieldNames("config_source"), 0},
	tHTTPRBAC:            {&rbachttpv3.RBAC{}, fieldNames("rules", "shadow_rules"), 2},
	tNetworkRBAC:         {&rbacnetv3.RBAC{}, fieldNames("rules", "shadow_rules"), 2},
	tRBAC:                {&rbacv3.RBAC{}, fieldNames("policies"), 1},
	tPolicy:              {&rbacv3.Policy{}, fieldNames("permissions", "principals"), 0},
	tPermission:          {&rbacv3.Permission{}, fieldNames("rule"), 0},
	tPermissionSet:       {&rbacv3.Permission_Set{}, fieldNames("rules"), 0},
	tPrincipal:           {&rbacv3.Principal{}, fieldNames("identifier"), 0},
	tPrincipalSet:        {&rbacv3.Principal_Set{}, fieldNames("ids"), 0},
	tAuthenticated:       {&rbacv3.Principal_Authenticated{}, fieldNames("principal_name"), 0},
	tHeaderMatcher:       {&routev3.HeaderMatcher{}, fieldNames("header_match_specifier"), 0},
	tPathMatcher:         {&matcherv3.PathMatcher{}, fieldNames("rule"), 0},
	tStringMatcher:       {&matcherv3.StringMatcher{}, fieldNames("match_pattern"), 0},
	tRouteConfiguration:  {&routev3.RouteConfiguration{}, fieldNames("virtual_hosts"), 6},
	tVirtualHost:         {&routev3.VirtualHost{}, fieldNames("routes"), 10},
	tRoute:               {&routev3.Route{}, fieldNames("match", "action"), 3},
	tRouteMatch:          {&routev3.RouteMatch{}, fieldNames("path_specifier", "headers"), 4},
	tRouteAction:         {&routev3.RouteAction{}, fieldNames("cluster_specifier"), 13},
	tWeightedCluster:     {&routev3.WeightedCluster{}, fieldNames("clusters"), 0},
	tClusterWeight:       {&routev3.WeightedCluster_ClusterWeight{}, nil, 2},
	tTCPProxy:            {&tcpproxyv3.TcpProxy{}, fieldNames("cluster_specifier"), 5},
	tTCPWeightedCluster:  {&tcpproxyv3.TcpProxy_WeightedCluster{}, nil, 1},
	tCluster:             {&clusterv3.Cluster{}, fieldNames("transport_socket", "typed_extension_protocol_options", "eds_cluster_config", "load_assignment"), 16},
	tEDSClusterConfig:    {&clusterv3.Cluster_EdsClusterConfig{}, fieldNames("eds_config"), 0},
	tLoadAssignment:      {&endpointv3.ClusterLoadAssignment{}, fieldNames("endpoints"), 0},
	tLocalityEndpoints:   {&endpointv3.LocalityLbEndpoints{}, fieldNames("lb_endpoints"), 3},
	tLbEndpoint:          {&endpointv3.LbEndpoint{}, fieldNames("metadata"), 0},
	tDownstreamTLS:       {&tlsv3.DownstreamTlsContext{}, fieldNames("common_tls_context"), 1},
	tUpstreamTLS:         {&tlsv3.UpstreamTlsContext{}, fieldNames("common_tls_context"), 0},
	tCommonTLS:           {&tlsv3.CommonTlsContext{}, fieldNames("tls_certificate_sds_secret_configs", "validation_context_type"), 4},
	tCombinedValidation:  {&tlsv3.CommonTlsContext_CombinedCertificateValidationContext{}, fieldNames("default_validation_context", "validation_context_sds_secret_config"), 1},
	tValidationContext:   {&tlsv3.CertificateValidationContext{}, fieldNames("match_typed_subject_alt_names", "match_subject_alt_names"), 1},
	tSANMatcher:          {&tlsv3.SubjectAltNameMatcher{}, fieldNames("matcher"), 0},
	tSdsSecretConfig:     {&tlsv3.SdsSecretConfig{}, fieldNames("sds_config"), 0},
	tSecret:              {&tlsv3.Secret{}, fieldNames("type"), 0},
	tHTTPProtocolOptions: {&httpv3.HttpProtocolOptions{}, fieldNames("upstream_protocol_options"), 6},
	tRegex:               {&matcherv3.RegexMatcher{}, nil, 0},
}

func fieldNames(ns ...protoreflect.Name) []protoreflect.Name { return ns }

// restOf returns the fields of interest of typed type id that its typed
// walk leaves to reflection: fieldsOf less the fields and oneofs it
// handles (worked out once per Validator, into rest).
func (vr *Validator) restOf(id typedID) []protoreflect.FieldDescriptor {
	md := typedWalks[id].msg.ProtoReflect().Descriptor()
	var rest []protoreflect.FieldDescriptor
	for _, fd := range vr.fieldsOf(md) {
		handled := false
		for _, n := range typedWalks[id].handled {
			if fd.Name() == n || fd.ContainingOneof() != nil && fd.ContainingOneof().Name() == n {
				handled = true
			}
		}
		if !handled {
			rest = append(rest, fd)
		}
	}
	return rest
}

// restFields returns restOf(id), worked out for every type at the first
// call.
func (vr *Validator) restFields(id typedID) []protoreflect.FieldDescriptor {
	vr.restOnce.Do(func() {
		for id := range typedID(numTyped) {
			vr.rest[id] = vr.restOf(id)
		}
	})
	return vr.rest[id]
}

// rest walks the fields of m (of typed type id) that its typed walk leaves
// to reflection, if set says one of them is set (a Go test of the fields,
// much cheaper than reflection). If the type has more or fewer such fields
// than the walk's test was written for (another version of the Envoy API),
// it walks them whatever set says.
func (v *validation) rest(m proto.Message, id typedID, set bool) {
	if fds := v.vr.restFields(id); set || len(fds) != typedWalks[id].guarded {
		v.walkFieldsOf(m.ProtoReflect(), fds)
	}
}

// other walks the member of oneof o of m that is set, if it is of
// interest: what a typed walk does for the members it does not handle.
func (v *validation) other(m proto.Message, o protoreflect.Name) {
	pm := m.ProtoReflect()
	fd := pm.WhichOneof(pm.Descriptor().Oneofs().ByName(o))
	if fd == nil {
		return
	}
	for _, f := range v.vr.fieldsOf(pm.Descriptor()) {
		if f == fd {
			v.walkFieldsOf(pm, []protoreflect.FieldDescriptor{fd})
			return
		}
	}
}

// walkMsg walks m: with its typed walk if it has one, else reflectively.
func (v *validation) walkMsg(m proto.Message) {
	switch m := m.(type) {
	case *anypb.Any:
		v.walkAny(m)
	case *listenerv3.Listener:
		v.wListener(m)
	case *listenerv3.FilterChain:
		v.wChain(m)
	case *listenerv3.Filter:
		v.wFilter(m)
	case *listenerv3.ApiListener:
		v.wAPIListener(m)
	case *corev3.TransportSocket:
		v.wTransportSocket(m)
	case *corev3.ConfigSource:
		v.wConfigSource(m)
	case *hcmv3.HttpConnectionManager:
		v.wHCM(m)
	case *hcmv3.HttpFilter:
		v.wHTTPFilter(m)
	case *hcmv3.Rds:
		v.wRds(m)
	case *rbachttpv3.RBAC:
		v.wHTTPRBAC(m)
	case *rbacnetv3.RBAC:
		v.wNetworkRBAC(m)
	case *rbacv3.RBAC:
		v.wRBAC(m)
	case *rbacv3.Policy:
		v.wPolicy(m)
	case *rbacv3.Permission:
		v.wPermission(m)
	case *rbacv3.Permission_Set:
		v.wPermissionSet(m)
	case *rbacv3.Principal:
		v.wPrincipal(m)
	case *rbacv3.Principal_Set:
		v.wPrincipalSet(m)
	case *rbacv3.Principal_Authenticated:
		v.wAuthenticated(m)
	case *routev3.HeaderMatcher:
		v.wHeaderMatcher(m)
	case *matcherv3.PathMatcher:
		v.wPathMatcher(m)
	case *matcherv3.StringMatcher:
		v.wStringMatcher(m)
	case *matcherv3.RegexMatcher:
		v.wRegex(m)
	case *routev3.RouteConfiguration:
		v.wRouteConfiguration(m)
	case *routev3.VirtualHost:
		v.wVirtualHost(m)
	case *routev3.Route:
		v.wRoute(m)
	case *routev3.RouteMatch:
		v.wRouteMatch(m)
	case *routev3.RouteAction:
		v.wRouteAction(m)
	case *routev3.WeightedCluster:
		v.wWeightedCluster(m)
	case *routev3.WeightedCluster_ClusterWeight:
		v.wClusterWeight(m)
	case *tcpproxyv3.TcpProxy:
		v.wTCPProxy(m)
	case *tcpproxyv3.TcpProxy_WeightedCluster:
		v.wTCPWeightedCluster(m)
	case *clusterv3.Cluster:
		v.wCluster(m)
	case *clusterv3.Cluster_EdsClusterConfig:
		v.wEDSClusterConfig(m)
	case *endpointv3.ClusterLoadAssignment:
		v.wLoadAssignment(m)
	case *endpointv3.LocalityLbEndpoints:
		v.wLocalityEndpoints(m)
	case *endpointv3.LbEndpoint:
		v.wLbEndpoint(m)
	case *tlsv3.DownstreamTlsContext:
		v.wDownstreamTLS(m)
	case *tlsv3.UpstreamTlsContext:
		v.wUpstreamTLS(m)
	case *tlsv3.CommonTlsContext:
		v.wCommonTLS(m)
	case *tlsv3.CommonTlsContext_CombinedCertificateValidationContext:
		v.wCombinedValidation(m)
	case *tlsv3.CertificateValidationContext:
		v.wValidationContext(m)
	case *tlsv3.SubjectAltNameMatcher:
		v.wSANMatcher(m)
	case *tlsv3.SdsSecretConfig:
		v.wSdsSecretConfig(m)
	case *tlsv3.Secret:
		v.wSecret(m)
	case *httpv3.HttpProtocolOptions:
		v.wHTTPProtocolOptions(m)
	default:
		v.walkFields(m.ProtoReflect())
	}
}

// walkAny walks the message in a (ValidateAll included).
func (v *validation) walkAny(a *anypb.Any) {
	if a == nil {
		return
	}
	inner, err := v.unpack(a)
	if err != nil {
		v.fail("Any %q: %v", a.GetTypeUrl(), err)
		return
	}
	v.validateAll(inner)
	v.walkMsg(inner)
}

func (v *validation) wListener(m *listenerv3.Listener) {
	if m == nil {
		return
	}
	v.listener(m)
	for _, fc := range m.FilterChains {
		v.wChain(fc)
	}
	v.wAPIListener(m.ApiListener)
	v.rest(m, tListener, m.StatsMatcher != nil || m.FcdsConfig != nil || m.FilterChainMatcher != nil || m.DefaultFilterChain != nil || m.Metadata != nil ||
		len(m.ListenerFilters) > 0 || m.UdpListenerConfig != nil || m.ConnectionBalanceConfig != nil || len(m.AccessLog) > 0)
}

// wChain walks a filter chain; that of a per-proxy listener once per
// Validator (see walkChain).
func (v *validation) wChain(m *listenerv3.FilterChain) {
	if m == nil {
		return
	}
	if v.chains {
		v.walkChain(m)
		return
	}
	v.wFilterChain(m)
}

func (v *validation) wFilterChain(m *listenerv3.FilterChain) {
	v.filterChain(m)
	for _, f := range m.Filters {
		v.wFilter(f)
	}
	v.wTransportSocket(m.TransportSocket)
	v.rest(m, tFilterChain, m.Metadata != nil)
}

func (v *validation) wFilter(m *listenerv3.Filter) {
	if m == nil {
		return
	}
	v.networkFilter(m)
	switch c := m.ConfigType.(type) {
	case nil:
	case *listenerv3.Filter_TypedConfig:
		v.walkAny(c.TypedConfig)
	default:
		v.other(m, "config_type")
	}
	v.rest(m, tFilter, false)
}

func (v *validation) wAPIListener(m *listenerv3.ApiListener) {
	if m == nil {
		return
	}
	v.apiListener(m)
	v.walkAny(m.ApiListener)
	v.rest(m, tAPIListener, false)
}

func (v *validation) wTransportSocket(m *corev3.TransportSocket) {
	if m == nil {
		return
	}
	switch c := m.ConfigType.(type) {
	case nil:
	case *corev3.TransportSocket_TypedConfig:
		v.walkAny(c.TypedConfig)
	default:
		v.other(m, "config_type")
	}
	v.rest(m, tTransportSocket, false)
}

func (v *validation) wConfigSource(m *corev3.ConfigSource) {
	if m == nil {
		return
	}
	v.configSource(m)
	switch m.ConfigSourceSpecifier.(type) {
	case nil, *corev3.ConfigSource_Ads, *corev3.ConfigSource_Self, *corev3.ConfigSource_Path:
	default:
		v.other(m, "config_source_specifier")
	}
	v.rest(m, tConfigSource, false)
}

func (v *validation) wHCM(m *hcmv3.HttpConnectionManager) {
	if m == nil {
		return
	}
	v.hcm(m)
	switch r := m.RouteSpecifier.(type) {
	case nil:
	case *hcmv3.HttpConnectionManager_Rds:
		v.wRds(r.Rds)
	case *hcmv3.HttpConnectionManager_RouteConfig:
		v.wRouteConfiguration(r.RouteConfig)
	default:
		v.other(m, "route_specifier")
	}
	for _, f := range m.HttpFilters {
		v.wHTTPFilter(f)
	}
	v.rest(m, tHCM, m.Tracing != nil || m.HttpProtocolOptions != nil || m.Http3ProtocolOptions != nil || len(m.AccessLog) > 0 ||
		len(m.OriginalIpDetectionExtensions) > 0 || len(m.EarlyHeaderMutationExtensions) > 0 || m.ForwardClientCertMatcher != nil ||
		len(m.UpgradeConfigs) > 0 || m.RequestIdExtension != nil || m.LocalReplyConfig != nil || m.TypedHeaderValidationConfig != nil)
}

func (v *validation) wHTTPFilter(m *hcmv3.HttpFilter) {
	if m == nil {
		return
	}
	v.httpFilter(m)
	switch c := m.ConfigType.(type) {
	case nil:
	case *hcmv3.HttpFilter_TypedConfig:
		v.walkAny(c.TypedConfig)
	default:
		v.other(m, "config_type")
	}
	v.rest(m, tHTTPFilter, false)
}

func (v *validation) wRds(m *hcmv3.Rds) {
	if m == nil {
		return
	}
	v.rds(m)
	v.wConfigSource(m.ConfigSource)
	v.rest(m, tRds, false)
}

func (v *validation) wRouteConfiguration(m *routev3.RouteConfiguration) {
	if m == nil {
		return
	}
	for _, vh := range m.VirtualHosts {
		v.wVirtualHost(vh)
	}
	v.rest(m, tRouteConfiguration, m.Vhds != nil || len(m.ClusterSpecifierPlugins) > 0 || len(m.RequestMirrorPolicies) > 0 ||
		len(m.TypedPerFilterConfig) > 0 || m.Metadata != nil || len(m.RouteSpecifiers) > 0)
}

func (v *validation) wVirtualHost(m *routev3.VirtualHost) {
	if m == nil {
		return
	}
	for _, r := range m.Routes {
		v.wRoute(r)
	}
	v.rest(m, tVirtualHost, m.Matcher != nil || len(m.VirtualClusters) > 0 || len(m.RateLimits) > 0 || m.Cors != nil || len(m.TypedPerFilterConfig) > 0 ||
		m.RetryPolicy != nil || m.RetryPolicyTypedConfig != nil || len(m.RequestMirrorPolicies) > 0 || m.Metadata != nil || len(m.RouteSpecifiers) > 0)
}

func (v *validation) wRoute(m *routev3.Route) {
	if m == nil {
		return
	}
	v.wRouteMatch(m.Match)
	switch a := m.Action.(type) {
	case nil:
	case *routev3.Route_Route:
		v.wRouteAction(a.Route)
	default:
		v.other(m, "action")
	}
	v.rest(m, tRoute, m.Metadata != nil || len(m.TypedPerFilterConfig) > 0 || len(m.RouteSpecifiers) > 0)
}

func (v *validation) wRouteMatch(m *routev3.RouteMatch) {
	if m == nil {
		return
	}
	switch p := m.PathSpecifier.(type) {
	case nil, *routev3.RouteMatch_Prefix, *routev3.RouteMatch_Path, *routev3.RouteMatch_PathSeparatedPrefix:
	case *routev3.RouteMatch_SafeRegex:
		v.wRegex(p.SafeRegex)
	default:
		v.other(m, "path_specifier")
	}
	for _, h := range m.Headers {
		v.wHeaderMatcher(h)
	}
	v.rest(m, tRouteMatch, len(m.QueryParameters) > 0 || len(m.Cookies) > 0 || len(m.DynamicMetadata) > 0 || len(m.FilterState) > 0)
}

func (v *validation) wRouteAction(m *routev3.RouteAction) {
	if m == nil {
		return
	}
	v.routeAction(m)
	switch c := m.ClusterSpecifier.(type) {
	case nil, *routev3.RouteAction_Cluster, *routev3.RouteAction_ClusterHeader:
	case *routev3.RouteAction_WeightedClusters:
		v.wWeightedCluster(c.WeightedClusters)
	default:
		v.other(m, "cluster_specifier")
	}
	v.rest(m, tRouteAction, m.MetadataMatch != nil || m.RegexRewrite != nil || m.PathRewritePolicy != nil || m.GetHostRewritePathRegex() != nil ||
		m.EarlyDataPolicy != nil || m.RetryPolicy != nil || m.RetryPolicyTypedConfig != nil || len(m.RequestMirrorPolicies) > 0 ||
		len(m.RateLimits) > 0 || len(m.HashPolicy) > 0 || m.Cors != nil || len(m.UpgradeConfigs) > 0 || m.InternalRedirectPolicy != nil)
}

func (v *validation) wWeightedCluster(m *routev3.WeightedCluster) {
	if m == nil {
		return
	}
	v.weightedClusters(m)
	for _, c := range m.Clusters {
		v.wClusterWeight(c)
	}
	v.rest(m, tWeightedCluster, false)
}

func (v *validation) wClusterWeight(m *routev3.WeightedCluster_ClusterWeight) {
	if m == nil {
		return
	}
	v.rest(m, tClusterWeight, m.MetadataMatch != nil || len(m.TypedPerFilterConfig) > 0)
}

func (v *validation) wTCPProxy(m *tcpproxyv3.TcpProxy) {
	if m == nil {
		return
	}
	v.tcpProxy(m)
	switch c := m.ClusterSpecifier.(type) {
	case nil, *tcpproxyv3.TcpProxy_Cluster:
	case *tcpproxyv3.TcpProxy_WeightedClusters:
		v.wTCPWeightedCluster(c.WeightedClusters)
	default:
		v.other(m, "cluster_specifier")
	}
	v.rest(m, tTCPProxy, m.OnDemand != nil || m.MetadataMatch != nil || len(m.AccessLog) > 0 || m.TunnelingConfig != nil || len(m.ProxyProtocolTlvs) > 0)
}

func (v *validation) wTCPWeightedCluster(m *tcpproxyv3.TcpProxy_WeightedCluster) {
	if m == nil {
		return
	}
	v.tcpWeightedClusters(m)
	v.rest(m, tTCPWeightedCluster, len(m.Clusters) > 0)
}
