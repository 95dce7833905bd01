package main

import (
	"os"
	"os/exec"
	"testing"
)

// TestBuildsForWindows keeps osm-agent building for windows/amd64, where it
// runs as a Windows service (docs/operator-guide.md says what works there).
func TestBuildsForWindows(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go build ./cmd/osm-agent: %v\n%s", err, out)
	}
}
