package enroll

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
)

// identity enrolls a proxy and returns its files' contents.
func (e *testEnv) identity(t *testing.T) Identity {
	t.Helper()
	secret, _ := e.token(t, TokenRequest{Service: bookstore})
	key := newKey(t)
	res, err := Enroll(context.Background(), nil, e.join(secret), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := MarshalKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Identity{KeyPEM: keyPEM, CertPEM: res.CertificatePEM, CAPEM: res.CAPEM}
}

func TestSaveLoadIdentity(t *testing.T) {
	e := newTestEnv(t)
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
	e := newTestEnv(t)
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
	e := newTestEnv(t)
	id := e.identity(t)
	other := e.identity(t)
	stranger := enrolltest.NewCA(t, "another mesh")
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
		{"another mesh's CA", func(t *testing.T, dir string) { write(t, dir, CAFile, stranger.PEM()) }, "proxy.crt is not issued by a CA in ca.crt", false},
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

func TestCAHash(t *testing.T) {
	ca := enrolltest.NewCA(t, "root")
	spki, err := x509.MarshalPKIXPublicKey(ca.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := CAHash(ca.Cert.Raw); got != want {
		t.Errorf("CAHash = %q, want %q", got, want)
	}
	if got, want := CAHash(ca.Cert.Raw), ca.Hash(); got != want {
		t.Errorf("CAHash = %q, enrolltest.CA.Hash = %q", got, want)
	}
	if got := CAHash([]byte("not DER")); got != "" {
		t.Errorf("CAHash of garbage = %q, want empty", got)
	}

	// The hash an operator computes with openssl, as kubeadm documents:
	// openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256.
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl not found: install it with `apt-get install openssl` (make test does) so the CA hash is cross-checked")
	}
	pub := exec.Command("openssl", "x509", "-pubkey", "-noout")
	pub.Stdin = bytes.NewReader(ca.PEM())
	pubPEM, err := pub.Output()
	if err != nil {
		t.Fatalf("openssl x509 -pubkey: %v", err)
	}
	der := exec.Command("openssl", "pkey", "-pubin", "-outform", "der")
	der.Stdin = bytes.NewReader(pubPEM)
	derOut, err := der.Output()
	if err != nil {
		t.Fatalf("openssl pkey: %v", err)
	}
	sum = sha256.Sum256(derOut)
	if got, want := CAHash(ca.Cert.Raw), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("CAHash = %q, openssl says %q", got, want)
	}
}

func TestParseCAHash(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"sha256:" + hex64, "sha256:" + hex64, true},
		{"SHA256:" + strings.ToUpper(hex64), "sha256:" + hex64, true},
		{hex64, "", false},
		{"sha256:" + hex64[:10], "", false},
		{"sha1:" + hex64, "", false},
		{"sha256:" + strings.Repeat("zz", 32), "", false},
	} {
		got, err := ParseCAHash(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseCAHash(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--ca-cert-hash") {
			t.Errorf("ParseCAHash(%q) error %q does not name the flag", tc.in, err)
		}
	}
}
