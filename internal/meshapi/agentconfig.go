package meshapi

import "time"

// AgentConfig is the body of GET /api/v1/agent/config, read by osm-agent
// with its proxy certificate.
type AgentConfig struct {
	Identity           string             `json:"identity"`
	XDSAddress         string             `json:"xdsAddress"`
	Hosts              []HostEntry        `json:"hosts"`
	ServiceCertificate ServiceCertificate `json:"serviceCertificate"`
	// Replicas are the mesh's live osm-server replicas (empty when the
	// server knows none: one server, or replicas without an advertised
	// address). Agents keep the list and fail over along it.
	Replicas []Replica `json:"replicas,omitempty"`
	// Gateway is set for a machine enrolled as a Gateway: its listeners
	// and the certificates they name, which its agent checks.
	Gateway *GatewayConfig `json:"gateway,omitempty"`
}

// HostEntry maps a mesh host name to its virtual IP: one line of an
// agent's managed hosts block.
type HostEntry struct {
	Hostname string `json:"hostname"`
	IP       string `json:"ip"`
}

// ServiceCertificate is the service certificate for proxyless gRPC, as the
// agent receives it.
type ServiceCertificate struct {
	CertificatePEM string    `json:"certificatePEM"`
	PrivateKeyPEM  string    `json:"privateKeyPEM"`
	CAPEM          string    `json:"caPEM"`
	Expires        time.Time `json:"expires"`
}

// Replica is one osm-server replica as agents reach it: its HTTPS API base
// URL and its xDS address. The agent config lists every live replica so an
// agent can fail over to another when its own dies.
type Replica struct {
	// API is the HTTPS API base URL, https://host:port.
	API string `json:"api"`
	// XDS is the xDS address, host:port.
	XDS string `json:"xds"`
}
