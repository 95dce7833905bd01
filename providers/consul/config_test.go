package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/provider"
)

func TestParseConfig(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		raw     string
		wantErr []string // substrings of the error; nil means valid
	}{
		{name: "empty is every service through the environment's agent", raw: ``},
		{name: "full", raw: `{"address": "https://consul.internal:8501", "tls": {"serverName": "consul.internal", "insecureSkipVerify": false},
			"tokenFile": "` + tokenFile + `", "datacenter": "dc2", "namespace": "shop", "partition": "east", "services": ["web", "db_primary"],
			"tags": ["mesh"], "meshNamespace": "store", "serviceMap": {"db_primary": "data/db"}, "includeWarning": true, "waitTime": "2m"}`},
		{name: "unknown key", raw: `{"adress": "x:8500"}`, wantErr: []string{`unknown field "adress"`, "known keys: address"}},
		{name: "key case", raw: `{"tokenfile": "/x"}`, wantErr: []string{`did you mean "tokenFile"`}},
		{name: "unknown tls key", raw: `{"tls": {"ca": "/x"}}`, wantErr: []string{`unknown field "ca"`}},
		{name: "wrong type", raw: `{"services": "web"}`, wantErr: []string{"services"}},
		{name: "bad scheme", raw: `{"address": "ftp://x:8500"}`, wantErr: []string{`address "ftp://x:8500"`, "http, https or unix"}},
		{name: "token and file", raw: `{"token": "a", "tokenFile": "` + tokenFile + `"}`, wantErr: []string{"token and tokenFile", "keep one"}},
		{name: "missing token file", raw: `{"tokenFile": "/nonexistent/token"}`, wantErr: []string{`tokenFile "/nonexistent/token"`, "readable file"}},
		{name: "cert without key", raw: `{"tls": {"certFile": "` + tokenFile + `"}}`, wantErr: []string{"tls.certFile and tls.keyFile", "both"}},
		{name: "missing CA", raw: `{"tls": {"caFile": "/nonexistent/ca.pem"}}`, wantErr: []string{`tls.caFile "/nonexistent/ca.pem"`}},
		{name: "duplicate service", raw: `{"services": ["web", "web"]}`, wantErr: []string{"services[1]", "twice"}},
		{name: "bad service name", raw: `{"services": ["a/b"]}`, wantErr: []string{"services[0]", "consul catalog services"}},
		{name: "empty tag", raw: `{"tags": [""]}`, wantErr: []string{"tags[0] is empty"}},
		{name: "bad mesh namespace", raw: `{"meshNamespace": "Shop"}`, wantErr: []string{"meshNamespace", "DNS-1123"}},
		{name: "namespace that is no mesh name", raw: `{"namespace": "Team_A"}`, wantErr: []string{`namespace "Team_A"`, "set meshNamespace"}},
		{name: "bad mapping", raw: `{"serviceMap": {"web": "Shop/Web"}}`, wantErr: []string{`serviceMap["web"]`, `"namespace/name"`}},
		{name: "mapping an unread service", raw: `{"services": ["a"], "serviceMap": {"b": "c"}}`,
			wantErr: []string{`serviceMap["b"]`, "not in services", "add it to services or remove the mapping"}},
		{name: "wait too long", raw: `{"waitTime": "20m"}`, wantErr: []string{"waitTime 20m0s", "between 1s and 10m0s"}},
		{name: "wait not a duration", raw: `{"waitTime": 300}`, wantErr: []string{"waitTime: want a duration string"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.raw))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("parseConfig: %v", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrInvalidConfig) {
				t.Fatalf("parseConfig error = %v; want one wrapping provider.ErrInvalidConfig", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("parseConfig error = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaultsAndMapping(t *testing.T) {
	c, err := parseConfig([]byte(`{"serviceMap": {"db_primary": "data/db", "web-v2": "web"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.WaitTime) != defaultWaitTime || c.MeshNamespace != "default" {
		t.Errorf("defaults: waitTime %v, meshNamespace %q; want %v, default", time.Duration(c.WaitTime), c.MeshNamespace, defaultWaitTime)
	}
	for _, tc := range []struct {
		consul string
		want   string // "" means left out
	}{
		{"web", "default/web"}, {"web-v2", "default/web"}, {"db_primary", "data/db"}, {"Billing", ""}, {"redis_cache", ""},
	} {
		got, ok := c.meshService(tc.consul)
		if s := got.String(); (ok && s != tc.want) || (!ok && tc.want != "") {
			t.Errorf("meshService(%q) = %q, %v; want %q", tc.consul, s, ok, tc.want)
		}
	}
	ns, err := parseConfig([]byte(`{"namespace": "shop"}`))
	if err != nil || ns.MeshNamespace != "shop" {
		t.Errorf("namespace shop: meshNamespace %q (%v); want the Consul namespace", ns.MeshNamespace, err)
	}
}

func TestSelected(t *testing.T) {
	all, _ := parseConfig(nil)
	listed, _ := parseConfig([]byte(`{"services": ["web", "consul"]}`))
	tagged, _ := parseConfig([]byte(`{"tags": ["mesh", "prod"]}`))
	for _, tc := range []struct {
		name string
		cfg  config
		svc  string
		tags []string
		want bool
	}{
		{"all: a service", all, "web", nil, true},
		{"all: not consul itself", all, "consul", nil, false},
		{"listed", listed, "web", nil, true},
		{"listed: consul when asked", listed, "consul", nil, true},
		{"listed: others not", listed, "db", nil, false},
		{"tags: all of them", tagged, "web", []string{"prod", "x", "mesh"}, true},
		{"tags: one missing", tagged, "web", []string{"mesh"}, false},
	} {
		if got := tc.cfg.selected(tc.svc, tc.tags); got != tc.want {
			t.Errorf("%s: selected(%q, %q) = %v; want %v", tc.name, tc.svc, tc.tags, got, tc.want)
		}
	}
}

func TestAPIConfigTakesTheEnvironmentWhenUnset(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "10.0.0.5:8500")
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	c, _ := parseConfig(nil)
	ac := c.apiConfig()
	if ac.Address != "10.0.0.5:8500" || ac.Token != "from-env" {
		t.Errorf("unset config: address %q token %q; want CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN", ac.Address, ac.Token)
	}
	c, _ = parseConfig([]byte(`{"address": "127.0.0.1:8600", "token": "from-config", "datacenter": "dc9"}`))
	ac = c.apiConfig()
	if ac.Address != "127.0.0.1:8600" || ac.Token != "from-config" || ac.Datacenter != "dc9" {
		t.Errorf("config set: address %q token %q dc %q; want the config's", ac.Address, ac.Token, ac.Datacenter)
	}
}
