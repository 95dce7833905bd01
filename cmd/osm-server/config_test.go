package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/store/consulstore"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigExample(t *testing.T) {
	cfg, err := loadConfig("../../examples/server.yaml")
	if err != nil {
		t.Fatalf("examples/server.yaml: %v", err)
	}
	want := Config{
		DataDir:                "/var/lib/osm",
		PluginDir:              "/usr/lib/osm/plugins",
		DebugAddress:           "127.0.0.1:15090",
		APIAddress:             "0.0.0.0:15443",
		XDSAddress:             "0.0.0.0:15128",
		TrustDomain:            "osm.local",
		ServerNames:            []string{"osm.example.com"},
		GCPercent:              50,
		IdleCollection:         true,
		TokenRetention:         7 * 24 * time.Hour,
		ProxyRecordRetention:   7 * 24 * time.Hour,
		HandshakeTimeout:       10 * time.Second,
		WriteTimeout:           30 * time.Second,
		JoinDownloads:          32,
		JoinDownloadsPerClient: 4,
		StartupGrace:           20 * time.Second,
		Store:                  StoreConfig{Backend: storeBolt, Consul: consulstore.Config{KeyPrefix: "osm/"}},
		XDSMaxStreamsPerProxy:  64,
		Providers: []ProviderConfig{{
			Name: "onprem", Plugin: "osm-provider-static",
			Config: map[string]any{"file": "/etc/osm/endpoints.yaml"},
		}},
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("loadConfig (-want +got):\n%s", diff)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestLoadConfigIdleCollection(t *testing.T) {
	if cfg, err := loadConfig(writeConfig(t, "gcPercent: 50\n")); err != nil || !cfg.IdleCollection {
		t.Errorf("idleCollection unset = %v, %v; want true", cfg.IdleCollection, err)
	}
	if cfg, err := loadConfig(writeConfig(t, "idleCollection: false\n")); err != nil || cfg.IdleCollection {
		t.Errorf("idleCollection: false = %v, %v; want false", cfg.IdleCollection, err)
	}
	if _, err := loadConfig(writeConfig(t, "idleCollection: sometimes\n")); err == nil || !strings.Contains(err.Error(), "idleCollection") {
		t.Errorf("idleCollection: sometimes: error %v; want one naming the key", err)
	}
}

func TestLoadConfigTokenRetention(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "tokenRetention: 36h\n"))
	if err != nil || cfg.TokenRetention != 36*time.Hour {
		t.Errorf("tokenRetention: 36h = %s, %v; want 36h", cfg.TokenRetention, err)
	}
}

func TestLoadConfigProxyRecordRetention(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "proxyRecordRetention: 36h\n"))
	if err != nil || cfg.ProxyRecordRetention != 36*time.Hour {
		t.Errorf("proxyRecordRetention: 36h = %s, %v; want 36h", cfg.ProxyRecordRetention, err)
	}
	if cfg, _ := loadConfig(writeConfig(t, "gcPercent: 50\n")); cfg.ProxyRecordRetention != 7*24*time.Hour {
		t.Errorf("proxyRecordRetention unset = %s, want 168h", cfg.ProxyRecordRetention)
	}
}

func TestLoadConfigMemoryLimit(t *testing.T) {
	for in, want := range map[string]byteSize{`""`: 0, "3GiB": 3 << 30, "512 MiB": 512 << 20, "1000": 1000} {
		cfg, err := loadConfig(writeConfig(t, "memoryLimit: "+in+"\n"))
		if err != nil || cfg.MemoryLimit != want {
			t.Errorf("memoryLimit: %s = %d, %v; want %d", in, cfg.MemoryLimit, err, want)
		}
	}
}

func TestLoadConfigKeepsDefaults(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "debugAddress: 127.0.0.1:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.DebugAddress = "127.0.0.1:1"
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("loadConfig (-want +got):\n%s", diff)
	}
	if cfg, err := loadConfig(writeConfig(t, "")); err != nil || cfg.DataDir == "" {
		t.Errorf("empty file: %+v, %v; want the defaults", cfg, err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"unknown key", "dataDir: /x\npluginDirectory: /y\n", []string{":2:", `"pluginDirectory"`, "known keys"}},
		{"wrong case hint", "datadir: /x\n", []string{`did you mean "dataDir"`}},
		{"unknown provider key", "providers:\n  - name: a\n    plugin: p\n    conifg: {}\n", []string{":4:", `"providers[0].conifg"`}},
		{"providers not a list", "providers: {name: a}\n", []string{"providers must be a list"}},
		{"wrong type", "dataDir: [a, b]\n", []string{"line 1", "dataDir"}},
		{"not yaml", "dataDir: [\n", []string{"server.yaml"}},
		{"not a mapping", "- a\n", []string{"mapping"}},
		{"tokenRetention not a duration", "tokenRetention: 7 days\n", []string{"line 1", "tokenRetention"}},
		{"memoryLimit without a number", "memoryLimit: GiB\n", []string{":1:", "memoryLimit", `"GiB" is not a size`}},
		{"memoryLimit in GB", "dataDir: /x\nmemoryLimit: 3GB\n", []string{":2:", "memoryLimit", `"3GB" is not a size`}},
		{"proxyRecordRetention not a duration", "proxyRecordRetention: 7 days\n", []string{"line 1", "proxyRecordRetention"}},
		{"unknown store key", "store:\n  backend: consul\n  adress: x\n", []string{":3:", `"store.adress"`, "backend, consul"}},
		{"unknown consul key", "store:\n  consul:\n    adress: x\n", []string{":3:", `"store.consul.adress"`, "known keys are address,"}},
		{"consul key wrong case", "store:\n  consul:\n    keyprefix: x/\n", []string{`did you mean "keyPrefix"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, tc.content))
			if err == nil {
				t.Fatalf("loadConfig succeeded; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file error = %v; want it to name the file", err)
	}
}

func TestLoadConfigStore(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "store:\n  backend: consul\n  consul:\n    address: https://consul.example:8501\n    caFile: /etc/osm/consul-ca.pem\n    tokenFile: /etc/osm/consul.token\n    keyPrefix: osm/prod/\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := StoreConfig{Backend: storeConsul}
	want.Consul.Address, want.Consul.CAFile, want.Consul.TokenFile, want.Consul.KeyPrefix = "https://consul.example:8501", "/etc/osm/consul-ca.pem", "/etc/osm/consul.token", "osm/prod/"
	if diff := cmp.Diff(want, cfg.Store); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	if cfg, err := loadConfig(writeConfig(t, "dataDir: /x\n")); err != nil || cfg.Store.Backend != storeBolt {
		t.Errorf("no store section: backend %q, %v; want %q", cfg.Store.Backend, err, storeBolt)
	}
}

func TestValidate(t *testing.T) {
	good := defaultConfig()
	good.Providers = []ProviderConfig{{Name: "onprem", Plugin: "osm-provider-static"}}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"bad address", func(c *Config) { c.XDSAddress = "15128" }, "xdsAddress"},
		{"empty data dir", func(c *Config) { c.DataDir = "" }, "dataDir is empty"},
		{"duplicate name", func(c *Config) { c.Providers = append(c.Providers, c.Providers[0]) }, "used twice"},
		{"bad name", func(c *Config) { c.Providers[0].Name = "On Prem" }, "providers[0].name"},
		{"plugin path", func(c *Config) { c.Providers[0].Plugin = "../bin/evil" }, "not a path"},
		{"empty plugin", func(c *Config) { c.Providers[0].Plugin = "" }, "providers[0].plugin is empty"},
		{"bad pin", func(c *Config) { c.Providers[0].SHA256 = "abc" }, "64 hex digits"},
		{"trust domain with a path", func(c *Config) { c.TrustDomain = "osm.local/x" }, "trustDomain"},
		{"upper-case trust domain", func(c *Config) { c.TrustDomain = "OSM.local" }, "lower-case DNS name"},
		{"server name with a port", func(c *Config) { c.ServerNames = []string{"osm.example.com:15443"} }, "serverNames[0]"},
		{"gcPercent too low", func(c *Config) { c.GCPercent = 0 }, "gcPercent 0: want at least 10"},
		{"tokenRetention negative", func(c *Config) { c.TokenRetention = -time.Hour }, "tokenRetention -1h0m0s is negative"},
		{"handshakeTimeout zero", func(c *Config) { c.HandshakeTimeout = 0 }, "handshakeTimeout 0s is out of range"},
		{"handshakeTimeout an hour", func(c *Config) { c.HandshakeTimeout = time.Hour }, "from 100ms to 5m"},
		{"writeTimeout zero", func(c *Config) { c.WriteTimeout = 0 }, "writeTimeout 0s is out of range: give a duration from 1s to 1h"},
		{"joinDownloads zero", func(c *Config) { c.JoinDownloads = 0 }, "joinDownloads 0 is out of range"},
		{"joinDownloadsPerClient above joinDownloads", func(c *Config) { c.JoinDownloadsPerClient = c.JoinDownloads + 1 }, "joinDownloadsPerClient 33 is out of range: give how many agent packages one client address may download at once, 1 to joinDownloads (32)"},
		{"xdsMaxStreamsPerProxy zero", func(c *Config) { c.XDSMaxStreamsPerProxy = 0 }, "xdsMaxStreamsPerProxy 0 is out of range: give a number of streams from 1 to 10000"},
		{"startupGrace negative", func(c *Config) { c.StartupGrace = -time.Second }, "startupGrace -1s is out of range"},
		{"startupGrace two hours", func(c *Config) { c.StartupGrace = 2 * time.Hour }, "from 0 (none) to 1h"},
		{"proxyRecordRetention negative", func(c *Config) { c.ProxyRecordRetention = -time.Hour }, "proxyRecordRetention -1h0m0s is negative"},
		{"unknown store", func(c *Config) { c.Store.Backend = "etcd" }, `store.backend "etcd": want "bbolt"`},
		{"consul prefix", func(c *Config) { c.Store.Backend, c.Store.Consul.KeyPrefix = storeConsul, "osm" }, `store.consul: consul key prefix "osm": must end with "/"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			cfg.Providers = append([]ProviderConfig(nil), good.Providers...)
			tc.edit(&cfg)
			err := cfg.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate() = %v; want an error containing %q", err, tc.want)
			}
		})
	}
	if err := good.validate(); err != nil {
		t.Errorf("good config: %v", err)
	}
}

func TestXDSAddressFor(t *testing.T) {
	for _, tc := range []struct {
		configured, host, want string
	}{
		{"0.0.0.0:15128", "osm.example.com:15443", "osm.example.com:15128"},
		{"0.0.0.0:15128", "10.0.0.5:15443", "10.0.0.5:15128"},
		{"[::]:15128", "[2001:db8::5]:15443", "[2001:db8::5]:15128"},
		{":15128", "osm.example.com", "osm.example.com:15128"},
		{"0.0.0.0:15128", "", "127.0.0.1:15128"},
		{"10.0.0.5:15128", "osm.example.com:15443", "10.0.0.5:15128"},
		{"xds.example.com:15128", "10.0.0.5:15443", "xds.example.com:15128"},
	} {
		if got := xdsAddressFor(tc.configured)(tc.host); got != tc.want {
			t.Errorf("xdsAddressFor(%q)(%q) = %q, want %q", tc.configured, tc.host, got, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1024", 1024},
		{"512B", 512},
		{"64KiB", 64 << 10},
		{"3GiB", 3 << 30},
		{" 1536 MiB ", 1536 << 20},
		{"2TiB", 2 << 40},
	} {
		if got, err := parseBytes(tc.in); err != nil || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "0", "1.5GiB", "3GB", "9999999TiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d; want an error", in, got)
		}
	}
}
