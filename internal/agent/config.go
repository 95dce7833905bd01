package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/localxds"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Config is the agent's configuration, <config-dir>/agent.yaml. Its YAML
// keys are a user-facing contract.
type Config struct {
	// Server is the osm-server API base URL, https://host:port: one server,
	// or a DNS name or load balancer in front of several replicas.
	Server string `yaml:"server,omitempty"`
	// Servers are more osm-server API base URLs, one per replica, tried in
	// order after Server when it does not answer. The agent also learns
	// every replica from the server's agent config and keeps that list in
	// its state (state.json), so this is only where it starts.
	Servers []string `yaml:"servers,omitempty"`
	// CACertHash pins the mesh CA for the first enrollment, sha256:<hex>.
	CACertHash string `yaml:"caCertHash,omitempty"`
	Service    string `yaml:"service"`
	Namespace  string `yaml:"namespace"`
	// Proxy is the sidecar driver, "envoy" by default.
	Proxy string `yaml:"proxy,omitempty"`
	// EnvoyPath is the Envoy binary: a path, or a name looked up on PATH.
	EnvoyPath string `yaml:"envoyPath,omitempty"`
	// AdminPort is the proxy's admin port on 127.0.0.1.
	AdminPort uint16 `yaml:"adminPort,omitempty"`
	// AppPort is the application's port on 127.0.0.1, reported to the
	// server in the node metadata.
	AppPort uint16 `yaml:"appPort,omitempty"`
	// AdvertiseAddress is the address other machines reach this one on.
	AdvertiseAddress string            `yaml:"advertiseAddress,omitempty"`
	Labels           map[string]string `yaml:"labels,omitempty"`
	DataDir          string            `yaml:"dataDir,omitempty"`
	// HostsFile holds the managed block of mesh host names.
	HostsFile string `yaml:"hostsFile,omitempty"`
	// DrainTimeout is how long the proxy drains connections on stop.
	DrainTimeout time.Duration `yaml:"drainTimeout,omitempty"`
	// PollInterval is how often the agent fetches its config from the server.
	PollInterval time.Duration `yaml:"pollInterval,omitempty"`
	// LocalXDSAddress is a loopback host:port where the agent's local xDS
	// endpoint also listens, beside its Unix socket <dataDir>/xds.sock
	// (which the gRPC bootstrap names), for gRPC applications that cannot
	// reach a Unix socket. Empty: the socket only.
	LocalXDSAddress string `yaml:"localXDSAddress,omitempty"`
	// LocalXDSMaxStreams bounds the streams the local xDS endpoint carries
	// at once (0: localxds.DefaultMaxStreams); one beyond is refused.
	LocalXDSMaxStreams int `yaml:"localXDSMaxStreams,omitempty"`
	// MetricsAddress is where the agent serves Prometheus metrics, on
	// loopback (DefaultMetricsAddress); "off" turns them off.
	MetricsAddress string `yaml:"metricsAddress,omitempty"`
	// Gateway is "ingress" on an ingress gateway machine: its Envoy is
	// the ingress gateway of the Gateway named by service and namespace,
	// listening on the advertise address for clients outside the mesh;
	// "egress" on an egress gateway machine: its Envoy is the
	// EgressGateway named by service and namespace, accepting the mesh's
	// mTLS on the advertise address and connecting to the external hosts
	// (whose real names it resolves: its hosts block maps none to a VIP).
	// Empty: a mesh machine.
	Gateway string `yaml:"gateway,omitempty"`
	// GatewayCertDir is, on a gateway machine, where the certificate
	// files of the Gateway's HTTPS listeners are: a certificateRef to
	// Secret <name> in namespace <ns> is <dir>/<ns>/<name>/tls.crt and
	// tls.key (default meshapi.DefaultGatewayCertDir). The agent announces
	// it to the server, which renders the listeners with it, and checks
	// the files.
	GatewayCertDir string `yaml:"gatewayCertDir,omitempty"`
}

// Gateway values of gateway machines.
const (
	GatewayIngress = "ingress"
	GatewayEgress  = "egress"
)

// DefaultConfigDir is where install writes agent.yaml.
func DefaultConfigDir() string {
	if runtime.GOOS == "windows" {
		return filepath.Join(os.Getenv("ProgramData"), "osm-agent")
	}
	return "/etc/osm-agent"
}

// ConfigFile is the name of the configuration file in the config directory.
const ConfigFile = "agent.yaml"

// WithDefaults returns c with every unset optional field at its default.
func (c Config) WithDefaults() Config {
	if c.Proxy == "" {
		c.Proxy = envoy.Name
	}
	if c.EnvoyPath == "" {
		c.EnvoyPath = "envoy"
	}
	if c.AdminPort == 0 {
		c.AdminPort = envoy.DefaultAdminPort
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if c.HostsFile == "" {
		c.HostsFile = defaultHostsFile()
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 30 * time.Second
	}
	if c.MetricsAddress == "" {
		c.MetricsAddress = DefaultMetricsAddress
	}
	if c.Gateway != "" && c.GatewayCertDir == "" {
		c.GatewayCertDir = meshapi.DefaultGatewayCertDir
	}
	return c
}

func defaultHostsFile() string {
	if runtime.GOOS == "windows" {
		return filepath.Join(os.Getenv("SystemRoot"), `System32\drivers\etc\hosts`)
	}
	return "/etc/hosts"
}

// APIServers returns the configured osm-server URLs: Server, then
// Servers, without repeats.
func (c Config) APIServers() []string {
	var out []string
	for _, s := range append([]string{c.Server}, c.Servers...) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// MeshService returns the service this machine runs.
func (c Config) MeshService() mesh.MeshService {
	return mesh.MeshService{Namespace: c.Namespace, Name: c.Service}
}

// Validate checks every field; each error names the key and the fix.
func (c Config) Validate() error {
	var errs []error
	if c.Server == "" && len(c.Servers) == 0 {
		errs = append(errs, errors.New("server: not set (the osm-server URL, https://host:port, from `osm-server token create`; or servers: a list, one per replica)"))
	}
	for _, s := range c.APIServers() {
		if u, err := url.Parse(s); err != nil || u.Scheme != "https" || u.Host == "" {
			key := "server"
			if s != c.Server {
				key = "servers"
			}
			errs = append(errs, fmt.Errorf("%s %q: want https://host:port", key, s))
		}
	}
	if c.CACertHash != "" {
		if _, err := meshapi.ParseCAHash(c.CACertHash); err != nil {
			errs = append(errs, fmt.Errorf("caCertHash: %w", err))
		}
	}
	if err := mesh.ValidateLabel("service", c.Service); err != nil {
		errs = append(errs, err)
	}
	if err := mesh.ValidateLabel("namespace", c.Namespace); err != nil {
		errs = append(errs, err)
	}
	if c.AdvertiseAddress != "" {
		if _, err := netip.ParseAddr(c.AdvertiseAddress); err != nil {
			errs = append(errs, fmt.Errorf("advertiseAddress %q: not an IP address", c.AdvertiseAddress))
		}
	}
	if c.DataDir != "" && !filepath.IsAbs(c.DataDir) {
		errs = append(errs, fmt.Errorf("dataDir %q: must be an absolute path", c.DataDir))
	}
	if c.HostsFile != "" && !filepath.IsAbs(c.HostsFile) {
		errs = append(errs, fmt.Errorf("hostsFile %q: must be an absolute path", c.HostsFile))
	}
	if c.DrainTimeout < 0 || c.PollInterval < 0 {
		errs = append(errs, errors.New("drainTimeout and pollInterval must not be negative"))
	}
	if c.AppPort != 0 && c.AppPort == c.AdminPort {
		errs = append(errs, fmt.Errorf("appPort %d is the proxy's adminPort", c.AppPort))
	}
	if c.LocalXDSAddress != "" {
		if ap, err := netip.ParseAddrPort(c.LocalXDSAddress); err != nil || !ap.Addr().IsLoopback() {
			errs = append(errs, fmt.Errorf("localXDSAddress %q: want a loopback address and port, such as 127.0.0.1:15010 (the endpoint serves without credentials)", c.LocalXDSAddress))
		}
	}
	if c.LocalXDSMaxStreams < 0 || c.LocalXDSMaxStreams > 10000 {
		errs = append(errs, fmt.Errorf("localXDSMaxStreams %d is out of range: give a number of streams from 1 to 10000 (leave it out for %d)", c.LocalXDSMaxStreams, localxds.DefaultMaxStreams))
	}
	if err := validateMetricsAddress(c.MetricsAddress); err != nil {
		errs = append(errs, err)
	}
	switch c.Gateway {
	case "", GatewayIngress, GatewayEgress:
	default:
		errs = append(errs, fmt.Errorf("gateway %q: want ingress or egress, or leave it out for a mesh machine", c.Gateway))
	}
	if c.GatewayCertDir != "" {
		switch {
		case c.Gateway == "":
			errs = append(errs, fmt.Errorf("gatewayCertDir %q: only a gateway machine (gateway: ingress) has listener certificates; leave it out", c.GatewayCertDir))
		case !filepath.IsAbs(c.GatewayCertDir) || filepath.Clean(c.GatewayCertDir) != c.GatewayCertDir:
			errs = append(errs, fmt.Errorf("gatewayCertDir %q: want an absolute, clean directory path such as %s", c.GatewayCertDir, meshapi.DefaultGatewayCertDir))
		}
	}
	if c.Gateway != "" && c.Proxy != "" && c.Proxy != envoy.Name {
		errs = append(errs, fmt.Errorf("gateway %q needs proxy envoy, not %q: a gateway machine runs Envoy", c.Gateway, c.Proxy))
	}
	for k := range c.Labels {
		if k == "" || strings.ContainsAny(k, " \t\n") {
			errs = append(errs, fmt.Errorf("labels: key %q is empty or holds whitespace", k))
		}
	}
	return errors.Join(errs...)
}

// LoadConfig reads a config file strictly: unknown keys and wrong types are
// errors naming the file, line and key. The result has defaults applied
// and is validated.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read agent config: %w (write it with `osm-agent install`)", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes and validates the contents of the agent config file
// at path, as LoadConfig does; path only names the file in errors.
func ParseConfig(path string, data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("agent config %s: %s%s", path, strings.TrimPrefix(err.Error(), "yaml: "), keysAtErrorLines(data, err))
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("agent config %s: %w", path, err)
	}
	return c, nil
}

// keysAtErrorLines names the top-level keys on the lines a YAML type error
// mentions, which yaml.v3 leaves out ("line 4: cannot unmarshal !!str").
func keysAtErrorLines(data []byte, err error) string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return ""
	}
	var keys []string
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if strings.Contains(err.Error(), fmt.Sprintf("line %d:", m.Content[i].Line)) {
			keys = append(keys, m.Content[i].Value)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf(" (key %s)", strings.Join(keys, ", "))
}

// WriteConfig writes c to path (0600: it is the machine's mesh settings),
// creating the directory.
func WriteConfig(path string, c Config) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	return writeAtomic(path, append([]byte("# osm-agent configuration, written by `osm-agent install`.\n"), data...), 0o600)
}
