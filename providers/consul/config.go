package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

// config is an instance's `config` block. See docs/plugins/consul.md.
type config struct {
	// Address is the Consul agent's HTTP API: host:port, or a URL whose
	// scheme (http, https, unix) says how to reach it. Empty takes
	// CONSUL_HTTP_ADDR, then 127.0.0.1:8500, as the consul CLI does.
	Address string `json:"address"`
	// TLS verifies the agent (and presents a client certificate when the
	// agent asks for one). Unset fields take CONSUL_CACERT, CONSUL_CAPATH,
	// CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME.
	TLS tlsConfig `json:"tls"`
	// Token is the ACL token, or TokenFile holds it. Both empty take
	// CONSUL_HTTP_TOKEN or CONSUL_HTTP_TOKEN_FILE.
	Token     string `json:"token"`
	TokenFile string `json:"tokenFile"`
	// Datacenter is read; empty is the agent's own.
	Datacenter string `json:"datacenter"`
	// Namespace and Partition are Consul Enterprise's (empty: the token's
	// default, and nothing is sent, which Community Edition requires).
	Namespace string `json:"namespace"`
	Partition string `json:"partition"`
	// Services lists the Consul services to read; empty means every
	// service (except Consul's own "consul" service).
	Services []string `json:"services"`
	// Tags keeps only services, and instances, that carry every one of
	// these tags.
	Tags []string `json:"tags"`
	// MeshNamespace is the mesh namespace of every service that
	// ServiceMap does not place; default "default", or Namespace when set.
	MeshNamespace string `json:"meshNamespace"`
	// ServiceMap maps a Consul service name to its mesh service, written
	// "name" (in MeshNamespace) or "namespace/name".
	ServiceMap map[string]string `json:"serviceMap"`
	// IncludeWarning counts instances whose checks are at worst "warning"
	// as healthy; by default only "passing" instances are endpoints.
	IncludeWarning bool `json:"includeWarning"`
	// WaitTime bounds one blocking query (default 5m, Consul's maximum
	// is 10m).
	WaitTime duration `json:"waitTime"`
}

// tlsConfig is the `tls` block.
type tlsConfig struct {
	CAFile             string `json:"caFile"`
	CAPath             string `json:"caPath"`
	CertFile           string `json:"certFile"`
	KeyFile            string `json:"keyFile"`
	ServerName         string `json:"serverName"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify"`
}

const knownKeys = "address, tls, token, tokenFile, datacenter, namespace, partition, services, tags, meshNamespace, serviceMap, includeWarning, waitTime"

const (
	defaultWaitTime = 5 * time.Minute
	maxWaitTime     = 10 * time.Minute // Consul caps a blocking query there
	minWaitTime     = time.Second
)

// duration is a time.Duration written as a Go duration string ("30s").
// Only waitTime has one, so its errors name that key (encoding/json does
// not say which field a custom decoder failed on).
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if len(b) < 2 || b[0] != '"' {
		return fmt.Errorf("waitTime: want a duration string such as \"5m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("waitTime: want a duration string such as \"5m\": %v", err)
	}
	*d = duration(v)
	return nil
}

// parseConfig decodes and validates an instance's config block. Errors
// wrap provider.ErrInvalidConfig and name the key and the fix.
func parseConfig(raw []byte) (config, error) {
	var c config
	if err := provider.DecodeConfig(raw, &c); err != nil {
		return config{}, fmt.Errorf("%w (known keys: %s)", err, knownKeys)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", provider.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.Address != "" {
		if scheme, _, ok := strings.Cut(c.Address, "://"); ok && scheme != "http" && scheme != "https" && scheme != "unix" {
			return config{}, invalid("address %q: scheme %q is not http, https or unix; write host:port, http://host:port or https://host:port", c.Address, scheme)
		}
		if strings.ContainsAny(c.Address, " \t") {
			return config{}, invalid("address %q contains a space; write host:port, http://host:port or https://host:port", c.Address)
		}
	}
	if c.Token != "" && c.TokenFile != "" {
		return config{}, invalid("token and tokenFile are both set; keep one (tokenFile keeps the secret out of the server config)")
	}
	if c.TokenFile != "" {
		if _, err := os.Stat(c.TokenFile); err != nil {
			return config{}, invalid("tokenFile %q: %v; set it to a readable file holding the ACL token", c.TokenFile, err)
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return config{}, invalid("tls.certFile and tls.keyFile: set both (the client certificate and its key) or neither")
	}
	for key, path := range map[string]string{"tls.caFile": c.TLS.CAFile, "tls.caPath": c.TLS.CAPath, "tls.certFile": c.TLS.CertFile, "tls.keyFile": c.TLS.KeyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return config{}, invalid("%s %q: %v; set it to a readable file (or remove it)", key, path, err)
		}
	}
	for i, name := range c.Services {
		if name == "" || strings.ContainsAny(name, "/ \t") {
			return config{}, invalid("services[%d]: %q is not a Consul service name; list service names as `consul catalog services` prints them", i, name)
		}
		if slices.Contains(c.Services[:i], name) {
			return config{}, invalid("services[%d]: %q is listed twice; remove the duplicate", i, name)
		}
	}
	for i, tag := range c.Tags {
		if tag == "" {
			return config{}, invalid("tags[%d] is empty; remove it or name a tag", i)
		}
	}
	if c.MeshNamespace == "" {
		c.MeshNamespace = cmp.Or(c.Namespace, "default")
		if err := provider.ValidateName("mesh namespace", c.MeshNamespace); err != nil {
			return config{}, invalid("namespace %q cannot be the mesh namespace: %v; set meshNamespace", c.Namespace, err)
		}
	} else if err := provider.ValidateName("mesh namespace", c.MeshNamespace); err != nil {
		return config{}, invalid("meshNamespace: %v", err)
	}
	for _, from := range slices.Sorted(maps.Keys(c.ServiceMap)) {
		if _, err := c.parseMeshService(c.ServiceMap[from]); err != nil {
			return config{}, invalid("serviceMap[%q]: %v; write \"name\" or \"namespace/name\" with DNS-1123 labels", from, err)
		}
		if len(c.Services) > 0 && !slices.Contains(c.Services, from) {
			return config{}, invalid("serviceMap[%q]: %q is not in services %q, so it is never read; add it to services or remove the mapping", from, from, c.Services)
		}
	}
	switch w := time.Duration(c.WaitTime); {
	case w == 0:
		c.WaitTime = duration(defaultWaitTime)
	case w < minWaitTime || w > maxWaitTime:
		return config{}, invalid("waitTime %v: want between %v and %v (Consul caps a blocking query at 10m); the default is %v", w, minWaitTime, maxWaitTime, defaultWaitTime)
	}
	return c, nil
}

// parseMeshService parses a serviceMap value: "name" or "namespace/name".
func (c config) parseMeshService(v string) (provider.Service, error) {
	svc := provider.Service{Namespace: c.MeshNamespace, Name: v}
	if ns, name, ok := strings.Cut(v, "/"); ok {
		svc = provider.Service{Namespace: ns, Name: name}
	}
	return svc, svc.Validate()
}

// meshService returns the mesh service of a Consul service, and false
// when it has none (a name that is not a DNS-1123 label and is not mapped).
func (c config) meshService(consulName string) (provider.Service, bool) {
	if to, ok := c.ServiceMap[consulName]; ok {
		svc, err := c.parseMeshService(to)
		return svc, err == nil
	}
	svc := provider.Service{Namespace: c.MeshNamespace, Name: consulName}
	return svc, svc.Validate() == nil
}

// selected reports whether the Consul service name with the given tags
// (the union of its instances' tags, as the catalog lists them) is read.
func (c config) selected(name string, tags []string) bool {
	if len(c.Services) > 0 {
		if !slices.Contains(c.Services, name) {
			return false
		}
	} else if name == "consul" {
		return false // Consul's own servers; list it to read it
	}
	for _, t := range c.Tags {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	return true
}

// apiConfig is Consul's environment (as the consul CLI reads it)
// overridden by c.
func (c config) apiConfig() *api.Config {
	ac := api.DefaultConfig()
	if c.Address != "" {
		ac.Address = c.Address
	}
	if c.TLS.CAFile != "" {
		ac.TLSConfig.CAFile = c.TLS.CAFile
	}
	if c.TLS.CAPath != "" {
		ac.TLSConfig.CAPath = c.TLS.CAPath
	}
	if c.TLS.CertFile != "" {
		ac.TLSConfig.CertFile, ac.TLSConfig.KeyFile = c.TLS.CertFile, c.TLS.KeyFile
	}
	if c.TLS.ServerName != "" {
		ac.TLSConfig.Address = c.TLS.ServerName
	}
	if c.TLS.InsecureSkipVerify {
		ac.TLSConfig.InsecureSkipVerify = true
	}
	if c.Token != "" {
		ac.Token, ac.TokenFile = c.Token, ""
	}
	if c.TokenFile != "" {
		ac.Token, ac.TokenFile = "", c.TokenFile
	}
	if c.Datacenter != "" {
		ac.Datacenter = c.Datacenter
	}
	if c.Namespace != "" {
		ac.Namespace = c.Namespace
	}
	if c.Partition != "" {
		ac.Partition = c.Partition
	}
	// One blocking query per service is one request in flight each: keep
	// their connections for reuse (the pooled default keeps a handful
	// and would reconnect most watches after every answer).
	ac.Transport.MaxIdleConnsPerHost = 4096
	ac.Transport.MaxIdleConns = 4096
	return ac
}

// agentURL is how messages name the agent.
func agentURL(ac *api.Config) string {
	if strings.Contains(ac.Address, "://") {
		return ac.Address
	}
	return ac.Scheme + "://" + ac.Address
}
