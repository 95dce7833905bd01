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
// handles. Worked out once per type.
func (vr *Validator) restOf(id typedID) []protoreflect.FieldDescriptor {
	if vr.restDone[id] {
		return vr.rest[id]
	}
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
	vr.rest[id], vr.restDone[id] = rest, true
	return rest
}

// rest walks the fields of m (of typed type id) that its typed walk leaves
// to reflection, if set says one of them is set (a Go test of the fields,
// much cheaper than reflection). If the type has more or fewer such fields
// than the walk's test was written for (another version of the Envoy API),
// it walks them whatever set says.
func (v *validation) rest(m proto.Message, id typedID, set bool) {
	if fds := v.vr.restOf(id); set || len(fds) != typedWalks[id].guarded {
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

func (v *validation) wHTTPRBAC(m *rbachttpv3.RBAC) {
	if m == nil {
		return
	}
	v.wRBAC(m.Rules)
	v.wRBAC(m.ShadowRules)
	v.rest(m, tHTTPRBAC, m.Matcher != nil || m.ShadowMatcher != nil)
}

func (v *validation) wNetworkRBAC(m *rbacnetv3.RBAC) {
	if m == nil {
		return
	}
	v.wRBAC(m.Rules)
	v.wRBAC(m.ShadowRules)
	v.rest(m, tNetworkRBAC, m.Matcher != nil || m.ShadowMatcher != nil)
}

func (v *validation) wRBAC(m *rbacv3.RBAC) {
	if m == nil {
		return
	}
	for _, p := range m.Policies {
		v.wPolicy(p)
	}
	v.rest(m, tRBAC, m.AuditLoggingOptions != nil)
}

func (v *validation) wPolicy(m *rbacv3.Policy) {
	if m == nil {
		return
	}
	for _, p := range m.Permissions {
		v.wPermission(p)
	}
	for _, p := range m.Principals {
		v.wPrincipal(p)
	}
	v.rest(m, tPolicy, false)
}

func (v *validation) wPermission(m *rbacv3.Permission) {
	if m == nil {
		return
	}
	switch r := m.Rule.(type) {
	case nil, *rbacv3.Permission_Any, *rbacv3.Permission_DestinationIp, *rbacv3.Permission_DestinationPort, *rbacv3.Permission_DestinationPortRange:
	case *rbacv3.Permission_AndRules:
		v.wPermissionSet(r.AndRules)
	case *rbacv3.Permission_OrRules:
		v.wPermissionSet(r.OrRules)
	case *rbacv3.Permission_Header:
		v.wHeaderMatcher(r.Header)
	case *rbacv3.Permission_UrlPath:
		v.wPathMatcher(r.UrlPath)
	case *rbacv3.Permission_NotRule:
		v.wPermission(r.NotRule)
	default:
		v.other(m, "rule")
	}
	v.rest(m, tPermission, false)
}

func (v *validation) wPermissionSet(m *rbacv3.Permission_Set) {
	if m == nil {
		return
	}
	for _, r := range m.Rules {
		v.wPermission(r)
	}
	v.rest(m, tPermissionSet, false)
}

func (v *validation) wPrincipal(m *rbacv3.Principal) {
	if m == nil {
		return
	}
	switch id := m.Identifier.(type) {
	case nil, *rbacv3.Principal_Any, *rbacv3.Principal_SourceIp, *rbacv3.Principal_DirectRemoteIp, *rbacv3.Principal_RemoteIp:
	case *rbacv3.Principal_AndIds:
		v.wPrincipalSet(id.AndIds)
	case *rbacv3.Principal_OrIds:
		v.wPrincipalSet(id.OrIds)
	case *rbacv3.Principal_Authenticated_:
		v.wAuthenticated(id.Authenticated)
	case *rbacv3.Principal_Header:
		v.wHeaderMatcher(id.Header)
	case *rbacv3.Principal_UrlPath:
		v.wPathMatcher(id.UrlPath)
	case *rbacv3.Principal_NotId:
		v.wPrincipal(id.NotId)
	default:
		v.other(m, "identifier")
	}
	v.rest(m, tPrincipal, false)
}

func (v *validation) wPrincipalSet(m *rbacv3.Principal_Set) {
	if m == nil {
		return
	}
	for _, id := range m.Ids {
		v.wPrincipal(id)
	}
	v.rest(m, tPrincipalSet, false)
}

func (v *validation) wAuthenticated(m *rbacv3.Principal_Authenticated) {
	if m == nil {
		return
	}
	v.wStringMatcher(m.PrincipalName)
	v.rest(m, tAuthenticated, false)
}

func (v *validation) wHeaderMatcher(m *routev3.HeaderMatcher) {
	if m == nil {
		return
	}
	switch s := m.HeaderMatchSpecifier.(type) {
	case nil, *routev3.HeaderMatcher_ExactMatch, *routev3.HeaderMatcher_PresentMatch, *routev3.HeaderMatcher_PrefixMatch, *routev3.HeaderMatcher_SuffixMatch, *routev3.HeaderMatcher_ContainsMatch:
	case *routev3.HeaderMatcher_SafeRegexMatch:
		v.wRegex(s.SafeRegexMatch)
	case *routev3.HeaderMatcher_StringMatch:
		v.wStringMatcher(s.StringMatch)
	default:
		v.other(m, "header_match_specifier")
	}
	v.rest(m, tHeaderMatcher, false)
}

func (v *validation) wPathMatcher(m *matcherv3.PathMatcher) {
	if m == nil {
		return
	}
	switch r := m.Rule.(type) {
	case nil:
	case *matcherv3.PathMatcher_Path:
		v.wStringMatcher(r.Path)
	default:
		v.other(m, "rule")
	}
	v.rest(m, tPathMatcher, false)
}

func (v *validation) wStringMatcher(m *matcherv3.StringMatcher) {
	if m == nil {
		return
	}
	switch p := m.MatchPattern.(type) {
	case nil, *matcherv3.StringMatcher_Exact, *matcherv3.StringMatcher_Prefix, *matcherv3.StringMatcher_Suffix, *matcherv3.StringMatcher_Contains:
	case *matcherv3.StringMatcher_SafeRegex:
		v.wRegex(p.SafeRegex)
	default:
		v.other(m, "match_pattern")
	}
	v.rest(m, tStringMatcher, false)
}

func (v *validation) wRegex(m *matcherv3.RegexMatcher) {
	if m == nil {
		return
	}
	v.regex(m)
	v.rest(m, tRegex, false)
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

func (v *validation) wCluster(m *clusterv3.Cluster) {
	if m == nil {
		return
	}
	v.cluster(m)
	v.wTransportSocket(m.TransportSocket)
	for _, a := range m.TypedExtensionProtocolOptions {
		v.walkAny(a)
	}
	v.wEDSClusterConfig(m.EdsClusterConfig)
	v.wLoadAssignment(m.LoadAssignment)
	v.rest(m, tCluster, len(m.TransportSocketMatches) > 0 || m.TransportSocketMatcher != nil || m.StatsMatcher != nil || m.GetClusterType() != nil ||
		len(m.HealthChecks) > 0 || m.HttpProtocolOptions != nil || m.TypedDnsResolverConfig != nil || m.OutlierDetection != nil ||
		m.UpstreamBindConfig != nil || m.Metadata != nil || len(m.Filters) > 0 || m.LoadBalancingPolicy != nil || m.LrsServer != nil ||
		m.UpstreamConfig != nil || m.PreconnectPolicy != nil || m.QueuingPolicies != nil)
}

func (v *validation) wEDSClusterConfig(m *clusterv3.Cluster_EdsClusterConfig) {
	if m == nil {
		return
	}
	v.wConfigSource(m.EdsConfig)
	v.rest(m, tEDSClusterConfig, false)
}

func (v *validation) wLoadAssignment(m *endpointv3.ClusterLoadAssignment) {
	if m == nil {
		return
	}
	v.loadAssignment(m)
	for _, l := range m.Endpoints {
		v.wLocalityEndpoints(l)
	}
	v.rest(m, tLoadAssignment, false)
}

func (v *validation) wLocalityEndpoints(m *endpointv3.LocalityLbEndpoints) {
	if m == nil {
		return
	}
	for _, e := range m.LbEndpoints {
		v.wLbEndpoint(e)
	}
	v.rest(m, tLocalityEndpoints, m.Metadata != nil || m.LbConfig != nil)
}

func (v *validation) wLbEndpoint(m *endpointv3.LbEndpoint) {
	if m == nil {
		return
	}
	if m.Metadata != nil {
		v.walkMsg(m.Metadata)
	}
	v.rest(m, tLbEndpoint, false)
}

func (v *validation) wDownstreamTLS(m *tlsv3.DownstreamTlsContext) {
	if m == nil {
		return
	}
	v.wCommonTLS(m.CommonTlsContext)
	v.rest(m, tDownstreamTLS, m.GetSessionTicketKeysSdsSecretConfig() != nil)
}

func (v *validation) wUpstreamTLS(m *tlsv3.UpstreamTlsContext) {
	if m == nil {
		return
	}
	v.wCommonTLS(m.CommonTlsContext)
	v.rest(m, tUpstreamTLS, false)
}

func (v *validation) wCommonTLS(m *tlsv3.CommonTlsContext) {
	if m == nil {
		return
	}
	v.commonTLS(m)
	for _, s := range m.TlsCertificateSdsSecretConfigs {
		v.wSdsSecretConfig(s)
	}
	switch c := m.ValidationContextType.(type) {
	case nil:
	case *tlsv3.CommonTlsContext_ValidationContext:
		v.wValidationContext(c.ValidationContext)
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		v.wSdsSecretConfig(c.ValidationContextSdsSecretConfig)
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		v.wCombinedValidation(c.CombinedValidationContext)
	default:
		v.other(m, "validation_context_type")
	}
	v.rest(m, tCommonTLS, len(m.TlsCertificates) > 0 || m.CustomTlsCertificateSelector != nil || m.TlsCertificateCertificateProvider != nil || m.CustomHandshaker != nil)
}

func (v *validation) wCombinedValidation(m *tlsv3.CommonTlsContext_CombinedCertificateValidationContext) {
	if m == nil {
		return
	}
	v.wValidationContext(m.DefaultValidationContext)
	v.wSdsSecretConfig(m.ValidationContextSdsSecretConfig)
	v.rest(m, tCombinedValidation, m.ValidationContextCertificateProvider != nil)
}

func (v *validation) wValidationContext(m *tlsv3.CertificateValidationContext) {
	if m == nil {
		return
	}
	for _, s := range m.MatchTypedSubjectAltNames {
		v.wSANMatcher(s)
	}
	for _, s := range m.MatchSubjectAltNames {
		v.wStringMatcher(s)
	}
	v.rest(m, tValidationContext, m.CustomValidatorConfig != nil)
}

func (v *validation) wSANMatcher(m *tlsv3.SubjectAltNameMatcher) {
	if m == nil {
		return
	}
	v.wStringMatcher(m.Matcher)
	v.rest(m, tSANMatcher, false)
}

func (v *validation) wSdsSecretConfig(m *tlsv3.SdsSecretConfig) {
	if m == nil {
		return
	}
	v.sdsSecretConfig(m)
	v.wConfigSource(m.SdsConfig)
	v.rest(m, tSdsSecretConfig, false)
}

func (v *validation) wSecret(m *tlsv3.Secret) {
	if m == nil {
		return
	}
	switch t := m.Type.(type) {
	case nil:
	case *tlsv3.Secret_ValidationContext:
		v.wValidationContext(t.ValidationContext)
	default:
		v.other(m, "type")
	}
	v.rest(m, tSecret, false)
}

func (v *validation) wHTTPProtocolOptions(m *httpv3.HttpProtocolOptions) {
	if m == nil {
		return
	}
	switch o := m.UpstreamProtocolOptions.(type) {
	case nil:
	case *httpv3.HttpProtocolOptions_ExplicitHttpConfig_:
		v.walkMsg(o.ExplicitHttpConfig)
	case *httpv3.HttpProtocolOptions_AutoConfig:
		v.walkMsg(o.AutoConfig)
	default:
		v.other(m, "upstream_protocol_options")
	}
	v.rest(m, tHTTPProtocolOptions, len(m.HttpFilters) > 0 || m.HeaderValidationConfig != nil || m.OutlierDetection != nil || len(m.RequestMirrorPolicies) > 0 ||
		len(m.HashPolicy) > 0 || m.RetryPolicy != nil)
}
