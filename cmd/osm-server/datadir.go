package main

import (
	"context"
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

// adminTokenKey is where replicas sharing a store keep the admin token.
const adminTokenKey = "server/admin-token"

// tokenStore is what shareAdminToken needs of the store.
type tokenStore interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error)
}

// shareAdminToken returns the admin token every replica sharing st uses:
// the one stored, or local (this replica's) if none is stored yet (the
// first replica's wins a race). The data directory's file is rewritten to
// it, so the CLI on this host finds it.
func shareAdminToken(ctx context.Context, st tokenStore, dataDir, local string) (string, error) {
	for range 3 {
		b, ver, err := st.Get(ctx, adminTokenKey)
		if err != nil {
			return "", fmt.Errorf("read the shared admin token: %w", err)
		}
		if ver != 0 {
			tok := strings.TrimSpace(string(b))
			if len(tok) < 32 {
				return "", fmt.Errorf("the shared admin token at store key %s holds %d characters, too short: delete the key and restart a replica to create a new one", adminTokenKey, len(tok))
			}
			if tok != local {
				if err := atomicfile.WriteFile(filepath.Join(dataDir, adminTokenFile), []byte(tok+"\n"), 0o600); err != nil {
					return "", fmt.Errorf("write admin token: %w", err)
				}
			}
			return tok, nil
		}
		if _, ok, err := st.CompareAndSwap(ctx, adminTokenKey, 0, []byte(local)); err != nil {
			return "", fmt.Errorf("store the shared admin token: %w", err)
		} else if ok {
			return local, nil
		}
	}
	return "", fmt.Errorf("the shared admin token at store key %s keeps changing: %w", adminTokenKey, errors.New("conflict"))
}
