package cache

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the cache free of osm-vm business logic: it may import no
// other package of this module.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	const self = "github.com/osm-vm/osm-vm/internal/xds/cache"
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/osm-vm/osm-vm/") && p != self {
			t.Errorf("cache imports %s; it must know only node IDs, type URLs and resources", p)
		}
	}
}
