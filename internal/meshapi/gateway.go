package meshapi

// DefaultGatewayCertDir is where an ingress gateway machine keeps the
// certificate files of its Gateway's HTTPS listeners unless its agent
// config says otherwise (gatewayCertDir): a listener's certificateRef to
// Secret <name> in namespace <ns> is <dir>/<ns>/<name>/tls.crt (the chain,
// leaf first) and tls.key. The agent announces its directory to the server
// (node metadata osm.gatewayCertDir), which renders the listeners with it.
const DefaultGatewayCertDir = "/etc/osm/gateway-tls"

// GatewayConfig is, in the agent config of a machine enrolled as a
// Gateway, what its agent checks on the machine: the Gateway's listeners
// and the certificate each HTTPS listener names.
type GatewayConfig struct {
	// Gateway is the Gateway's namespace/name.
	Gateway   string            `json:"gateway"`
	Listeners []GatewayListener `json:"listeners"`
}

// GatewayListener is one listener of a Gateway as its machines' agents see it.
type GatewayListener struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	// Hostname is the listener's ("" for any); the certificate must cover it.
	Hostname string `json:"hostname,omitempty"`
	// CertificateNamespace and CertificateName name the Secret of an
	// HTTPS listener's certificateRef: the files
	// <gatewayCertDir>/<namespace>/<name>/tls.crt and tls.key.
	CertificateNamespace string `json:"certificateNamespace,omitempty"`
	CertificateName      string `json:"certificateName,omitempty"`
}

// GatewayReport is the body of POST /api/v1/agent/gateway-report: what
// the agent of a machine enrolled as a Gateway found wrong with the
// certificate files of the Gateway's listeners (none: every one is good).
// The server shows it in the Gateway's status while the machine is
// connected.
type GatewayReport struct {
	Certificates []CertificateProblem `json:"certificates"`
}

// CertificateProblem is one listener whose certificate files are missing,
// unreadable or wrong, with the error naming the file and the fix.
type CertificateProblem struct {
	Listener string `json:"listener"`
	Error    string `json:"error"`
}
