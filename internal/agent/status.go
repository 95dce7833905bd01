package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Status is what `osm-agent status` shows: the agent writes it to
// status.json in the data directory whenever it changes.
type Status struct {
	Identity           string    `json:"identity,omitempty"`
	CertificateExpires time.Time `json:"certificateExpires,omitzero"`
	LastRenewal        time.Time `json:"lastRenewal,omitzero"`
	LastRenewError     string    `json:"lastRenewError,omitempty"`
	XDSAddress         string    `json:"xdsAddress,omitempty"`
	// XDSServers are every xDS server the proxy and the local xDS
	// endpoint fail over along (XDSAddress is the first).
	XDSServers []string `json:"xdsServers,omitempty"`
	// APIServer is the osm-server API that answered last.
	APIServer                 string    `json:"apiServer,omitempty"`
	LastConfig                time.Time `json:"lastConfig,omitzero"`
	LastConfigError           string    `json:"lastConfigError,omitempty"`
	Hosts                     int       `json:"hosts"`
	ServiceCertificateExpires time.Time `json:"serviceCertificateExpires,omitzero"`
	// GatewayCertificateProblems are, on a gateway machine, the listeners
	// whose certificate files are unusable and why (none: all good).
	GatewayCertificateProblems []meshapi.CertificateProblem `json:"gatewayCertificateProblems,omitempty"`
	Proxy                      sidecar.Status               `json:"proxy"`
	UpdatedAt                  time.Time                    `json:"updatedAt"`
}

// Status returns the agent's current status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	st := a.st
	a.mu.Unlock()
	st.Proxy = a.sup.Status()
	return st
}

func (a *Agent) updateStatus(f func(*Status)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.st)
}

// writeStatus writes status.json; failures are logged, never fatal.
func (a *Agent) writeStatus() {
	st := a.Status()
	st.UpdatedAt = time.Now()
	data, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		err = writeAtomic(a.path(StatusFile), append(data, '\n'), 0o644)
	}
	if err != nil {
		a.log.Warn("write status file", "err", err)
	}
}

// ReadStatus reads the status file a running agent keeps in dataDir.
func ReadStatus(dataDir string) (Status, error) {
	var st Status
	data, err := os.ReadFile(filepath.Join(dataDir, StatusFile))
	if err != nil {
		return st, fmt.Errorf("agent status: %w (is `osm-agent run` running with this data directory?)", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("agent status %s: %w", filepath.Join(dataDir, StatusFile), err)
	}
	return st, nil
}
