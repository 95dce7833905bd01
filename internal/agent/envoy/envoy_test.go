package envoy_test

import (
	"context"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const dataDir = "/var/lib/osm-agent"

func proxyConfig(xds string) sidecar.ProxyConfig {
	return sidecar.ProxyConfig{
		NodeID:           "7c3f1d2e-8a4b-4c5d-9e6f-0a1b2c3d4e5f.bookstore.default",
		Service:          mesh.MeshService{Namespace: "default", Name: "bookstore"},
		XDSAddress:       xds,
		CertFile:         dataDir + "/proxy.crt",
		KeyFile:          dataDir + "/proxy.key",
		CAFile:           dataDir + "/ca.crt",
		ControlPlaneID:   "spiffe://osm.local/osm-vm/control-plane",
		AgentVersion:     "v0.1.0",
		AdvertiseAddress: "10.0.0.7",
		AppPort:          8080,
		Labels:           map[string]string{"zone": "rack-1", "version": "v2"},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(got), string(want)); diff != "" {
		t.Errorf("%s differs from the golden file (-got +want; go test -update rewrites it):\n%s", name, diff)
	}
}

func TestFilesGolden(t *testing.T) {
	for _, tt := range []struct {
		name, xds string
		replicas  []string
	}{
		{"ip", "10.0.0.1:15128", nil},
		{"hostname", "osm.example.com:15128", nil},
		// Three replicas: one STATIC cluster endpoint each; names make a
		// STRICT_DNS cluster.
		{"replicas", "10.0.0.2:15128", []string{"10.0.0.2:15128", "10.0.0.3:15128", "10.0.0.1:15128"}},
		{"replicas-hostname", "osm-1.example.com:15128", []string{"osm-1.example.com:15128", "osm-2.example.com:15128", "10.0.0.3:15128"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := envoy.New(sidecar.Options{DataDir: dataDir})
			if err != nil {
				t.Fatal(err)
			}
			p := proxyConfig(tt.xds)
			p.XDSAddresses = tt.replicas
			files, err := d.Files(p)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				if tt.replicas != nil && f.Name != envoy.BootstrapFile {
					continue // the SDS files do not name servers
				}
				golden(t, tt.name+"."+filepath.Base(f.Name)+".golden", f.Data)
			}
			if diff := cmp.Diff(names, []string{envoy.ClientCertSDS, envoy.CASDS, envoy.BootstrapFile}); diff != "" {
				t.Errorf("file names (-got +want):\n%s", diff)
			}
			again, err := d.Files(p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(again, files); diff != "" {
				t.Errorf("rendering twice differs (-second +first):\n%s", diff)
			}
		})
	}
}

func TestBootstrapRoundTripsAndValidates(t *testing.T) {
	b, err := envoy.Bootstrap(proxyConfig("10.0.0.1:15128"), dataDir, 15000)
	if err != nil {
		t.Fatal(err)
	}
	data, err := envoy.MarshalJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var got bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&got, b, protocmp.Transform()); diff != "" {
		t.Errorf("protojson round trip (-got +want):\n%s", diff)
	}
	if err := envoy.ValidateBootstrap(&got); err != nil {
		t.Errorf("ValidateBootstrap: %v", err)
	}
	if got, want := got.GetNode().GetMetadata().GetFields()["osm.flavor"].GetStringValue(), "envoy"; got != want {
		t.Errorf("osm.flavor = %q, want %q", got, want)
	}
}

func TestValidateCatchesProblemsInsideAny(t *testing.T) {
	b, err := envoy.Bootstrap(proxyConfig("10.0.0.1:15128"), dataDir, 15000)
	if err != nil {
		t.Fatal(err)
	}
	// An SDS secret config with an empty name is invalid only inside the
	// UpstreamTlsContext packed in the transport socket's Any.
	data, _ := envoy.MarshalJSON(b)
	bad := strings.Replace(string(data), `"name": "xds-client-cert"`, `"name": ""`, 1)
	var got bootstrapv3.Bootstrap
	if err := protojson.Unmarshal([]byte(bad), &got); err != nil {
		t.Fatal(err)
	}
	if err := got.ValidateAll(); err != nil {
		t.Fatalf("the outer ValidateAll already fails (%v); the test needs a problem only inside an Any", err)
	}
	if err := envoy.ValidateBootstrap(&got); err == nil || !strings.Contains(err.Error(), "UpstreamTlsContext") {
		t.Errorf("ValidateBootstrap = %v, want an error inside the UpstreamTlsContext", err)
	}
}

func TestValidateBootstrapCrossReferences(t *testing.T) {
	b, err := envoy.Bootstrap(proxyConfig("10.0.0.1:15128"), dataDir, 15000)
	if err != nil {
		t.Fatal(err)
	}
	b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().ClusterName = "nope"
	if err := envoy.ValidateBootstrap(b); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("ValidateBootstrap = %v, want an error naming the dangling cluster", err)
	}
}

func TestBootstrapRejectsBadInput(t *testing.T) {
	for name, mutate := range map[string]func(*sidecar.ProxyConfig){
		"no port":                   func(p *sidecar.ProxyConfig) { p.XDSAddress = "10.0.0.1" },
		"port zero":                 func(p *sidecar.ProxyConfig) { p.XDSAddress = "10.0.0.1:0" },
		"bad replica":               func(p *sidecar.ProxyConfig) { p.XDSAddresses = []string{"10.0.0.1:15128", "10.0.0.2"} },
		"no node id":                func(p *sidecar.ProxyConfig) { p.NodeID = "" },
		"bad service":               func(p *sidecar.ProxyConfig) { p.Service.Name = "Book Store" },
		"no cert file":              func(p *sidecar.ProxyConfig) { p.CertFile = "" },
		"no control plane identity": func(p *sidecar.ProxyConfig) { p.ControlPlaneID = "" },
	} {
		t.Run(name, func(t *testing.T) {
			p := proxyConfig("10.0.0.1:15128")
			mutate(&p)
			if _, err := envoy.Bootstrap(p, dataDir, 15000); err == nil {
				t.Error("Bootstrap succeeded, want an error")
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "envoy-noexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	okExec := filepath.Join(dir, "envoy")
	if err := os.WriteFile(okExec, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       []string // substrings of the error; nil means no error
	}{
		{"missing file", filepath.Join(dir, "missing"), []string{filepath.Join(dir, "missing"), "does not exist", "--envoy-path", "envoyPath"}},
		{"not executable", notExec, []string{notExec, "not executable", "--envoy-path", "envoyPath"}},
		{"directory", dir, []string{dir, "directory", "--envoy-path"}},
		{"not on PATH", "envoy-not-installed-here", []string{`"envoy-not-installed-here"`, "PATH", "--envoy-path", "envoyPath"}},
		{"executable", okExec, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := envoy.New(sidecar.Options{BinaryPath: tt.path, DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			err = d.Check()
			if tt.want == nil {
				if err != nil {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestDrainPostsToAdmin(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.String()
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	d, err := envoy.New(sidecar.Options{DataDir: t.TempDir(), AdminPort: uint16(lis.Addr().(*net.TCPAddr).Port)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g, want := <-got, "POST /drain_listeners?graceful"; g != want {
		t.Errorf("admin request = %q, want %q", g, want)
	}
	srv.Close()
	if err := d.Drain(context.Background()); err == nil {
		t.Error("Drain with the admin endpoint down succeeded, want an error")
	}
}

func TestCommand(t *testing.T) {
	d, err := envoy.New(sidecar.Options{BinaryPath: "/usr/local/bin/envoy", DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Command().Args
	want := []string{"/usr/local/bin/envoy", "-c", dataDir + "/envoy-bootstrap.json", "--drain-time-s", "5", "--drain-strategy", "gradual", "--disable-hot-restart", "--log-level", "info"}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("args (-got +want):\n%s", diff)
	}
}
