package meshapi

import "time"

// AgentConfig is the body of GET /api/v1/agent/config, read by osm-agent
// with its proxy certificate.
type AgentConfig struct {
	Identity           string             `json:"identity"`
	XDSAddress         string             `json:"xdsAddress"`
	Hosts              []HostEntry        `json:"hosts"`
	ServiceCertificate ServiceCertificate `json:"serviceCertificate"`
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
