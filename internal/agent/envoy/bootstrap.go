// Package envoy is the agent's reference sidecar driver: it renders Envoy's
// bootstrap (typed go-control-plane protos, never text templates) and the
// SDS files for the xDS client certificate, and runs and drains Envoy.
//
// It imports internal/agent/sidecar and internal/mesh of osm-vm, nothing
// else; the agent chooses it through a sidecar.Registry.
package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
)

// Names of the files Files renders, relative to the data directory, and of
// the resources inside them.
const (
	BootstrapFile    = "envoy-bootstrap.json"
	SDSDir           = "sds"
	ClientCertSDS    = "sds/xds-client-cert.json"
	CASDS            = "sds/xds-ca.json"
	ClientCertSecret = "xds-client-cert"
	CASecret         = "xds-ca"
	XDSCluster       = "osm-xds"
)

// DefaultAdminPort is Envoy's admin port on 127.0.0.1.
const DefaultAdminPort = 15000

// Bootstrap returns Envoy's bootstrap for p: node identity and metadata,
// admin on 127.0.0.1:adminPort, and ADS to p.XDSAddress (or every one of
// p.XDSAddresses, the replicas, one endpoint each) over mTLS whose
// certificate and CA come from the SDS files in dataDir/sds (see Secrets),
// so a renewed certificate needs no Envoy restart.
func Bootstrap(p sidecar.ProxyConfig, dataDir string, adminPort uint16) (*bootstrapv3.Bootstrap, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	servers, err := xdsServers(p.AllXDSAddresses())
	if err != nil {
		return nil, err
	}
	fields := p.NodeMetadata(p.EnvoyFlavor())
	md, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, fmt.Errorf("node metadata: %w", err)
	}

	h2, err := anypb.New(&httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{
						// A replica whose host died without closing the
						// connection is found within 40 s, and Envoy
						// reconnects to another.
						ConnectionKeepalive: &corev3.KeepaliveSettings{
							Interval: durationpb.New(xdsKeepaliveInterval),
							Timeout:  durationpb.New(xdsKeepaliveTimeout),
						},
					},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	sdsDir := filepath.Join(dataDir, SDSDir)
	sdsSource := func(file string) *corev3.ConfigSource {
		return &corev3.ConfigSource{
			ResourceApiVersion: corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{
				Path:             filepath.Join(dataDir, file),
				WatchedDirectory: &corev3.WatchedDirectory{Path: sdsDir},
			}},
		}
	}
	upstreamTLS := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{
				{Name: ClientCertSecret, SdsConfig: sdsSource(ClientCertSDS)},
			},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: CASecret, SdsConfig: sdsSource(CASDS)},
			},
			AlpnProtocols: []string{"h2"},
		},
	}
	// Every replica is an endpoint of the xDS cluster: when the one the
	// ADS stream is on dies, Envoy's reconnect picks another. IP
	// addresses make a STATIC cluster; names a STRICT_DNS one (every
	// address of every name), or LOGICAL_DNS for one name (a load
	// balancer's, whose addresses may change).
	discoveryType := clusterv3.Cluster_STATIC
	var names []string
	var lbEndpoints []*endpointv3.LbEndpoint
	for _, sv := range servers {
		if _, err := netip.ParseAddr(sv.host); err != nil && !slices.Contains(names, sv.host) {
			names = append(names, sv.host)
		}
		lbEndpoints = append(lbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(sv.host, sv.port),
			}},
		})
	}
	switch {
	case len(names) > 0 && len(servers) == 1:
		discoveryType = clusterv3.Cluster_LOGICAL_DNS
	case len(names) > 0:
		discoveryType = clusterv3.Cluster_STRICT_DNS
	}
	if len(names) == 1 {
		upstreamTLS.Sni = names[0]
	}
	tlsAny, err := anypb.New(upstreamTLS)
	if err != nil {
		return nil, err
	}
	ads := &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
	return &bootstrapv3.Bootstrap{
		Node: &corev3.Node{
			Id:       p.NodeID,
			Cluster:  p.Service.Name,
			Metadata: md,
		},
		Admin: &bootstrapv3.Admin{
			Address: socketAddress("127.0.0.1", uint32(adminPort)),
		},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				TransportApiVersion:       corev3.ApiVersion_V3,
				SetNodeOnFirstMessageOnly: true,
				GrpcServices: []*corev3.GrpcService{{
					TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster}},
				}},
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{{
				Name:                 XDSCluster,
				ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: discoveryType},
				ConnectTimeout:       durationpb.New(5 * time.Second),
				TypedExtensionProtocolOptions: map[string]*anypb.Any{
					"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2,
				},
				LoadAssignment: &endpointv3.ClusterLoadAssignment{
					ClusterName: XDSCluster,
					Endpoints: []*endpointv3.LocalityLbEndpoints{{
						LbEndpoints: lbEndpoints,
					}},
				},
				TransportSocket: &corev3.TransportSocket{
					Name:       "envoy.transport_sockets.tls",
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsAny},
				},
			}},
		},
		LayeredRuntime: runtimeLayers,
	}, nil
}

// Re2ProgramSizeLimit is Envoy's limit on a regular expression's compiled
// program (runtime re2.max_program_size.error_level; Envoy's default of 100
// refuses ordinary route regexes). osm-server's apply refuses expressions
// estimated over a third of it.
const Re2ProgramSizeLimit = 32768

// runtimeLayers is Envoy's runtime: a static layer with osm-vm's settings,
// and the admin layer (changes through the admin API's /runtime_modify),
// as Envoy has without a layered_runtime.
var runtimeLayers = &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{
	{Name: "osm-vm", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: &structpb.Struct{Fields: map[string]*structpb.Value{
		"re2.max_program_size.error_level": structpb.NewNumberValue(Re2ProgramSizeLimit),
	}}}},
	{Name: "admin", LayerSpecifier: &bootstrapv3.RuntimeLayer_AdminLayer_{AdminLayer: &bootstrapv3.RuntimeLayer_AdminLayer{}}},
}}

// The xDS connection's HTTP/2 keepalive (osm-server allows a ping every
// 10 s).
const (
	xdsKeepaliveInterval = 30 * time.Second
	xdsKeepaliveTimeout  = 10 * time.Second
)

type xdsServer struct {
	host string
	port uint32
}

// xdsServers parses the xDS addresses, host:port each, without repeats.
func xdsServers(addrs []string) ([]xdsServer, error) {
	var out []xdsServer
	for _, a := range addrs {
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("xDS address %q: want host:port: %w", a, err)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 {
			return nil, fmt.Errorf("xDS address %q: bad port %q", a, portStr)
		}
		if sv := (xdsServer{host, uint32(port)}); !slices.Contains(out, sv) {
			out = append(out, sv)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no xDS address")
	}
	return out, nil
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// Secrets returns the two SDS files (DiscoveryResponse documents, the
// format of Envoy's path config source): the xDS client certificate and key
// files, and the CA file that validates the server, with the control
// plane's identity the server's certificate must carry. Each names a watched
// directory (the directory of the files) so an atomic replacement of the
// certificate files is picked up by Envoy without a restart.
func Secrets(p sidecar.ProxyConfig) (clientCert, ca *discoveryv3.DiscoveryResponse, err error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	file := func(path string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
	}
	cert := &tlsv3.Secret{
		Name: ClientCertSecret,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: file(p.CertFile),
			PrivateKey:       file(p.KeyFile),
			WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(p.CertFile)},
		}},
	}
	// Envoy checks no name of an upstream's certificate unless told to
	// (no hostname check, no SNI-derived match); the mesh CA also signs
	// every machine's certificates, service certificates among them, which
	// may authenticate a server. Only the control plane's identity makes
	// the server the control plane.
	validation := &tlsv3.Secret{
		Name: CASecret,
		Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa:        file(p.CAFile),
			WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(p.CAFile)},
			MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: p.ControlPlaneID}},
			}},
		}},
	}
	wrap := func(s *tlsv3.Secret) (*discoveryv3.DiscoveryResponse, error) {
		a, err := anypb.New(s)
		if err != nil {
			return nil, err
		}
		return &discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{a}}, nil
	}
	if clientCert, err = wrap(cert); err != nil {
		return nil, nil, err
	}
	if ca, err = wrap(validation); err != nil {
		return nil, nil, err
	}
	return clientCert, ca, nil
}

// MarshalJSON renders m as indented protojson with stable whitespace, so
// rendering the same message twice gives the same bytes (protojson itself
// randomizes whitespace) and an unchanged file is never rewritten.
func MarshalJSON(m proto.Message) ([]byte, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
