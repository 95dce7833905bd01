package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// identityCA issues test identities as enrollment would.
type identityCA struct{ ca *agenttest.CA }

func newIdentityCA(t *testing.T) identityCA { return identityCA{agenttest.NewCA(t)} }

// identity issues a proxy certificate for a new key and returns the files'
// contents.
func (e identityCA) identity(t *testing.T) Identity {
	t.Helper()
	key, err := meshapi.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	id := mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: "bookstore"})
	certPEM, err := e.ca.Sign(id.CommonName(), key.Public(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := MarshalKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Identity{KeyPEM: keyPEM, CertPEM: certPEM, CAPEM: e.ca.PEM}
}

func TestSaveLoadIdentity(t *testing.T) {
	e := newIdentityCA(t)
	dir := filepath.Join(t.TempDir(), "state", "osm-agent")
	first := e.identity(t)
	if err := SaveIdentity(dir, first); err != nil {
		t.Fatal(err)
	}
	// Saving again replaces every file.
	second := e.identity(t)
	if err := SaveIdentity(dir, second); err != nil {
		t.Fatal(err)
	}

	got, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(second, got); diff != "" {
		t.Errorf("loaded identity (-want +got):\n%s", diff)
	}
	wantModes := map[string]fs.FileMode{".": fs.ModeDir | 0o700, KeyFile: 0o600, CertFile: 0o644, CAFile: 0o644}
	gotModes := map[string]fs.FileMode{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"."}, names(entries)...) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		gotModes[name] = fi.Mode()
	}
	if diff := cmp.Diff(wantModes, gotModes); diff != "" {
		t.Errorf("files and modes (-want +got), no temporary files may remain:\n%s", diff)
	}
	if _, err := got.Signer(); err != nil {
		t.Errorf("Signer: %v", err)
	}
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestSaveIdentityRefusesMismatch(t *testing.T) {
	e := newIdentityCA(t)
	a, b := e.identity(t), e.identity(t)
	dir := t.TempDir()
	if err := SaveIdentity(dir, Identity{KeyPEM: a.KeyPEM, CertPEM: b.CertPEM, CAPEM: a.CAPEM}); err == nil {
		t.Fatal("SaveIdentity of a key and someone else's certificate succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("SaveIdentity left %v behind", names(entries))
	}
}

func TestLoadIdentityErrors(t *testing.T) {
	e := newIdentityCA(t)
	id := e.identity(t)
	other := e.identity(t)
	stranger := agenttest.NewCA(t)
	for _, tc := range []struct {
		name     string
		edit     func(t *testing.T, dir string)
		want     string
		notExist bool
	}{
		{"missing key", func(t *testing.T, dir string) { remove(t, dir, KeyFile) }, "proxy.key is missing", true},
		{"missing certificate", func(t *testing.T, dir string) { remove(t, dir, CertFile) }, "proxy.crt is missing", true},
		{"missing CA", func(t *testing.T, dir string) { remove(t, dir, CAFile) }, "ca.crt is missing", true},
		{"corrupt certificate", func(t *testing.T, dir string) { write(t, dir, CertFile, []byte("garbage")) }, "proxy.crt is corrupt", false},
		{"truncated certificate", func(t *testing.T, dir string) { write(t, dir, CertFile, id.CertPEM[:len(id.CertPEM)/2]) }, "proxy.crt is corrupt", false},
		{"corrupt key", func(t *testing.T, dir string) { write(t, dir, KeyFile, []byte("garbage")) }, "proxy.key is corrupt", false},
		{"key of another proxy", func(t *testing.T, dir string) { write(t, dir, KeyFile, other.KeyPEM) }, "proxy.key and proxy.crt do not belong together", false},
		{"corrupt CA", func(t *testing.T, dir string) { write(t, dir, CAFile, []byte("garbage")) }, "ca.crt is corrupt", false},
		{"another mesh's CA", func(t *testing.T, dir string) { write(t, dir, CAFile, stranger.PEM) }, "proxy.crt is not issued by a CA in ca.crt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := SaveIdentity(dir, id); err != nil {
				t.Fatal(err)
			}
			tc.edit(t, dir)
			_, err := LoadIdentity(dir)
			if err == nil {
				t.Fatal("LoadIdentity succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "osm-agent enroll") {
				t.Errorf("LoadIdentity = %q, want it to say %q and how to enroll again", err, tc.want)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tc.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tc.notExist)
			}
		})
	}
}

func remove(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultDataDir(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name   string
		goos   string
		euid   int
		getenv func(string) string
		home   string
		want   string
	}{
		{"root", "linux", 0, env("XDG_STATE_HOME", "/x"), "/root", "/var/lib/osm-agent"},
		{"user with XDG_STATE_HOME", "linux", 1000, env("XDG_STATE_HOME", "/x/state"), "/home/u", "/x/state/osm-agent"},
		{"user, relative XDG_STATE_HOME ignored", "linux", 1000, env("XDG_STATE_HOME", "state"), "/home/u", "/home/u/.local/state/osm-agent"},
		{"user", "darwin", 501, env(), "/Users/u", "/Users/u/.local/state/osm-agent"},
	} {
		if got := defaultDataDir(tc.goos, tc.euid, tc.getenv, tc.home); got != tc.want {
			t.Errorf("%s: defaultDataDir = %q, want %q", tc.name, got, tc.want)
		}
	}
}
