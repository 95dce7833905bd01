package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
)

// Replicas sharing a store end up with one admin token, the first one's,
// and each writes it to its data directory for the CLI.
func TestShareAdminToken(t *testing.T) {
	st := store.NewMemory()
	var got []string
	for range 3 {
		dir := t.TempDir()
		local, err := loadOrCreateAdminToken(dir)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := shareAdminToken(t.Context(), st, dir, local)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, adminTokenFile))
		if err != nil || strings.TrimSpace(string(b)) != tok {
			t.Errorf("%s holds %q, %v; want the shared token", adminTokenFile, b, err)
		}
		got = append(got, tok)
	}
	if got[0] != got[1] || got[1] != got[2] {
		t.Errorf("tokens %q; want one shared token", got)
	}
}
