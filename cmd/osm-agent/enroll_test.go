package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/enroll"
	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// enrollServer is a real HTTPS enrollment server on 127.0.0.1.
type enrollServer struct {
	url    string
	ca     *enrolltest.CA
	tokens *enroll.Tokens
	iss    *enrolltest.Issuer
}

func newEnrollServer(t *testing.T) *enrollServer {
	t.Helper()
	st := store.NewMemory()
	s := &enrollServer{ca: enrolltest.NewCA(t, "osm mesh root"), tokens: enroll.NewTokens(st, nil)}
	s.iss = enrolltest.NewIssuer(s.ca, st)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewUnstartedServer(enroll.NewHandler(log, s.tokens, s.iss, func(string) string { return "127.0.0.1:15128" }, enrolltest.ErrRevoked, enrolltest.ErrNotFound))
	srv.TLS = s.ca.ServerTLS(t)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *enrollServer) token(t *testing.T, svc mesh.MeshService) string {
	t.Helper()
	secret, _, err := s.tokens.Create(context.Background(), enroll.TokenRequest{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// run runs osm-agent in-process with args.
func run(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestEnrollCommand(t *testing.T) {
	s := newEnrollServer(t)
	dir := filepath.Join(t.TempDir(), "osm-agent")
	svc := mesh.MeshService{Namespace: "shop", Name: "bookstore"}
	tokenFile := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(tokenFile, []byte(s.token(t, svc)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err := run("enroll", "--server", s.url, "--token-file", tokenFile, "--ca-cert-hash", s.ca.Hash(),
		"--service", "bookstore", "--namespace", "shop", "--data-dir", dir)
	if err != nil {
		t.Fatalf("osm-agent enroll: %v\nstderr: %s", err, stderr)
	}

	// Files and modes.
	got := map[string]fs.FileMode{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = fi.Mode()
	}
	want := map[string]fs.FileMode{"proxy.key": 0o600, "proxy.crt": 0o644, "ca.crt": 0o644}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("data directory (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode = %v (%v), want 0700", fi.Mode().Perm(), err)
	}

	// What `openssl x509 -noout -subject -ext subjectAltName -in proxy.crt` shows.
	cert := readCert(t, filepath.Join(dir, "proxy.crt"))
	cnPattern := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.bookstore\.shop$`)
	if !cnPattern.MatchString(cert.Subject.CommonName) {
		t.Errorf("subject CN = %q, want <uuid>.bookstore.shop", cert.Subject.CommonName)
	}
	id, err := mesh.ParseProxyIdentity(cert.Subject.CommonName)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	if diff := cmp.Diff([]string{"spiffe://osm.local/ns/shop/sa/bookstore/proxy/" + id.UUID.String()}, uris); diff != "" {
		t.Errorf("URI SANs (-want +got):\n%s", diff)
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 {
		t.Errorf("unexpected SANs: %v %v %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses)
	}
	if got, want := readCert(t, filepath.Join(dir, "ca.crt")).Raw, s.ca.Cert.Raw; !bytes.Equal(got, want) {
		t.Error("ca.crt is not the mesh root")
	}
	if _, err := agent.LoadIdentity(dir); err != nil {
		t.Errorf("LoadIdentity after enroll: %v", err)
	}

	if !strings.HasPrefix(stdout, "Enrolled as "+cert.Subject.CommonName+"\n") {
		t.Errorf("stdout = %q, want it to start with the proxy identity", stdout)
	}
	if !strings.Contains(stdout, "127.0.0.1:15128") {
		t.Errorf("stdout = %q, want the xDS address", stdout)
	}

	// Enrolling again without --force is refused before the token is used.
	second := s.token(t, svc)
	_, _, err = run("enroll", "--server", s.url, "--token", second, "--ca-cert-hash", s.ca.Hash(),
		"--service", "bookstore", "--namespace", "shop", "--data-dir", dir)
	if err == nil || !strings.Contains(err.Error(), "already enrolled as "+cert.Subject.CommonName) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second enroll = %v, want already enrolled, pass --force", err)
	}
	_, _, err = run("enroll", "--server", s.url, "--token", second, "--ca-cert-hash", s.ca.Hash(),
		"--service", "bookstore", "--namespace", "shop", "--data-dir", dir, "--force")
	if err != nil {
		t.Fatalf("enroll --force: %v", err)
	}
	if got := readCert(t, filepath.Join(dir, "proxy.crt")).Subject.CommonName; got == cert.Subject.CommonName {
		t.Errorf("enroll --force kept identity %s, want a new one", got)
	}
}

func TestEnrollCommandErrors(t *testing.T) {
	s := newEnrollServer(t)
	other := enrolltest.NewCA(t, "other")
	for _, tc := range []struct {
		name string
		args func(token string) []string
		want string
	}{
		{
			name: "wrong CA hash",
			args: func(tok string) []string {
				return []string{"--server", s.url, "--token", tok, "--ca-cert-hash", other.Hash(), "--service", "bookstore"}
			},
			want: "no CA in its TLS chain matches --ca-cert-hash",
		},
		{
			name: "malformed CA hash",
			args: func(tok string) []string {
				return []string{"--server", s.url, "--token", tok, "--ca-cert-hash", "abc", "--service", "bookstore"}
			},
			want: "want sha256:<64 hex digits>",
		},
		{
			name: "token for another service",
			args: func(tok string) []string {
				return []string{"--server", s.url, "--token", tok, "--ca-cert-hash", s.ca.Hash(), "--service", "bookbuyer"}
			},
			want: "is for service default/bookstore, not default/bookbuyer",
		},
		{
			name: "http server",
			args: func(tok string) []string {
				return []string{"--server", strings.Replace(s.url, "https", "http", 1), "--token", tok, "--ca-cert-hash", s.ca.Hash(), "--service", "bookstore"}
			},
			want: "want https://host:port",
		},
		{
			name: "no token",
			args: func(string) []string {
				return []string{"--server", s.url, "--ca-cert-hash", s.ca.Hash(), "--service", "bookstore"}
			},
			want: "no join token",
		},
		{
			name: "missing service",
			args: func(tok string) []string {
				return []string{"--server", s.url, "--token", tok, "--ca-cert-hash", s.ca.Hash()}
			},
			want: `required flag(s) "service" not set`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "osm-agent")
			args := append([]string{"enroll", "--data-dir", dir}, tc.args(s.token(t, mesh.MeshService{Namespace: "default", Name: "bookstore"}))...)
			_, _, err := run(args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("osm-agent %v = %v, want an error saying %q", args, err, tc.want)
			}
			for _, f := range []string{"proxy.key", "proxy.crt", "ca.crt"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("%s written after a failed enrollment", f)
				}
			}
		})
	}
	if got := s.iss.Issued(); got != 0 {
		t.Errorf("certificates issued = %d, want 0", got)
	}
}

func TestVersionCommand(t *testing.T) {
	stdout, _, err := run("version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout, "osm-agent ") {
		t.Errorf("version output = %q, want osm-agent <version>", stdout)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cert
}
