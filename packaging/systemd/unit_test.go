// Package systemd holds the systemd units the packages install; its test
// checks them with systemd-analyze.
package systemd

import (
	"os/exec"
	"strings"
	"testing"
)

func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze not found: install it with `apt-get install systemd` (make test does) so the unit file is checked")
	}
	out, err := exec.Command(analyze, "verify", "--man=no", "osm-server.service").CombinedOutput()
	// verify complains that /usr/bin/osm-server is missing on a build
	// machine; anything else is a real problem with the unit.
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || strings.Contains(line, "/usr/bin/osm-server") {
			continue
		}
		problems = append(problems, line)
	}
	if len(problems) > 0 {
		t.Errorf("systemd-analyze verify osm-server.service (%v):\n%s", err, strings.Join(problems, "\n"))
	}
}
