package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadConfigDNS(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, `dns:
  zone: mesh.example.com
  ownerID: prod-eu
  ttl: 30s
  rfc2136:
    server: 192.0.2.53:53
    tsigKeyName: osm-vm
    tsigSecretFile: /etc/osm/dns.key
`))
	if err != nil {
		t.Fatal(err)
	}
	want := DNSConfig{Provider: "rfc2136", Zone: "mesh.example.com", OwnerID: "prod-eu", TTL: 30 * time.Second,
		RFC2136: RFC2136Config{Server: "192.0.2.53:53", TSIGKeyName: "osm-vm", TSIGAlgorithm: "hmac-sha256", TSIGSecretFile: "/etc/osm/dns.key"}}
	if d := cmp.Diff(want, cfg.DNS); d != "" {
		t.Errorf("dns (-want +got):\n%s", d)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	if cfg, _ := loadConfig(writeConfig(t, "gcPercent: 50\n")); cfg.DNS.enabled() {
		t.Errorf("no dns: section = %+v, want publishing off", cfg.DNS)
	}
}

func TestLoadConfigDNSErrors(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown key":        {"dns:\n  zone: a.b\n  tsig: x\n", `unknown key "dns.tsig"`},
		"unknown nested":     {"dns:\n  rfc2136:\n    secret: x\n", `unknown key "dns.rfc2136.secret"`},
		"bad ttl type":       {"dns:\n  ttl: soon\n", "dns.ttl"},
		"provider":           {base + "  provider: route53\n", `dns.provider "route53"`},
		"zone":               {strings.Replace(base, "mesh.example.com", "bad zone!", 1), `dns.zone "bad zone!"`},
		"server":             {strings.Replace(base, "192.0.2.53:53", "192.0.2.53", 1), `dns.rfc2136.server "192.0.2.53"`},
		"algorithm":          {strings.Replace(base, "tsigKeyName: osm-vm", "tsigKeyName: osm-vm\n    tsigAlgorithm: md5", 1), `tsigAlgorithm "md5": want one of hmac-sha1`},
		"owner":              {strings.Replace(base, "prod-eu", "Prod EU", 1), "dns.ownerID"},
		"ttl range":          {base + "  ttl: 1ms\n", "dns.ttl 1ms is out of range"},
		"missing secretfile": {strings.Replace(base, "    tsigSecretFile: /etc/osm/dns.key\n", "", 1), "tsigSecretFile is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, c.yaml))
			if err == nil {
				err = cfg.validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

const base = `dns:
  zone: mesh.example.com
  ownerID: prod-eu
  rfc2136:
    server: 192.0.2.53:53
    tsigKeyName: osm-vm
    tsigSecretFile: /etc/osm/dns.key
`
