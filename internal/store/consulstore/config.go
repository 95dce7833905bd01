package consulstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store"
)

// DefaultKeyPrefix is where a mesh keeps its keys unless told otherwise.
const DefaultKeyPrefix = "osm/"

// Config says how to reach Consul and where in its KV the mesh lives.
// Empty fields take Consul's standard environment variables, as the
// consul CLI does (through api.DefaultConfig): CONSUL_HTTP_ADDR,
// CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CAPATH, CONSUL_CLIENT_CERT,
// CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME, CONSUL_HTTP_TOKEN,
// CONSUL_HTTP_TOKEN_FILE; then Consul's defaults (127.0.0.1:8500, http).
type Config struct {
	// Address is the agent's HTTP API: host:port, or a URL whose scheme
	// (http, https, unix) sets Scheme.
	Address string
	// Scheme is "http" or "https".
	Scheme string
	// CAFile verifies the agent's certificate; CertFile and KeyFile are
	// the client certificate when the agent asks for one (verify_incoming);
	// ServerName is the name expected in the agent's certificate.
	CAFile, CertFile, KeyFile, ServerName string
	// Token is the ACL token, or TokenFile holds it. It needs key_prefix
	// KeyPrefix read and write.
	Token, TokenFile string
	// Datacenter is the one to use; empty is the agent's own.
	Datacenter string
	// KeyPrefix is prepended to every key, so several meshes (or other
	// users) share one Consul: "osm/" (the default), "osm/staging/".
	// It must end with "/".
	KeyPrefix string

	// MaxTxnOps and MaxTxnBytes are the limits a transaction is checked
	// against before it is sent: store.MaxTxnOps and Consul's default
	// txn_max_req_len (512 KiB of request body) unless set. Raise them only
	// with the Consul servers' limits.
	MaxTxnOps, MaxTxnBytes int
}

// defaultMaxTxnBody is Consul's default txn_max_req_len (and
// kv_max_value_size): Raft's suggested largest entry.
const defaultMaxTxnBody = 512 << 10

func (c Config) withDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = store.MaxTxnOps
	}
	if c.MaxTxnBytes == 0 {
		c.MaxTxnBytes = defaultMaxTxnBody
	}
	return c
}

// Validate reports what is wrong with c, naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if !strings.HasSuffix(c.KeyPrefix, "/") || strings.HasPrefix(c.KeyPrefix, "/") {
		errs = append(errs, fmt.Errorf("consul key prefix %q: must end with \"/\" and not start with one (as \"osm/\")", c.KeyPrefix))
	}
	switch c.Scheme {
	case "", "http", "https":
	default:
		errs = append(errs, fmt.Errorf("consul scheme %q: want http or https", c.Scheme))
	}
	if c.Token != "" && c.TokenFile != "" {
		errs = append(errs, errors.New("consul token and token file both set: use one"))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("consul client certificate and key: set both or neither"))
	}
	if c.MaxTxnOps < 1 || c.MaxTxnBytes < 1 {
		errs = append(errs, errors.New("consul transaction limits must be positive"))
	}
	return errors.Join(errs...)
}

// apiConfig is Consul's environment overridden by c.
func (c Config) apiConfig() *api.Config {
	ac := api.DefaultConfig()
	if c.Address != "" {
		ac.Address = c.Address
	}
	if c.Scheme != "" {
		ac.Scheme = c.Scheme
	}
	if c.CAFile != "" {
		ac.TLSConfig.CAFile = c.CAFile
	}
	if c.CertFile != "" {
		ac.TLSConfig.CertFile, ac.TLSConfig.KeyFile = c.CertFile, c.KeyFile
	}
	if c.ServerName != "" {
		ac.TLSConfig.Address = c.ServerName
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
	if ac.Transport != nil {
		ac.Transport.DialContext = dialer().DialContext
	}
	return ac
}

// url is how errors name the agent.
func url(ac *api.Config) string {
	if strings.Contains(ac.Address, "://") {
		return ac.Address
	}
	return ac.Scheme + "://" + ac.Address
}
