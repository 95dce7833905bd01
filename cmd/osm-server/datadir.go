package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/osm-vm/osm-vm/internal/atomicfile"
)

// Files osm-server keeps in its data directory besides the store.
const (
	adminTokenFile = "admin.token" // 0600: the admin API's bearer token
	caCertFile     = "ca.crt"      // the mesh root, for CLI clients on this host
)

// loadOrCreateAdminToken returns the admin token in dataDir, creating a
// random 256-bit one (0600) on first start.
func loadOrCreateAdminToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, adminTokenFile)
	if b, err := os.ReadFile(path); err == nil {
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("%s holds %d characters, too short for an admin token: delete it and restart osm-server to create a new one", path, len(tok))
		}
		return tok, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read admin token: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(buf)
	if err := atomicfile.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return tok, nil
}
