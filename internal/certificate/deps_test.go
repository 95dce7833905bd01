package certificate

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports enforces the package comment: of osm-vm, only internal/mesh,
// internal/meshapi and internal/store.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/osm-vm/osm-vm/"
	allowed := map[string]bool{
		module + "internal/certificate": true,
		module + "internal/mesh":        true,
		module + "internal/meshapi":     true,
		module + "internal/keylock":     true,
		module + "internal/store":       true,
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module) && !allowed[dep] {
			t.Errorf("internal/certificate depends on %s; it may import only internal/mesh, internal/meshapi, internal/keylock and internal/store of osm-vm", dep)
		}
	}
}
