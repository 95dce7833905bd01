package agent_test

import (
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/xds"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestConfigRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", agent.ConfigFile)
	want := agent.Config{
		Server: "https://osm.example.com:15443", Servers: []string{"https://osm-2.example.com:15443", "https://10.0.0.3:15443"},
		CACertHash: "sha256:" + strings.Repeat("ab", 32),
		Service:    "bookstore", Namespace: "default", EnvoyPath: "/usr/local/bin/envoy", AppPort: 8080,
		AdvertiseAddress: "10.0.0.7", DataDir: "/var/lib/osm-agent", Labels: map[string]string{"zone": "a", agent.ZoneLabel: "eu-west-1a"},
		DrainTimeout: 7 * time.Second,
	}.WithDefaults()
	if err := agent.WriteConfig(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	got, err := agent.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("round trip (-got +want):\n%s", diff)
	}
}

// servers: alone is enough; server comes first and repeats are dropped.
func TestAPIServers(t *testing.T) {
	c, err := agent.ParseConfig("agent.yaml", []byte("servers: [https://osm-1:15443, https://osm-2:15443]\nservice: bookstore\nnamespace: default\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Server = "https://osm-2:15443"
	if diff := cmp.Diff(c.APIServers(), []string{"https://osm-2:15443", "https://osm-1:15443"}); diff != "" {
		t.Errorf("APIServers (-got +want):\n%s", diff)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	base := "server: https://osm:15443\nservice: bookstore\nnamespace: default\n"
	tests := []struct{ name, yaml, want string }{
		{"unknown key", base + "envoyPth: /x\n", "envoyPth"},
		{"wrong type", base + "appPort: lots\n", "appPort"},
		{"bad duration", base + "drainTimeout: soon\n", "soon"},
		{"http server", "server: http://osm:15443\nservice: bookstore\nnamespace: default\n", "https://host:port"},
		{"no server", "service: bookstore\nnamespace: default\n", "server: not set"},
		{"http replica", "servers: [https://osm-1:15443, http://osm-2:15443]\nservice: bookstore\nnamespace: default\n", `servers "http://osm-2:15443": want https://host:port`},
		{"bad service", "server: https://osm:15443\nservice: Book_Store\nnamespace: default\n", "DNS-1123"},
		{"bad advertise address", base + "advertiseAddress: myhost\n", "advertiseAddress"},
		{"relative data dir", base + "dataDir: data\n", "dataDir"},
		{"bad ca hash", base + "caCertHash: md5:00\n", "caCertHash"},
		{"unknown gateway", base + "gateway: edge\n", `gateway "edge": want ingress`},
		{"egress gateway without envoy", base + "gateway: egress\nproxy: none\n", `gateway "egress" needs proxy envoy`},
		{"gateway without envoy", base + "gateway: ingress\nproxy: none\n", `gateway "ingress" needs proxy envoy`},
		{"negative localXDSMaxStreams", base + "localXDSMaxStreams: -1\n", "localXDSMaxStreams -1 is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := agent.LoadConfig(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadConfig = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func grpcProxyConfig() sidecar.ProxyConfig {
	return sidecar.ProxyConfig{
		NodeID:     "7c3f1d2e-8a4b-4c5d-9e6f-0a1b2c3d4e5f.bookstore.default",
		Service:    mesh.MeshService{Namespace: "default", Name: "bookstore"},
		XDSAddress: "osm.example.com:15128",
		CertFile:   "/var/lib/osm-agent/proxy.crt", KeyFile: "/var/lib/osm-agent/proxy.key", CAFile: "/var/lib/osm-agent/ca.crt",
		ControlPlaneID: "spiffe://osm.local/osm-vm/control-plane",
		AgentVersion:   "v0.1.0", AdvertiseAddress: "10.0.0.7", AppPort: 8080,
		Labels: map[string]string{"zone": "a", agent.ZoneLabel: "eu-west-1a"},
	}
}

func TestGRPCBootstrapGolden(t *testing.T) {
	got, err := agent.GRPCBootstrap(grpcProxyConfig(), "/var/lib/osm-agent", "unix:/var/lib/osm-agent/xds.sock")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "grpc-bootstrap.json.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if diff := cmp.Diff(string(got), string(want)); diff != "" {
		t.Errorf("gRPC bootstrap (-got +want; go test -update rewrites it):\n%s", diff)
	}
}

// TestGRPCBootstrapParsesInGRPC builds gRPC-Go's xDS resolver from the
// bootstrap; gRPC parses it then and rejects unknown credential types, bad
// certificate provider configs and a bad listener name template.
func TestGRPCBootstrapParsesInGRPC(t *testing.T) {
	dir := t.TempDir()
	ca := agenttest.NewCA(t)
	certPEM, keyPEM := ca.KeyPair(t, "x", time.Hour)
	for name, data := range map[string][]byte{
		"proxy.crt": certPEM, "proxy.key": keyPEM, "ca.crt": ca.PEM,
		agent.ServiceCertFile: certPEM, agent.ServiceKeyFile: keyPEM, agent.ServiceCAFile: ca.PEM,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := grpcProxyConfig()
	p.XDSAddress = "127.0.0.1:1" // nothing listens; building the resolver only parses
	p.CertFile, p.KeyFile, p.CAFile = filepath.Join(dir, "proxy.crt"), filepath.Join(dir, "proxy.key"), filepath.Join(dir, "ca.crt")
	data, err := agent.GRPCBootstrap(p, dir, "unix:"+filepath.Join(dir, agent.LocalXDSSocket))
	if err != nil {
		t.Fatal(err)
	}
	if err := buildXDSResolver(data); err != nil {
		t.Errorf("gRPC rejects the bootstrap: %v", err)
	}
	bad := strings.Replace(string(data), `"type": "insecure"`, `"type": "no_such_creds"`, 1)
	if err := buildXDSResolver([]byte(bad)); err == nil {
		t.Error("gRPC accepted unknown channel credentials; this test cannot tell a good bootstrap from a bad one")
	}
}

func buildXDSResolver(bootstrap []byte) error {
	b, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return err
	}
	u, _ := url.Parse("xds:///bookstore.default.mesh")
	r, err := b.Build(resolver.Target{URL: *u}, nopClientConn{}, resolver.BuildOptions{})
	if err != nil {
		return err
	}
	r.Close()
	return nil
}

type nopClientConn struct{}

func (nopClientConn) UpdateState(resolver.State) error { return nil }
func (nopClientConn) ReportError(error)                {}
func (nopClientConn) NewAddress([]resolver.Address)    {}
func (nopClientConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}
