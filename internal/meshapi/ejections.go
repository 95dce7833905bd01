package meshapi

import "time"

// EjectionReport is the body of POST /api/v1/agent/ejections: the
// backends the agent's Envoy has ejected right now (outlier detection),
// as its admin /clusters reports them. The agent sends it when the set
// changes and again every EjectionRefresh, so that a replica that
// restarted learns it; the server keeps the latest of each proxy and
// shows it while the proxy is connected and the report is younger than
// EjectionReportMaxAge. An empty report clears the last.
type EjectionReport struct {
	Clusters []EjectedCluster `json:"clusters"`
}

// EjectedCluster is one of Envoy's clusters with at least one ejected
// backend. For a mesh Service the cluster's name is the Service's
// namespace/name.
type EjectedCluster struct {
	Cluster string `json:"cluster"`
	// Hosts are the ejected backends' addresses (ip:port).
	Hosts []string `json:"hosts"`
}

// Bounds of an ejection report: the server refuses a larger one.
const (
	MaxEjectedClusters = 1024
	MaxEjectedHosts    = 1024 // per cluster
	MaxEjectionText    = 256  // a cluster name or a host address
)

// EjectionRefresh is how often an agent sends its report even when it did
// not change; EjectionReportMaxAge is how long the server trusts one (an
// agent that stopped reporting no longer says what is ejected).
const (
	EjectionRefresh      = 30 * time.Second
	EjectionReportMaxAge = 3 * EjectionRefresh
)
