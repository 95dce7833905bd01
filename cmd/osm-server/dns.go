package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/dnspublish"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds"
)

// DNSConfig is the `dns:` section: publishing host names at the operator's
// DNS servers (docs/operator-guide.md, "DNS publishing"). Without it
// nothing is published.
type DNSConfig struct {
	// Provider is the DNS service's API: "rfc2136" (dynamic updates with
	// TSIG, which every authoritative server speaks).
	Provider string `yaml:"provider"`
	// Zone is the zone osm-server may change.
	Zone string `yaml:"zone"`
	// OwnerID names this mesh in the ownership records; two meshes
	// publishing into one zone need different ones.
	OwnerID string `yaml:"ownerID"`
	// TTL of the published A and AAAA records.
	TTL time.Duration `yaml:"ttl"`
	// RFC2136 is how to reach the primary server.
	RFC2136 RFC2136Config `yaml:"rfc2136"`
}

// RFC2136Config is the `dns.rfc2136:` section.
type RFC2136Config struct {
	Server         string `yaml:"server"`
	TSIGKeyName    string `yaml:"tsigKeyName"`
	TSIGAlgorithm  string `yaml:"tsigAlgorithm"`
	TSIGSecretFile string `yaml:"tsigSecretFile"`
}

const dnsProviderRFC2136 = "rfc2136"

func (c DNSConfig) enabled() bool { return c != DNSConfig{} }

// decodeDNS decodes the `dns:` section, refusing unknown keys at any depth.
func decodeDNS(path string, n *yaml.Node, dc *DNSConfig) error {
	*dc = DNSConfig{Provider: dnsProviderRFC2136, TTL: 60 * time.Second, RFC2136: RFC2136Config{TSIGAlgorithm: "hmac-sha256"}}
	df := map[string]any{"provider": &dc.Provider, "zone": &dc.Zone, "ownerID": &dc.OwnerID, "ttl": &dc.TTL}
	rf := map[string]any{"server": &dc.RFC2136.Server, "tsigKeyName": &dc.RFC2136.TSIGKeyName,
		"tsigAlgorithm": &dc.RFC2136.TSIGAlgorithm, "tsigSecretFile": &dc.RFC2136.TSIGSecretFile}
	return decodeMapping(path, n, "dns.", keysOf(df, "rfc2136"), func(key string, v *yaml.Node) error {
		if key != "rfc2136" {
			return v.Decode(df[key])
		}
		return decodeMapping(path, v, "dns.rfc2136.", keysOf(rf), func(key string, v *yaml.Node) error {
			return v.Decode(rf[key])
		})
	})
}

// validate checks the section's values (the secret file is read at start).
func (c DNSConfig) validate() error {
	if !c.enabled() {
		return nil
	}
	var errs []error
	if c.Provider != dnsProviderRFC2136 {
		errs = append(errs, fmt.Errorf("dns.provider %q: want %q (RFC 2136 dynamic updates with TSIG)", c.Provider, dnsProviderRFC2136))
	}
	if err := mesh.ValidateLabel("dns.ownerID", c.OwnerID); err != nil {
		errs = append(errs, fmt.Errorf("%w: give a name unique to this mesh, such as prod-eu", err))
	}
	if c.TTL < time.Second || c.TTL > 24*time.Hour {
		errs = append(errs, fmt.Errorf("dns.ttl %s is out of range: give a duration from 1s to 24h, such as 60s", c.TTL))
	}
	if c.RFC2136.TSIGSecretFile == "" {
		errs = append(errs, errors.New("dns.rfc2136.tsigSecretFile is empty: name the file holding the TSIG key's secret (tsig-keygen prints one)"))
	}
	// The rest is checked with a placeholder secret; the real one is read at start.
	if err := c.rfc2136("AAAA").Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c DNSConfig) rfc2136(secret string) dnspublish.RFC2136Config {
	return dnspublish.RFC2136Config{Zone: c.Zone, Server: c.RFC2136.Server, TSIGKeyName: c.RFC2136.TSIGKeyName,
		TSIGAlgorithm: c.RFC2136.TSIGAlgorithm, TSIGSecret: secret}
}

// newDNSPublisher reads the TSIG secret and returns the publisher of the
// mesh Services' external names (see dnspublish.ViewSource) and of the
// ingress gateways' host names with their machines' addresses (see
// dnspublish.GatewaySource), with its metrics registered; nil when the
// config has no `dns:` section.
func newDNSPublisher(log *slog.Logger, c DNSConfig, model *catalog.Model, gateways *dnspublish.GatewaySource, reg prometheus.Registerer) (*dnspublish.Publisher, error) {
	if !c.enabled() {
		return nil, nil
	}
	secret, err := dnspublish.ReadTSIGSecret(c.RFC2136.TSIGSecretFile)
	if err != nil {
		return nil, err
	}
	prov, err := dnspublish.NewRFC2136(c.rfc2136(secret))
	if err != nil {
		return nil, err
	}
	p, err := dnspublish.New(log, c.Provider, prov, dnspublish.Merge(dnspublish.ViewSource{Views: model}, gateways), dnspublish.Options{Owner: c.OwnerID, TTL: c.TTL})
	if err != nil {
		return nil, err
	}
	return p, p.Register(reg)
}

// presences tells each of its members of every proxy that connects or
// leaves (the xDS server has one Presence).
type presences []xds.Presence

func (ps presences) ProxyConnected(svc mesh.MeshService, addr netip.Addr) {
	for _, p := range ps {
		p.ProxyConnected(svc, addr)
	}
}

func (ps presences) ProxyDisconnected(svc mesh.MeshService, addr netip.Addr) {
	for _, p := range ps {
		p.ProxyDisconnected(svc, addr)
	}
}
