// Package sidecar is the agent's sidecar driver abstraction (the seeds'
// "Sidecar Driver Interface"): a Driver renders one kind of proxy's
// configuration and says how to run and drain it; a Registry maps driver
// names to factories; a Supervisor runs a driver's process, forwards its
// logs, restarts it with capped exponential backoff and drains it on stop.
// A driver may run no process at all (the agent's "none" driver for
// proxyless gRPC machines): its Command returns nil.
//
// Envoy (internal/agent/envoy) is the reference driver. This package
// imports only internal/mesh of osm-vm and knows nothing of Envoy.
package sidecar

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// ProxyConfig is what a driver needs to render its proxy's bootstrap.
type ProxyConfig struct {
	// NodeID is the proxy certificate's common name; the xDS server
	// requires the node ID to equal it.
	NodeID  string
	Service mesh.MeshService
	// XDSAddress is the server's ADS address, host:port.
	XDSAddress string
	// XDSAddresses are every osm-server replica's ADS address, XDSAddress
	// among them, for a proxy that fails over between them; empty means
	// XDSAddress only.
	XDSAddresses []string
	// CertFile, KeyFile and CAFile are the proxy certificate, its key and
	// the mesh CA bundle, absolute paths. They are replaced atomically on
	// renewal and the proxy must pick up the new files without a restart.
	CertFile, KeyFile, CAFile string
	// ControlPlaneID is the identity (a URI SAN, mesh.ControlPlaneSPIFFEID)
	// the xDS server's certificate must carry; the proxy refuses any other
	// certificate from the mesh CA, such as a machine's.
	ControlPlaneID string

	AgentVersion     string
	AdvertiseAddress string
	// AppPort is the application's port on 127.0.0.1 (0: not set).
	AppPort uint16
	Labels  map[string]string
	// Gateway is set on an ingress gateway machine: its Envoy announces
	// itself as a gateway proxy (osm.flavor "gateway").
	Gateway bool
	// GatewayCertDir is a gateway machine's certificate directory, in the
	// node metadata as osm.gatewayCertDir.
	GatewayCertDir string
}

// EnvoyFlavor is the osm.flavor of the machine's Envoy: "gateway" on an
// ingress gateway machine, else "envoy".
func (p ProxyConfig) EnvoyFlavor() string {
	if p.Gateway {
		return "gateway"
	}
	return "envoy"
}

// NodeMetadata returns the node metadata osm-server reads from a proxy
// of flavor ("envoy" or "grpc"): flavour, agent version, advertise
// address, labels and app port.
func (p ProxyConfig) NodeMetadata(flavor string) map[string]any {
	labels := map[string]any{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	md := map[string]any{
		"osm.flavor":           flavor,
		"osm.agentVersion":     p.AgentVersion,
		"osm.advertiseAddress": p.AdvertiseAddress,
		"osm.labels":           labels,
	}
	if p.AppPort != 0 {
		md["osm.appPort"] = float64(p.AppPort)
	}
	if p.Gateway && p.GatewayCertDir != "" {
		md["osm.gatewayCertDir"] = p.GatewayCertDir
	}
	return md
}

// AllXDSAddresses returns XDSAddresses, or XDSAddress alone when it is
// empty.
func (p ProxyConfig) AllXDSAddresses() []string {
	if len(p.XDSAddresses) > 0 {
		return p.XDSAddresses
	}
	return []string{p.XDSAddress}
}

// Validate checks that the fields every driver needs are set.
func (p ProxyConfig) Validate() error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"node ID", p.NodeID}, {"xDS address", p.XDSAddress},
		{"certificate file", p.CertFile}, {"key file", p.KeyFile}, {"CA file", p.CAFile},
		{"control plane identity", p.ControlPlaneID},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("proxy config: %s not set", strings.Join(missing, ", "))
	}
	return p.Service.Validate()
}

// File is one configuration file a driver wants written, relative to the
// agent's data directory.
type File struct {
	Name string
	Data []byte
	Mode os.FileMode
}

// Driver is one kind of sidecar proxy.
type Driver interface {
	// Name is the name the driver is registered under, e.g. "envoy".
	Name() string
	// Files renders the proxy's configuration files for p. It does no I/O.
	Files(p ProxyConfig) ([]File, error)
	// BootstrapFile is the name of the file the proxy starts from, among
	// those Files renders; the agent runs the proxy on an existing one
	// while the server is unreachable.
	BootstrapFile() string
	// Check reports whether the proxy can be started (the binary exists
	// and is executable), with an error naming the path and the setting
	// to change.
	Check() error
	// Command returns a new, unstarted command that runs the proxy in the
	// foreground on the files Files rendered, or nil when the driver runs
	// no process (proxyless machines: the applications read the bootstrap
	// themselves); the supervisor then only waits for its context.
	Command() *exec.Cmd
	// Drain asks the running proxy to stop accepting new connections and
	// finish the ones it has. The supervisor terminates it afterwards.
	Drain(ctx context.Context) error
}

// Options configure a driver built by a Registry.
type Options struct {
	// BinaryPath is the proxy executable, a path or a name looked up on PATH.
	BinaryPath string
	// DataDir holds the files rendered by Files.
	DataDir string
	// AdminPort is the proxy's admin port on 127.0.0.1.
	AdminPort uint16
	// DrainTime is how long the proxy drains connections on stop.
	DrainTime time.Duration
}

// Factory builds a driver.
type Factory func(Options) (Driver, error)

// Registry maps driver names to factories. The zero value is empty and
// ready to use; it is not safe for concurrent registration.
type Registry struct {
	factories map[string]Factory
}

// Register adds a driver factory under name. Registering a name twice or a
// nil factory is an error.
func (r *Registry) Register(name string, f Factory) error {
	if f == nil {
		return fmt.Errorf("sidecar driver %q: nil factory", name)
	}
	if _, dup := r.factories[name]; dup {
		return fmt.Errorf("sidecar driver %q registered twice", name)
	}
	if r.factories == nil {
		r.factories = map[string]Factory{}
	}
	r.factories[name] = f
	return nil
}

// Names returns the registered driver names, sorted.
func (r *Registry) Names() []string {
	return slices.Sorted(maps.Keys(r.factories))
}

// New builds the driver registered under name.
func (r *Registry) New(name string, opts Options) (Driver, error) {
	f, ok := r.factories[name]
	if !ok {
		return nil, fmt.Errorf("sidecar driver %q is not known (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	return f(opts)
}
