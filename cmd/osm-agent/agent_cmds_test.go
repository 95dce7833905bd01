package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String() + errOut.String(), err
}

var caHash = "sha256:" + strings.Repeat("ab", 32)

func TestInstallWithoutServiceManager(t *testing.T) {
	if agent.CheckServiceManager() == nil {
		t.Skip("a service manager runs here; install would register a real service")
	}
	dir := t.TempDir()
	_, err := execute(t, "install", "--server", "https://127.0.0.1:15443", "--token", "tok", "--ca-cert-hash", caHash,
		"--service", "bookstore", "--config-dir", filepath.Join(dir, "etc"), "--data-dir", filepath.Join(dir, "data"))
	if err == nil || !strings.Contains(err.Error(), "no service manager") || !strings.Contains(err.Error(), "--no-service") {
		t.Errorf("install = %v, want a refusal naming the missing service manager and --no-service", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc")); !os.IsNotExist(err) {
		t.Errorf("a refused install wrote the config directory (%v)", err)
	}
}

func TestInstallNoServiceWritesConfigAndToken(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	out, err := execute(t, "install", "--no-service", "--server", "https://127.0.0.1:15443", "--token", "tok", "--ca-cert-hash", caHash,
		"--service", "bookstore", "--namespace", "shop", "--app-port", "8080", "--envoy-path", "/opt/envoy/bin/envoy", "--admin-port", "15003",
		"--config-dir", filepath.Join(dir, "etc"), "--data-dir", data)
	if err != nil {
		t.Fatalf("install --no-service: %v\n%s", err, out)
	}
	cfg, err := agent.LoadConfig(filepath.Join(dir, "etc", agent.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Service != "bookstore" || cfg.Namespace != "shop" || cfg.AppPort != 8080 || cfg.EnvoyPath != "/opt/envoy/bin/envoy" || cfg.AdminPort != 15003 || cfg.DataDir != data {
		t.Errorf("config = %+v", cfg)
	}
	fi, err := os.Stat(filepath.Join(data, agent.JoinTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("join token: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
}

// --server given several times (or with commas) becomes servers:.
func TestInstallSeveralServers(t *testing.T) {
	dir := t.TempDir()
	out, err := execute(t, "install", "--no-service", "--server", "https://10.0.0.1:15443,https://10.0.0.2:15443", "--server", "https://10.0.0.3:15443",
		"--token", "tok", "--ca-cert-hash", caHash, "--service", "bookstore",
		"--config-dir", filepath.Join(dir, "etc"), "--data-dir", filepath.Join(dir, "data"))
	if err != nil {
		t.Fatalf("install --no-service: %v\n%s", err, out)
	}
	cfg, err := agent.LoadConfig(filepath.Join(dir, "etc", agent.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://10.0.0.1:15443", "https://10.0.0.2:15443", "https://10.0.0.3:15443"}
	if cfg.Server != "" || !slices.Equal(cfg.Servers, want) {
		t.Errorf("server %q, servers %v; want servers %v", cfg.Server, cfg.Servers, want)
	}
}

func TestInstallProxyNone(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	out, err := execute(t, "install", "--no-service", "--server", "https://127.0.0.1:15443", "--token", "tok", "--ca-cert-hash", caHash,
		"--service", "bookbuyer", "--proxy", "none", "--hosts-file", hosts, "--advertise-address", "127.0.10.1",
		"--config-dir", filepath.Join(dir, "etc"), "--data-dir", filepath.Join(dir, "data"))
	if err != nil {
		t.Fatalf("install --proxy none: %v\n%s", err, out)
	}
	cfg, err := agent.LoadConfig(filepath.Join(dir, "etc", agent.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy != agent.ProxyNone || cfg.HostsFile != hosts || cfg.AdvertiseAddress != "127.0.10.1" {
		t.Errorf("config = %+v, want proxy none, hostsFile %s, advertiseAddress 127.0.10.1", cfg, hosts)
	}

	_, err = execute(t, "install", "--no-service", "--server", "https://127.0.0.1:15443", "--token", "tok", "--ca-cert-hash", caHash,
		"--service", "bookbuyer", "--proxy", "nginx", "--config-dir", filepath.Join(dir, "etc2"), "--data-dir", filepath.Join(dir, "data2"))
	if err == nil || !strings.Contains(err.Error(), `"nginx"`) || !strings.Contains(err.Error(), "envoy, none") {
		t.Errorf("install --proxy nginx = %v, want an error naming it and the known drivers", err)
	}
}

func TestInstallNeedsTokenUntilEnrolled(t *testing.T) {
	dir := t.TempDir()
	_, err := execute(t, "install", "--no-service", "--server", "https://127.0.0.1:15443", "--service", "bookstore",
		"--config-dir", filepath.Join(dir, "etc"), "--data-dir", filepath.Join(dir, "data"))
	if err == nil || !strings.Contains(err.Error(), "--token") {
		t.Errorf("install without a token = %v, want an error asking for --token", err)
	}
}

func TestBootstrapPrintsEnvoyBootstrap(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ca := agenttest.NewCA(t)
	id := mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: "bookstore"})
	certPEM, keyPEM := ca.KeyPair(t, id.CommonName(), time.Hour)
	if err := agent.SaveIdentity(data, agent.Identity{KeyPEM: keyPEM, CertPEM: certPEM, CAPEM: ca.PEM}); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, agent.ConfigFile)
	if err := agent.WriteConfig(cfgPath, agent.Config{Server: "https://osm:15443", Service: "bookstore", Namespace: "default", DataDir: data}); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "bootstrap", "--config", cfgPath); err == nil || !strings.Contains(err.Error(), "--xds-address") {
		t.Errorf("bootstrap without a known xDS address = %v, want an error suggesting --xds-address", err)
	}
	out, err := execute(t, "bootstrap", "--config", cfgPath, "--xds-address", "10.0.0.1:15128")
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("bootstrap output is not an Envoy bootstrap: %v\n%s", err, out)
	}
	if err := envoy.ValidateBootstrap(&b); err != nil {
		t.Error(err)
	}
	if b.GetNode().GetId() != id.CommonName() {
		t.Errorf("node id = %q, want %q", b.GetNode().GetId(), id.CommonName())
	}
}

func TestStatusShowsRestarts(t *testing.T) {
	dir := t.TempDir()
	st := agent.Status{Identity: "x.bookstore.default", UpdatedAt: time.Now()}
	st.Proxy.Driver, st.Proxy.Restarts, st.Proxy.LastExit = "envoy", 7, "exit status 1"
	data, _ := jsonMarshal(st)
	if err := os.WriteFile(filepath.Join(dir, agent.StatusFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "status", "--data-dir", dir)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, want := range []string{"identity: x.bookstore.default", "proxy (envoy): not running, 7 restarts", "last exit: exit status 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

func TestEveryAgentCommandHasHelp(t *testing.T) {
	for _, name := range []string{"run", "bootstrap", "install", "uninstall", "start", "stop", "status"} {
		out, err := execute(t, name, "--help")
		if err != nil || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help = %v:\n%s", name, err, out)
		}
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// TestInstallLeavesThePackagedUnitAlone: where the osm-agent package put
// its unit, install writes no unit and needs the config where that unit
// reads it.
func TestInstallLeavesThePackagedUnitAlone(t *testing.T) {
	root := t.TempDir()
	unit := filepath.Join(root, "lib/systemd/system/osm-agent.service")
	os.MkdirAll(filepath.Dir(unit), 0o755)
	os.WriteFile(unit, []byte("[Unit]\n"), 0o644)
	f := installFlags{token: "tok", configDir: filepath.Join(root, "etc")}
	f.cfg = agent.Config{Server: "https://127.0.0.1:15443", CACertHash: caHash, Service: "bookstore", Namespace: "default", Proxy: agent.ProxyNone, DataDir: filepath.Join(root, "data")}
	var out bytes.Buffer
	err := runInstall(t.Context(), discardLogger(), &out, f, root)
	if err == nil || !strings.Contains(err.Error(), unit) || !strings.Contains(err.Error(), "--no-service") {
		t.Errorf("install with the packaged unit and another --config-dir = %v, want an error naming %s and --no-service", err, unit)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/systemd")); !os.IsNotExist(err) {
		t.Errorf("install wrote a unit next to the packaged one (%v)", err)
	}
}

func TestRunJoinFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "join flags and --config", args: []string{"--config", filepath.Join(dir, "agent.yaml"), "--token", "tok", "--ca-cert-hash", caHash}, want: "not both"},
		{name: "no token, not enrolled", args: []string{"--ca-cert-hash", caHash}, want: "--token is required"},
		{name: "token without pin", args: []string{"--token", "tok"}, want: "--ca-cert-hash is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--server", "https://127.0.0.1:1", "--service", "bookstore", "--proxy", "none", "--data-dir", filepath.Join(dir, "data")}, tc.args...)
			if _, err := execute(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("osm-agent %s = %v, want an error with %q", strings.Join(args, " "), err, tc.want)
			}
		})
	}
}

// TestInstallGatewayIngress: --gateway ingress writes gateway: ingress and
// the certificate directory (--gateway-cert-dir, or the default), and the
// machine's Envoy bootstrap announces osm.flavor gateway and the directory
// (its listeners then come from the Gateway named by --service/--namespace,
// their certificate files under that directory).
func TestInstallGatewayIngress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   []string
		wantDir string
	}{
		{"default directory", nil, meshapi.DefaultGatewayCertDir},
		{"own directory", []string{"--gateway-cert-dir", "/srv/gateway-tls"}, "/srv/gateway-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, md := testInstallGateway(t, agent.GatewayIngress, tc.flags...)
			if cfg.GatewayCertDir != tc.wantDir {
				t.Errorf("config gatewayCertDir = %q, want %s", cfg.GatewayCertDir, tc.wantDir)
			}
			if got := md["osm.gatewayCertDir"].GetStringValue(); got != tc.wantDir {
				t.Errorf("node metadata osm.gatewayCertDir = %q, want %s", got, tc.wantDir)
			}
		})
	}
}

// TestInstallGatewayEgress: --gateway egress writes gateway: egress, and
// the bootstrap announces osm.flavor gateway too (the server renders the
// EgressGateway named by --service/--namespace for the machine).
func TestInstallGatewayEgress(t *testing.T) { testInstallGateway(t, agent.GatewayEgress) }

// testInstallGateway installs a gateway machine of kind with flags, checks
// its config and the Envoy bootstrap it writes, and returns the config
// and the bootstrap's node metadata.
func testInstallGateway(t *testing.T, kind string, flags ...string) (agent.Config, map[string]*structpb.Value) {
	t.Helper()
	dir := t.TempDir()
	etc, data := filepath.Join(dir, "etc"), filepath.Join(dir, "data")
	out, err := execute(t, append([]string{"install", "--no-service", "--server", "https://127.0.0.1:15443", "--token", "tok", "--ca-cert-hash", caHash,
		"--service", kind, "--gateway", kind, "--advertise-address", "203.0.113.10", "--hosts-file", filepath.Join(dir, "hosts"),
		"--config-dir", etc, "--data-dir", data}, flags...)...)
	if err != nil {
		t.Fatalf("install --gateway %s: %v\n%s", kind, err, out)
	}
	cfgPath := filepath.Join(etc, agent.ConfigFile)
	cfg, err := agent.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway != kind {
		t.Fatalf("config gateway = %q, want %s", cfg.Gateway, kind)
	}
	ca := agenttest.NewCA(t)
	id := mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: kind})
	certPEM, keyPEM := ca.KeyPair(t, id.CommonName(), time.Hour)
	if err := agent.SaveIdentity(data, agent.Identity{KeyPEM: keyPEM, CertPEM: certPEM, CAPEM: ca.PEM}); err != nil {
		t.Fatal(err)
	}
	out, err = execute(t, "bootstrap", "--config", cfgPath, "--xds-address", "10.0.0.1:15128")
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("bootstrap output is not an Envoy bootstrap: %v", err)
	}
	if err := envoy.ValidateBootstrap(&b); err != nil {
		t.Error(err)
	}
	md := b.GetNode().GetMetadata().GetFields()
	if got := md["osm.flavor"].GetStringValue(); got != "gateway" {
		t.Errorf("node metadata osm.flavor = %q, want gateway", got)
	}
	if got := md["osm.advertiseAddress"].GetStringValue(); got != "203.0.113.10" {
		t.Errorf("node metadata osm.advertiseAddress = %q, want 203.0.113.10", got)
	}
	return cfg, md
}
