package render

import (
	"errors"
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Extension names Envoy and gRPC know the typed configs by.
const (
	tlsTransportSocket = "envoy.transport_sockets.tls"
	hcmFilter          = "envoy.filters.network.http_connection_manager"
	tcpProxyFilter     = "envoy.filters.network.tcp_proxy"
	networkRBACFilter  = "envoy.filters.network.rbac"
	httpRBACFilter     = "envoy.filters.http.rbac"
	routerFilter       = "envoy.filters.http.router"
	httpProtocolOpts   = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

var alpn = []string{"h2", "http/1.1"}

// builder collects the first error of marshalling typed configs, so the
// rendering code stays a tree of literals.
type builder struct {
	err error
	// keep > 0 while building a message for a Memo: packed collects the
	// Anys packed meanwhile with their typed messages (see memoised).
	keep   int
	packed []packedAny
}

// any packs m deterministically (maps in key order), so equal content
// gives equal bytes and an unchanged resource keeps its version.
func (b *builder) any(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true})
	if err != nil && b.err == nil {
		b.err = fmt.Errorf("render: marshal %T: %w", m, err)
	}
	if b.keep > 0 {
		b.packed = append(b.packed, packedAny{any: a, typeURL: a.TypeUrl, value: a.Value, msg: m})
	}
	return a
}

// Messages that are the same wherever they appear are built once and
// shared by every resource that holds them (a full generation for W built
// about 7,000 ConfigSources): like every message render returns, they
// must never be modified.
var (
	adsSource = &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
	// The SDS secrets every proxy's TLS contexts refer to.
	sdsServiceCert = &tlsv3.SdsSecretConfig{Name: ServiceCertSecret, SdsConfig: adsSource}
	sdsRootCA      = &tlsv3.SdsSecretConfig{Name: RootCASecret, SdsConfig: adsSource}
)

// constants holds the typed message of each Any packed once, at start, and
// shared by every resource that holds it (see packConstant). Read-only
// after package initialisation.
var constants = map[*anypb.Any]proto.Message{}

// packConstant packs m, a literal, into an Any that resources share: the
// Validator takes m back from constants instead of unpacking the Any.
func packConstant(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(fmt.Sprintf("render: packing the constant %T: %v", m, err)) // a literal of generated types
	}
	constants[a] = m
	return a
}

// The HTTP router filter and the inbound listeners' TLS, one for all.
var (
	routerHTTPFilter = &hcmv3.HttpFilter{Name: routerFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: packConstant(&routerv3.Router{})}}
	downstreamSocket = [...]*corev3.TransportSocket{
		Envoy: {Name: tlsTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packConstant(downstreamTLS(Envoy))}},
		GRPC:  {Name: tlsTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: packConstant(downstreamTLS(GRPC))}},
	}
)

func certProvider() *tlsv3.CertificateProviderPluginInstance {
	return &tlsv3.CertificateProviderPluginInstance{InstanceName: CertProviderInstance}
}

// downstreamTLS terminates mTLS on inbound listeners with the service
// certificate, requiring a client certificate from the mesh CA. Who may
// connect is decided by RBAC.
func downstreamTLS(f Flavor) *tlsv3.DownstreamTlsContext {
	ctx := &tlsv3.DownstreamTlsContext{RequireClientCertificate: wrapperspb.Bool(true)}
	if f == GRPC {
		ctx.CommonTlsContext = &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: certProvider(),
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: certProvider(),
			}},
		}
		return ctx
	}
	ctx.CommonTlsContext = &tlsv3.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsServiceCert},
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sdsRootCA},
		AlpnProtocols:                  alpn,
	}
	return ctx
}

// upstreamTLS originates mTLS to an upstream with the proxy's service
// certificate and accepts only peers presenting one of spiffeIDs.
func upstreamTLS(f Flavor, spiffeIDs []string, http bool) *tlsv3.UpstreamTlsContext {
	if f == GRPC {
		var sans []*matcherv3.StringMatcher
		for _, id := range spiffeIDs {
			sans = append(sans, &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}})
		}
		return &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: certProvider(),
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: certProvider(),
				MatchSubjectAltNames:          sans,
			}},
		}}
	}
	var sans []*tlsv3.SubjectAltNameMatcher
	for _, id := range spiffeIDs {
		sans = append(sans, &tlsv3.SubjectAltNameMatcher{
			SanType: tlsv3.SubjectAltNameMatcher_URI,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: id}},
		})
	}
	// No SNI: the upstream's inbound listener has one filter chain. ALPN
	// only for HTTP upstreams. (Smaller clusters keep a 10,000-cluster
	// CDS response under gRPC's 4 MiB message limit.)
	var protos []string
	if http {
		protos = alpn
	}
	return &tlsv3.UpstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsServiceCert},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sans},
				ValidationContextSdsSecretConfig: sdsRootCA,
			}},
			AlpnProtocols: protos,
		},
	}
}

func (b *builder) transportSocket(m proto.Message) *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: tlsTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: b.any(m)}}
}

// Field numbers of the messages EncodeServiceCertSecret writes
// (envoy/extensions/transport_sockets/tls/v3, envoy/config/core/v3).
const (
	secretName            = 1 // Secret.name
	secretTLSCertificate  = 2 // Secret.tls_certificate, of the oneof type
	tlsCertificateChain   = 1 // TlsCertificate.certificate_chain (DataSource)
	tlsCertificatePrivKey = 2 // TlsCertificate.private_key (DataSource)
	dataSourceInlineBytes = 2 // DataSource.inline_bytes, of the oneof specifier
)

// EncodeServiceCertSecret appends to b the wire encoding of the
// ServiceCertSecret of Secrets(certChainPEM, keyPEM, ...) and returns it:
// byte for byte protobuf-go's deterministic marshal of the message
// (TestEncodeServiceCertSecret), written directly. What
// protoc-gen-validate checks of it (inline bytes not empty) is checked
// here: an empty PEM is an error, as in Secrets.
func EncodeServiceCertSecret(b []byte, certChainPEM, keyPEM []byte) ([]byte, error) {
	if err := emptyPEMs(secretPEM{"service certificate chain", certChainPEM}, secretPEM{"service private key", keyPEM}); err != nil {
		return nil, err
	}
	source := func(pem []byte) int { return sizeNested(len(pem)) }
	tls := sizeNested(source(certChainPEM)) + sizeNested(source(keyPEM))
	b = slices.Grow(b, sizeNested(len(ServiceCertSecret))+sizeNested(tls))
	b = protowire.AppendTag(b, secretName, protowire.BytesType)
	b = protowire.AppendString(b, ServiceCertSecret)
	b = protowire.AppendTag(b, secretTLSCertificate, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tls))
	for _, x := range []struct {
		num protowire.Number
		pem []byte
	}{{tlsCertificateChain, certChainPEM}, {tlsCertificatePrivKey, keyPEM}} {
		b = protowire.AppendTag(b, x.num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(source(x.pem)))
		b = protowire.AppendTag(b, dataSourceInlineBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, x.pem)
	}
	return b, nil
}

// Secrets returns the SDS secrets of a proxy (Envoy flavour): its service's
// certificate chain and private key as ServiceCertSecret and the mesh CA as
// RootCASecret, all PEM. The secrets of one service are identical for all
// its proxies; the root is identical for every proxy. gRPC clients read the
// same material from files (certificate provider "osm") and get no secrets.
func Secrets(certChainPEM, keyPEM, rootPEM []byte) ([]*tlsv3.Secret, error) {
	if err := emptyPEMs(secretPEM{"service certificate chain", certChainPEM}, secretPEM{"service private key", keyPEM}, secretPEM{"mesh root certificate", rootPEM}); err != nil {
		return nil, err
	}
	return []*tlsv3.Secret{
		rootSecret(rootPEM),
		{Name: ServiceCertSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inlineBytes(certChainPEM),
			PrivateKey:       inlineBytes(keyPEM),
		}}},
	}, nil
}

// RootSecret returns the RootCASecret of Secrets(..., rootPEM).
func RootSecret(rootPEM []byte) (*tlsv3.Secret, error) {
	if err := emptyPEMs(secretPEM{"mesh root certificate", rootPEM}); err != nil {
		return nil, err
	}
	return rootSecret(rootPEM), nil
}

// secretPEM is a PEM a secret is made of, and what it is.
type secretPEM struct {
	what string
	b    []byte
}

// emptyPEMs reports every one of pems that is empty.
func emptyPEMs(pems ...secretPEM) error {
	var errs []error
	for _, p := range pems {
		if len(p.b) == 0 {
			errs = append(errs, fmt.Errorf("render: secrets: empty %s: pass the PEM the mesh CA issued", p.what))
		}
	}
	return errors.Join(errs...)
}

func rootSecret(rootPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: RootCASecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{TrustedCa: inlineBytes(rootPEM)}}}
}

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}
