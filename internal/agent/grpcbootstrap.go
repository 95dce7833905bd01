package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
)

// gRPC's xDS bootstrap (gRFC A27, A29, A36, A65), built from typed structs.
type grpcBootstrap struct {
	XDSServers                         []grpcXDSServer                    `json:"xds_servers"`
	Node                               grpcNode                           `json:"node"`
	CertificateProviders               map[string]grpcCertificateProvider `json:"certificate_providers"`
	ServerListenerResourceNameTemplate string                             `json:"server_listener_resource_name_template"`
}

type grpcXDSServer struct {
	ServerURI      string             `json:"server_uri"`
	ChannelCreds   []grpcChannelCreds `json:"channel_creds"`
	ServerFeatures []string           `json:"server_features"`
}

// grpcChannelCreds are the bootstrap's channel credentials: "insecure",
// the one type gRPC-Go, C-core (1.51 knows no "tls") and grpc-js (only
// google_default and insecure) all accept; the local xDS endpoint they
// reach is on this machine and holds the mTLS upstream.
type grpcChannelCreds struct {
	Type string `json:"type"`
}

// grpcFileWatcher is the config of the file_watcher certificate provider.
type grpcFileWatcher struct {
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
	CACertificateFile string `json:"ca_certificate_file"`
	RefreshInterval   string `json:"refresh_interval"`
}

type grpcNode struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	// Locality is required by grpc-js, even empty.
	Locality grpcLocality   `json:"locality"`
	Metadata map[string]any `json:"metadata"`
}

type grpcLocality struct {
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

// Labels of the agent config that give the node's locality.
const (
	RegionLabel = "topology.kubernetes.io/region"
	ZoneLabel   = "topology.kubernetes.io/zone"
)

type grpcCertificateProvider struct {
	PluginName string          `json:"plugin_name"`
	Config     grpcFileWatcher `json:"config"`
}

// GRPCCertificateProvider is the certificate provider instance name the
// xDS server's resources for proxyless gRPC refer to.
const GRPCCertificateProvider = "osm"

// GRPCBootstrap returns the xDS bootstrap for proxyless gRPC applications
// on this machine (point GRPC_XDS_BOOTSTRAP at grpc-bootstrap.json in the
// data directory): the agent's local xDS endpoint at localXDS (a gRPC
// target, unix:<path> or host:port) with insecure channel credentials, the
// node identity with osm.flavor "grpc" and the locality from the
// topology labels, and the "osm" file_watcher certificate provider on the
// service certificate files the agent keeps in dataDir. gRPC-Go, C-core
// (1.51 and later) and grpc-js (1.14) all accept it.
func GRPCBootstrap(p sidecar.ProxyConfig, dataDir, localXDS string) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if localXDS == "" {
		return nil, errors.New("gRPC bootstrap: no local xDS endpoint")
	}
	b := grpcBootstrap{
		XDSServers: []grpcXDSServer{{
			ServerURI:      localXDS,
			ChannelCreds:   []grpcChannelCreds{{Type: "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node: grpcNode{
			ID: p.NodeID, Cluster: p.Service.Name, Metadata: GRPCNodeMetadata(p),
			Locality: grpcLocality{Region: p.Labels[RegionLabel], Zone: p.Labels[ZoneLabel]},
		},
		CertificateProviders: map[string]grpcCertificateProvider{
			GRPCCertificateProvider: {PluginName: "file_watcher", Config: grpcFileWatcher{
				CertificateFile:   filepath.Join(dataDir, ServiceCertFile),
				PrivateKeyFile:    filepath.Join(dataDir, ServiceKeyFile),
				CACertificateFile: filepath.Join(dataDir, ServiceCAFile),
				RefreshInterval:   "60s",
			}},
		},
		ServerListenerResourceNameTemplate: "grpc/server?xds.resource.listening_address=%s",
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("gRPC bootstrap: %w", err)
	}
	return append(data, '\n'), nil
}

// GRPCNodeMetadata is the node metadata of this machine's proxyless gRPC
// applications: the bootstrap carries it, and the local xDS endpoint
// asserts it on every stream whatever the application sent.
func GRPCNodeMetadata(p sidecar.ProxyConfig) map[string]any { return p.NodeMetadata("grpc") }
