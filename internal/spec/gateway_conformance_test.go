package spec

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/osm-vm/osm-vm/internal/store"
)

// conformanceDir returns the Gateway API conformance module's directory in
// the module cache (downloaded by `go mod download` when missing).
func conformanceDir(t *testing.T) string {
	t.Helper()
	return moduleDir(t, "sigs.k8s.io/gateway-api/conformance@"+gatewayAPIVersion(t))
}

// runGo runs the go command (the one running the tests).
func runGo(args ...string) ([]byte, error) {
	return exec.Command("go", args...).Output()
}

// gatewayAPIVersion is the sigs.k8s.io/gateway-api version go.mod pins.
func gatewayAPIVersion(t *testing.T) string {
	t.Helper()
	out, err := runGo("list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/gateway-api")
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// meshServices returns the v1 Service documents of the conformance
// suite's mesh manifests (the rest are Deployments and Namespaces).
func meshServices(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "mesh", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			break
		}
		var head struct{ Kind string }
		_ = n.Decode(&head)
		if head.Kind != "Service" {
			continue
		}
		y, _ := yaml.Marshal(&n)
		out = append(out, string(y))
	}
	return strings.Join(out, "---\n")
}

func TestGatewayConformanceMeshManifestsApply(t *testing.T) {
	dir := conformanceDir(t)
	svcs := meshServices(t, dir)
	files, _ := filepath.Glob(filepath.Join(dir, "tests", "mesh", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no mesh test manifests")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			if _, err := s.Apply(t.Context(), mustParse(t, svcs), ApplyOptions{}); err != nil {
				t.Fatalf("apply the mesh Services: %v", err)
			}
			b, _ := os.ReadFile(f)
			docs, err := Parse(b, filepath.Base(f))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			res, err := s.Apply(t.Context(), docs, ApplyOptions{})
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			for _, r := range res.Results {
				t.Logf("%s %s %q", r.Key, r.Action, r.Warnings)
			}
		})
	}
}
