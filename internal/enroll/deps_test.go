package enroll

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestImports enforces the package comments: of osm-vm, enroll and
// enrolltest import only internal/mesh, internal/meshapi (the wire types)
// and internal/store (enrolltest not even enroll, so enroll's tests can use
// it).
func TestImports(t *testing.T) {
	const module = "github.com/osm-vm/osm-vm/"
	for _, pkg := range []string{".", "./enrolltest"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		allowed := map[string]bool{
			module + "internal/mesh":    true,
			module + "internal/meshapi": true,
			module + "internal/keylock": true,
			module + "internal/store":   true,
		}
		self := module + "internal/enroll"
		if pkg == "./enrolltest" {
			self += "/enrolltest"
		}
		allowed[self] = true
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module) && !allowed[dep] {
				t.Errorf("%s depends on %s; it may import only internal/mesh, internal/meshapi, internal/keylock and internal/store of osm-vm", self, dep)
			}
		}
	}
}
