package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/enroll"
	"github.com/osm-vm/osm-vm/internal/gctune"
	"github.com/osm-vm/osm-vm/internal/httpserve"
	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store/consulstore"
	"github.com/osm-vm/osm-vm/internal/xds"
)

// Config is osm-server's configuration. Its YAML keys are a user-facing
// contract: docs and scripts depend on them.
type Config struct {
	DataDir      string `yaml:"dataDir"`
	PluginDir    string `yaml:"pluginDir"`
	DebugAddress string `yaml:"debugAddress"`
	APIAddress   string `yaml:"apiAddress"`
	XDSAddress   string `yaml:"xdsAddress"`
	// TrustDomain is the SPIFFE trust domain of the mesh CA; it is fixed
	// when the CA is created on first start.
	TrustDomain string `yaml:"trustDomain"`
	// ServerNames are extra DNS names or IPs agents use to reach this
	// server; the serving certificate covers them, the host name and
	// every local address.
	ServerNames []string         `yaml:"serverNames"`
	Providers   []ProviderConfig `yaml:"providers"`
	// GCPercent is the Go garbage collector's target (GOGC): the heap may
	// grow by this percentage of what is live (and the goroutine stacks)
	// before the next collection. The GOGC environment variable wins.
	GCPercent int `yaml:"gcPercent"`
	// MemoryLimit is the Go runtime's soft memory limit (GOMEMLIMIT), for
	// example "3GiB" in the file; 0 ("" in the file) for none. The
	// GOMEMLIMIT environment variable wins.
	MemoryLimit byteSize `yaml:"memoryLimit"`
	// IdleCollection: when the server goes idle after a burst of work
	// with the heap nearer its goal than such a burst allocates, collect
	// then rather than in the middle of the next burst (see internal/gctune).
	IdleCollection bool `yaml:"idleCollection"`
	// TokenRetention is how long a join token is kept after it expired or
	// was revoked before it is deleted, for example "168h".
	TokenRetention time.Duration `yaml:"tokenRetention"`
	// ProxyRecordRetention is how long a proxy's record is kept after
	// every certificate it vouches for expired before it is deleted, for
	// example "168h".
	ProxyRecordRetention time.Duration `yaml:"proxyRecordRetention"`
	// HandshakeTimeout bounds how long a new connection to any listener
	// (xDS, HTTPS API, debug) may take to finish its TLS handshake (and,
	// on HTTP, its request headers) before it is closed.
	HandshakeTimeout time.Duration `yaml:"handshakeTimeout"`
	// WriteTimeout is how long a client of the HTTPS API or the debug
	// listener may leave a response untaken: each write of a response
	// must be taken within it (plus a second per 4 KiB the write
	// carries), so a download taken slowly but steadily runs to its end.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// JoinDownloads and JoinDownloadsPerClient bound the osm-agent
	// packages the join route sends at once, in all and to one client
	// address; more are refused with 503 or 429 and Retry-After.
	JoinDownloads          int `yaml:"joinDownloads"`
	JoinDownloadsPerClient int `yaml:"joinDownloadsPerClient"`
	// XDSMaxStreamsPerProxy bounds the xDS streams one proxy identity
	// (a machine's certificate) may have open at once.
	XDSMaxStreamsPerProxy int `yaml:"xdsMaxStreamsPerProxy"`
	// StartupGrace is how long after start an endpoint on an address no
	// proxy is connected from is still sent to callers (the participant
	// rule), so that after a restart callers keep their upstreams while
	// the fleet reconnects; 0 for none.
	StartupGrace time.Duration `yaml:"startupGrace"`
	// AgentPackageDir holds the osm-agent packages the one-line join
	// installs (served at /join/packages/); "" for <dataDir>/agent-packages.
	AgentPackageDir string `yaml:"agentPackageDir"`
	// Store says where the server's state lives: the bbolt file in
	// dataDir (one server) or Consul KV (several replicas).
	Store StoreConfig `yaml:"store"`
	// DNS publishes host names at the operator's DNS servers (dns.go).
	DNS DNSConfig `yaml:"dns"`
}

func (c Config) agentPackageDir() string {
	if c.AgentPackageDir != "" {
		return c.AgentPackageDir
	}
	return filepath.Join(c.DataDir, "agent-packages")
}

// Store backends.
const (
	storeBolt   = "bbolt"
	storeConsul = "consul"
)

// StoreConfig is the `store:` section.
type StoreConfig struct {
	// Backend is "bbolt" (the default: a file in dataDir) or "consul".
	Backend string `yaml:"backend"`
	// Consul is how to reach Consul; empty keys take Consul's standard
	// environment variables (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN,
	// CONSUL_CACERT, ...), then Consul's defaults.
	Consul consulstore.Config `yaml:"consul"`
}

// ProviderConfig is one `providers:` entry.
type ProviderConfig struct {
	Name   string         `yaml:"name"`
	Plugin string         `yaml:"plugin"`
	SHA256 string         `yaml:"sha256"`
	Config map[string]any `yaml:"config"`
}

// defaultConfig returns the configuration `osm-server serve` uses with no
// config file.
func defaultConfig() Config {
	return Config{
		DataDir:                defaultDataDir(),
		PluginDir:              defaultPluginDir(),
		DebugAddress:           "127.0.0.1:15090",
		APIAddress:             "0.0.0.0:15443",
		XDSAddress:             "0.0.0.0:15128",
		TrustDomain:            "osm.local",
		GCPercent:              gctune.DefaultGCPercent,
		IdleCollection:         true,
		TokenRetention:         enroll.DefaultTokenRetention,
		ProxyRecordRetention:   certificate.DefaultProxyRecordRetention,
		HandshakeTimeout:       xds.DefaultHandshakeTimeout,
		WriteTimeout:           httpserve.DefaultWriteTimeout,
		JoinDownloads:          join.DefaultDownloads,
		JoinDownloadsPerClient: join.DefaultDownloadsPerClient,
		StartupGrace:           defaultStartupGrace,
		Store:                  StoreConfig{Backend: storeBolt},
		XDSMaxStreamsPerProxy:  xds.DefaultMaxStreamsPerProxy,
	}
}

// defaultDataDir is /var/lib/osm for root and the user's state directory
// otherwise ($XDG_STATE_HOME/osm or ~/.local/state/osm).
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/osm"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "osm")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "osm")
	}
	return filepath.Join(os.TempDir(), "osm")
}

// defaultPluginDir is /usr/lib/osm/plugins where the packages install
// plugins; when that does not exist (a build tree, a tarball), the directory
// holding the osm-server executable.
func defaultPluginDir() string {
	const packaged = "/usr/lib/osm/plugins"
	if _, err := os.Stat(packaged); err == nil {
		return packaged
	}
	if exe, err := os.Executable(); err == nil {
		return filepath.Dir(exe)
	}
	return packaged
}

// loadConfig reads the YAML file at path over the defaults. Unknown keys,
// wrong types and bad values are errors naming the file, line and key.
func loadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return defaultConfig(), fmt.Errorf("read config: %w", err)
	}
	return parseConfig(path, data)
}

// parseConfig decodes the contents of the config file at path over the
// defaults; path only names the file in errors.
func parseConfig(path string, data []byte) (Config, error) {
	cfg := defaultConfig()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return cfg, fmt.Errorf("config %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return cfg, nil // empty file: defaults
	}
	fields := map[string]any{
		"dataDir": &cfg.DataDir, "pluginDir": &cfg.PluginDir, "debugAddress": &cfg.DebugAddress,
		"apiAddress": &cfg.APIAddress, "xdsAddress": &cfg.XDSAddress,
		"trustDomain": &cfg.TrustDomain, "serverNames": &cfg.ServerNames,
		"gcPercent": &cfg.GCPercent, "memoryLimit": &cfg.MemoryLimit, "idleCollection": &cfg.IdleCollection,
		"tokenRetention": &cfg.TokenRetention, "proxyRecordRetention": &cfg.ProxyRecordRetention,
		"handshakeTimeout": &cfg.HandshakeTimeout, "agentPackageDir": &cfg.AgentPackageDir,
		"startupGrace": &cfg.StartupGrace, "writeTimeout": &cfg.WriteTimeout,
		"joinDownloads": &cfg.JoinDownloads, "joinDownloadsPerClient": &cfg.JoinDownloadsPerClient,
		"xdsMaxStreamsPerProxy": &cfg.XDSMaxStreamsPerProxy,
	}
	err := decodeMapping(path, doc.Content[0], "", keysOf(fields, "providers", "store", "dns"), func(key string, v *yaml.Node) error {
		switch key {
		case "dns":
			return decodeDNS(path, v, &cfg.DNS)
		case "store":
			return decodeStore(path, v, &cfg.Store)
		case "providers":
		default:
			return v.Decode(fields[key])
		}
		if v.Kind != yaml.SequenceNode {
			return errors.New("providers must be a list of {name, plugin, sha256, config}")
		}
		cfg.Providers = make([]ProviderConfig, len(v.Content))
		for i, item := range v.Content {
			p := &cfg.Providers[i]
			pf := map[string]any{"name": &p.Name, "plugin": &p.Plugin, "sha256": &p.SHA256, "config": &p.Config}
			if err := decodeMapping(path, item, fmt.Sprintf("providers[%d].", i), keysOf(pf), func(key string, v *yaml.Node) error {
				return v.Decode(pf[key])
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return cfg, err
}

// decodeStore decodes the `store:` section, refusing unknown keys at any
// depth.
func decodeStore(path string, n *yaml.Node, sc *StoreConfig) error {
	c := &sc.Consul
	cf := map[string]any{
		"address": &c.Address, "scheme": &c.Scheme, "caFile": &c.CAFile, "certFile": &c.CertFile,
		"keyFile": &c.KeyFile, "serverName": &c.ServerName, "token": &c.Token, "tokenFile": &c.TokenFile,
		"datacenter": &c.Datacenter, "keyPrefix": &c.KeyPrefix,
	}
	return decodeMapping(path, n, "store.", []string{"backend", "consul"}, func(key string, v *yaml.Node) error {
		if key == "backend" {
			return v.Decode(&sc.Backend)
		}
		return decodeMapping(path, v, "store.consul.", keysOf(cf), func(key string, v *yaml.Node) error {
			return v.Decode(cf[key])
		})
	})
}

func keysOf(m map[string]any, extra ...string) []string {
	keys := append(slices.Collect(maps.Keys(m)), extra...)
	slices.Sort(keys)
	return keys
}

// decodeMapping calls decode for each key of mapping node n, failing on
// keys not in known and naming file, line and key in every error.
func decodeMapping(path string, n *yaml.Node, prefix string, known []string, decode func(key string, v *yaml.Node) error) error {
	if err := checkKeys(path, n, prefix, known); err != nil {
		return err
	}
	for _, kv := range pairs(n) {
		if err := decode(kv[0].Value, kv[1]); err != nil {
			var te *yaml.TypeError
			msg := err.Error()
			if errors.As(err, &te) {
				msg = strings.Join(te.Errors, "; ")
			}
			if de := new(configError); errors.As(err, &de) {
				return err
			}
			return &configError{fmt.Sprintf("config %s:%d: %s%s: %s", path, kv[1].Line, prefix, kv[0].Value, msg)}
		}
	}
	return nil
}

type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// checkKeys fails on any key of mapping node n not in known.
func checkKeys(path string, n *yaml.Node, prefix string, known []string) error {
	if n.Kind != yaml.MappingNode {
		return &configError{fmt.Sprintf("config %s:%d: %s must be a mapping of keys to values", path, n.Line, cmpOr(strings.TrimSuffix(prefix, "."), "the document"))}
	}
	for _, kv := range pairs(n) {
		if !slices.Contains(known, kv[0].Value) {
			hint := ""
			for _, k := range known {
				if strings.EqualFold(k, kv[0].Value) {
					hint = fmt.Sprintf(" (did you mean %q?)", k)
				}
			}
			return &configError{fmt.Sprintf("config %s:%d: unknown key %q%s; known keys are %s", path, kv[0].Line, prefix+kv[0].Value, hint, strings.Join(known, ", "))}
		}
	}
	return nil
}

func pairs(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// validate checks values, naming the key and the fix.
func (c Config) validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("dataDir is empty: set it to a directory osm-server may own, e.g. /var/lib/osm"))
	}
	if c.PluginDir == "" {
		errs = append(errs, errors.New("pluginDir is empty: set it to the directory holding the provider plugins, e.g. /usr/lib/osm/plugins"))
	}
	for _, a := range [][2]string{{"debugAddress", c.DebugAddress}, {"apiAddress", c.APIAddress}, {"xdsAddress", c.XDSAddress}} {
		if _, port, err := net.SplitHostPort(a[1]); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%s %q is not host:port (for example 127.0.0.1:15090)", a[0], a[1]))
		}
	}
	if c.TrustDomain == "" || strings.ContainsAny(c.TrustDomain, "/:@ ") || strings.ToLower(c.TrustDomain) != c.TrustDomain {
		errs = append(errs, fmt.Errorf("trustDomain %q must be a lower-case DNS name such as osm.local", c.TrustDomain))
	}
	for i, n := range c.ServerNames {
		if n == "" || strings.ContainsAny(n, "/: ") && net.ParseIP(n) == nil {
			errs = append(errs, fmt.Errorf("serverNames[%d] %q must be a DNS name or an IP address", i, n))
		}
	}
	if c.GCPercent < 10 {
		errs = append(errs, fmt.Errorf("gcPercent %d: want at least 10 (Go's own default is 100; lower collects more often, costing CPU)", c.GCPercent))
	}
	if c.TokenRetention < 0 {
		errs = append(errs, fmt.Errorf("tokenRetention %s is negative: give a duration such as 168h (0 deletes tokens as soon as they expire)", c.TokenRetention))
	}
	if c.HandshakeTimeout < 100*time.Millisecond || c.HandshakeTimeout > 5*time.Minute {
		errs = append(errs, fmt.Errorf("handshakeTimeout %s is out of range: give a duration from 100ms to 5m, such as 10s", c.HandshakeTimeout))
	}
	if c.WriteTimeout < time.Second || c.WriteTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("writeTimeout %s is out of range: give a duration from 1s to 1h, such as 30s", c.WriteTimeout))
	}
	if c.JoinDownloads < 1 || c.JoinDownloads > 10000 {
		errs = append(errs, fmt.Errorf("joinDownloads %d is out of range: give how many agent packages may be sent at once, 1 to 10000, such as %d", c.JoinDownloads, join.DefaultDownloads))
	}
	if c.JoinDownloadsPerClient < 1 || c.JoinDownloadsPerClient > c.JoinDownloads {
		errs = append(errs, fmt.Errorf("joinDownloadsPerClient %d is out of range: give how many agent packages one client address may download at once, 1 to joinDownloads (%d), such as %d", c.JoinDownloadsPerClient, c.JoinDownloads, join.DefaultDownloadsPerClient))
	}
	if c.XDSMaxStreamsPerProxy < 1 || c.XDSMaxStreamsPerProxy > 10000 {
		errs = append(errs, fmt.Errorf("xdsMaxStreamsPerProxy %d is out of range: give a number of streams from 1 to 10000, such as %d", c.XDSMaxStreamsPerProxy, xds.DefaultMaxStreamsPerProxy))
	}
	if c.StartupGrace < 0 || c.StartupGrace > time.Hour {
		errs = append(errs, fmt.Errorf("startupGrace %s is out of range: give a duration from 0 (none) to 1h, such as 20s", c.StartupGrace))
	}
	if c.ProxyRecordRetention < 0 {
		errs = append(errs, fmt.Errorf("proxyRecordRetention %s is negative: give a duration such as 168h (0 deletes a proxy's record as soon as its certificates expire)", c.ProxyRecordRetention))
	}
	switch c.Store.Backend {
	case storeBolt:
	case storeConsul:
		if err := c.Store.Consul.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("store.consul: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("store.backend %q: want %q (a file in dataDir, one server) or %q (several replicas sharing Consul KV)", c.Store.Backend, storeBolt, storeConsul))
	}
	if err := c.DNS.validate(); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for i, p := range c.Providers {
		where := fmt.Sprintf("providers[%d]", i)
		if err := mesh.ValidateLabel(where+".name", p.Name); err != nil {
			errs = append(errs, err)
		} else if names[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q is used twice: instance names must be unique", where, p.Name))
		}
		names[p.Name] = true
		switch {
		case p.Plugin == "":
			errs = append(errs, fmt.Errorf("%s.plugin is empty: name the executable in pluginDir, e.g. osm-provider-static", where))
		case p.Plugin != filepath.Base(p.Plugin) || p.Plugin == "." || p.Plugin == "..":
			errs = append(errs, fmt.Errorf("%s.plugin %q must be a file name in pluginDir, not a path", where, p.Plugin))
		}
		if p.SHA256 != "" {
			if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
				errs = append(errs, fmt.Errorf("%s.sha256 %q is not 64 hex digits (compute it with sha256sum)", where, p.SHA256))
			}
		}
		if _, err := json.Marshal(p.Config); err != nil {
			errs = append(errs, fmt.Errorf("%s.config cannot be passed to the plugin as JSON: %w", where, err))
		}
	}
	return errors.Join(errs...)
}

// byteSize is a size in bytes, written in the config file as GOMEMLIMIT
// writes it ("3GiB"; "" for 0); the file is refused, naming the key and
// line, when it is not one.
type byteSize int64

func (b *byteSize) UnmarshalYAML(n *yaml.Node) error {
	var v string
	if err := n.Decode(&v); err != nil {
		return err
	}
	if v == "" {
		*b = 0
		return nil
	}
	size, err := parseBytes(v)
	if err != nil {
		return err
	}
	*b = byteSize(size)
	return nil
}

// parseBytes parses a size as GOMEMLIMIT writes it: a whole number of
// bytes with an optional unit B, KiB, MiB, GiB or TiB.
func parseBytes(v string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := strings.TrimSpace(v), uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size: want a positive whole number with an optional unit B, KiB, MiB, GiB or TiB, e.g. 3GiB", v)
	}
	return n << shift, nil
}
