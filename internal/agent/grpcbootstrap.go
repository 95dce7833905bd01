package agent

import (
	"encoding/json"
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

type grpcChannelCreds struct {
	Type   string          `json:"type"`
	Config grpcFileWatcher `json:"config"`
}

// grpcFileWatcher is the config of the "tls" channel credentials (A65) and
// of the file_watcher certificate provider: the same four keys.
type grpcFileWatcher struct {
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
	CACertificateFile string `json:"ca_certificate_file"`
	RefreshInterval   string `json:"refresh_interval"`
}

type grpcNode struct {
	ID       string         `json:"id"`
	Cluster  string         `json:"cluster"`
	Metadata map[string]any `json:"metadata"`
}

type grpcCertificateProvider struct {
	PluginName string          `json:"plugin_name"`
	Config     grpcFileWatcher `json:"config"`
}

// GRPCCertificateProvider is the certificate provider instance name the
// xDS server's resources for proxyless gRPC refer to.
const GRPCCertificateProvider = "osm"

// GRPCBootstrap returns the xDS bootstrap for proxyless gRPC applications
// on this machine (point GRPC_XDS_BOOTSTRAP at grpc-bootstrap.json in the
// data directory): the ADS server with mTLS from the proxy certificate
// files, the node identity with osm.flavor "grpc", and the "osm"
// file_watcher certificate provider on the service certificate files the
// agent keeps in dataDir.
func GRPCBootstrap(p sidecar.ProxyConfig, dataDir string) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	md := map[string]any{
		"osm.flavor":           "grpc",
		"osm.agentVersion":     p.AgentVersion,
		"osm.advertiseAddress": p.AdvertiseAddress,
		"osm.labels":           labels,
	}
	if p.AppPort != 0 {
		md["osm.appPort"] = p.AppPort
	}
	b := grpcBootstrap{
		XDSServers: []grpcXDSServer{{
			ServerURI: p.XDSAddress,
			ChannelCreds: []grpcChannelCreds{{Type: "tls", Config: grpcFileWatcher{
				CertificateFile:   p.CertFile,
				PrivateKeyFile:    p.KeyFile,
				CACertificateFile: p.CAFile,
				RefreshInterval:   "60s",
			}}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node: grpcNode{ID: p.NodeID, Cluster: p.Service.Name, Metadata: md},
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
