package render

// The validation walk of clusters, load assignments, TLS contexts and secrets (see walk.go).

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

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
