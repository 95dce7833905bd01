package agent

import (
	"cmp"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Names of the identity files in the agent's data directory, written by
// `osm-agent enroll` and the renewal loop.
const (
	KeyFile  = "proxy.key"
	CertFile = "proxy.crt"
	CAFile   = "ca.crt"
)

// reEnroll tells the operator how to recover a broken identity.
const reEnroll = "enroll this machine again: run `osm-server token create --service S --namespace N` on the server, then the `osm-agent enroll ...` command it prints"

// Identity is the agent's proxy key, certificate and mesh CA bundle, PEM.
type Identity struct {
	KeyPEM, CertPEM, CAPEM []byte
}

// TLS returns the key and certificate as a tls.Certificate, with Leaf set.
func (id Identity) TLS() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(id.CertPEM, id.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("proxy key and certificate: %w", err)
	}
	return c, nil
}

// Signer returns the private key.
func (id Identity) Signer() (crypto.Signer, error) {
	c, err := id.TLS()
	if err != nil {
		return nil, err
	}
	s, ok := c.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("proxy key: %T is not a signing key", c.PrivateKey)
	}
	return s, nil
}

// MarshalKey returns key as a PEM "PRIVATE KEY" (PKCS #8).
func MarshalKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// DefaultDataDir returns the agent's state directory: /var/lib/osm-agent
// when running as root, otherwise $XDG_STATE_HOME/osm-agent or
// ~/.local/state/osm-agent; on Windows %ProgramData%\osm-agent.
func DefaultDataDir() string {
	home, _ := os.UserHomeDir()
	return defaultDataDir(runtime.GOOS, os.Geteuid(), os.Getenv, home)
}

func defaultDataDir(goos string, euid int, getenv func(string) string, home string) string {
	if goos == "windows" {
		return filepath.Join(cmp.Or(getenv("ProgramData"), `C:\ProgramData`), "osm-agent")
	}
	if euid == 0 {
		return "/var/lib/osm-agent"
	}
	if st := getenv("XDG_STATE_HOME"); filepath.IsAbs(st) {
		return filepath.Join(st, "osm-agent")
	}
	if home != "" {
		return filepath.Join(home, ".local", "state", "osm-agent")
	}
	return filepath.Join(os.TempDir(), "osm-agent")
}

// SaveIdentity writes the identity into dir (created 0700): proxy.key
// 0600, proxy.crt and ca.crt 0644. Each file is written to a temporary
// file, synced and renamed over the old one; the renames happen together
// after every file is on disk, and the directory is synced last.
// LoadIdentity notices a key and certificate that do not belong together.
func SaveIdentity(dir string, id Identity) error {
	if _, err := parseIdentity(id); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	files := []struct {
		name string
		data []byte
		mode fs.FileMode
	}{
		{CAFile, id.CAPEM, 0o644},
		{KeyFile, id.KeyPEM, 0o600},
		{CertFile, id.CertPEM, 0o644},
	}
	temps := make([]string, 0, len(files))
	defer func() {
		for _, t := range temps {
			_ = os.Remove(t) // gone after a successful rename
		}
	}()
	for _, f := range files {
		tmp, err := writeTemp(dir, f.name, f.data, f.mode)
		if err != nil {
			return fmt.Errorf("save identity: %w", err)
		}
		temps = append(temps, tmp)
	}
	for i, f := range files {
		if err := os.Rename(temps[i], filepath.Join(dir, f.name)); err != nil {
			return fmt.Errorf("save identity: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	return nil
}

// writeTemp writes data to a new temporary file next to name, with mode,
// and syncs it.
func writeTemp(dir, name string, data []byte, mode fs.FileMode) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return tmp, nil
}

func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be synced there; renames are durable
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// LoadIdentity reads the identity SaveIdentity wrote and checks that the
// key and certificate belong together and the CA bundle parses. Its errors
// name the missing or corrupt file and say how to enroll again; a missing
// file wraps fs.ErrNotExist.
func LoadIdentity(dir string) (Identity, error) {
	var id Identity
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{KeyFile, &id.KeyPEM}, {CertFile, &id.CertPEM}, {CAFile, &id.CAPEM}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			return Identity{}, fmt.Errorf("%s is missing (%w): this machine is not enrolled; %s", filepath.Join(dir, f.name), fs.ErrNotExist, reEnroll)
		}
		if err != nil {
			return Identity{}, fmt.Errorf("read %s: %w", filepath.Join(dir, f.name), err)
		}
		*f.dst = b
	}
	if _, err := parseIdentity(id); err != nil {
		return Identity{}, fmt.Errorf("%s: %w; %s", dir, err, reEnroll)
	}
	return id, nil
}

// parseIdentity checks an identity and returns its certificate.
func parseIdentity(id Identity) (*x509.Certificate, error) {
	block, _ := pem.Decode(id.KeyPEM)
	if block == nil {
		return nil, fmt.Errorf("%s is corrupt: no PEM private key", KeyFile)
	}
	cert, err := meshapi.ParseCertificatePEM(id.CertPEM)
	if err != nil {
		return nil, fmt.Errorf("%s is corrupt: %w", CertFile, err)
	}
	if _, err := tls.X509KeyPair(id.CertPEM, id.KeyPEM); err != nil {
		return nil, fmt.Errorf("%s and %s do not belong together or are corrupt: %w", KeyFile, CertFile, err)
	}
	switch err := meshapi.VerifyChain(cert, id.CAPEM); {
	case errors.Is(err, meshapi.ErrNoCA):
		return nil, fmt.Errorf("%s is corrupt: no PEM certificate", CAFile)
	case err != nil:
		return nil, fmt.Errorf("%s is not issued by a CA in %s: %w", CertFile, CAFile, err)
	}
	return cert, nil
}
