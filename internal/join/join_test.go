package join_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

const caPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func get(t *testing.T, h http.Handler, url string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	old, newer := filepath.Join(dir, "osm-agent_1.0.0_amd64.deb"), filepath.Join(dir, "osm-agent_1.0.1_amd64.deb")
	os.WriteFile(old, []byte("old"), 0o644)
	os.WriteFile(newer, []byte("new"), 0o644)
	os.WriteFile(filepath.Join(dir, "osm-agent-1.0.1-1.x86_64.rpm"), []byte("rpm"), 0o644)
	os.WriteFile(filepath.Join(dir, "osm-server_1.0.1_amd64.deb"), []byte("server"), 0o644)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)
	h := join.NewHandler(slog.New(slog.DiscardHandler), []byte(caPEM), dir, join.Limits{})

	for _, tc := range []struct {
		name, url string
		code      int
		body      string
	}{
		{name: "the CA, byte for byte", url: join.CAPath, code: 200, body: caPEM},
		{name: "the newest deb", url: join.PackagePath + "deb?arch=amd64", code: 200, body: "new"},
		{name: "the rpm", url: join.PackagePath + "rpm?arch=x86_64", code: 200, body: "rpm"},
		{name: "no package for the arch", url: join.PackagePath + "deb?arch=arm64", code: 404, body: "no osm-agent .deb for arm64"},
		{name: "a bad arch", url: join.PackagePath + "deb?arch=../x", code: 400, body: "?arch="},
		{name: "an unknown format", url: join.PackagePath + "apk?arch=amd64", code: 400, body: "deb or"},
		{name: "an unknown route", url: "/join/other", code: 404, body: join.ScriptPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.url)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("GET %s = %d %q, want %d with %q", tc.url, code, body, tc.code, tc.body)
			}
		})
	}
	if code, body := get(t, h, join.ScriptPath); code != 200 || !strings.HasPrefix(body, "#!/bin/sh") {
		t.Errorf("GET %s = %d %.40q, want the script", join.ScriptPath, code, body)
	}
}

// TestScriptParses runs sh -n over the join script.
func TestScriptParses(t *testing.T) {
	_, script := get(t, join.NewHandler(slog.New(slog.DiscardHandler), nil, t.TempDir(), join.Limits{}), join.ScriptPath)
	cmd := exec.Command("sh", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -n install.sh: %v\n%s", err, out)
	}
}

func TestLine(t *testing.T) {
	got := join.Line("https://10.0.0.5:15443/", "tok", "sha256:aa", []byte(caPEM), mesh.MeshService{Namespace: "default", Name: "bookstore"})
	for _, want := range []string{
		"sh -c 's=https://10.0.0.5:15443; ",
		`curl -fsSk -o "$d/ca.pem" "$s/join/ca.pem"`,
		`echo "` + join.PEMHash([]byte(caPEM)) + `  $d/ca.pem" | sha256sum -c`,
		`curl -fsS --cacert "$d/ca.pem" -o "$d/install.sh" "$s/join/install.sh"`,
		`sh "$d/install.sh" --ca-file "$d/ca.pem" --server https://10.0.0.5:15443 --token tok --ca-cert-hash sha256:aa --service bookstore --namespace default`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Line = %q\nwant it to contain %q", got, want)
		}
	}
	// The hash is checked before anything else is fetched, and the script
	// is never piped into a shell.
	if strings.Index(got, "sha256sum") > strings.Index(got, "install.sh") {
		t.Errorf("Line fetches the script before it checks the CA: %q", got)
	}
	if strings.Contains(got, "| sh ") {
		t.Errorf("Line pipes a download into sh (a failed download then exits 0): %q", got)
	}
	// A value a shell would read differently is quoted.
	odd := join.Line("https://h/x'$(id)", "tok", "sha256:aa", []byte(caPEM), mesh.MeshService{Namespace: "default", Name: "bookstore"})
	out, err := exec.Command("/bin/sh", "-c", strings.Replace(odd, "sh -c ", "printf %s ", 1)).Output()
	if err != nil || !strings.HasPrefix(string(out), `s='https://h/x'\''$(id)'; `) {
		t.Errorf("the line's script for an odd URL is %q (%v), want the URL quoted", out, err)
	}
}

// testServer serves h over HTTPS on 127.0.0.1 with a certificate from a
// new CA, and returns its URL and the CA's PEM.
func testServer(t *testing.T, h func(caPEM []byte) http.Handler) (string, []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "join test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pemCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srv := httptest.NewUnstartedServer(h(pemCA))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, pemCA
}

// The printed line, run by /bin/sh (dash on Debian, which has no
// pipefail), exits non-zero at every failed step with a message naming
// it, against the join handler on a real HTTPS listener, and leaves no
// temporary files. (The enrollment's refusal, which needs the package
// installed, is tried in the Debian root: packaging's debroot suite.)
func TestLineFailsAtEachStep(t *testing.T) {
	joinHandler := func(caPEM []byte) http.Handler {
		return join.NewHandler(slog.New(slog.DiscardHandler), caPEM, t.TempDir(), join.Limits{}) // no packages
	}
	noScript := func(caPEM []byte) http.Handler {
		h := joinHandler(caPEM)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == join.ScriptPath {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	svc := mesh.MeshService{Namespace: "default", Name: "bookstore"}
	for _, tc := range []struct {
		name string
		line func(t *testing.T) string
		want []string // in stderr
		not  string   // not in the output
	}{
		{
			name: "the CA cannot be fetched",
			line: func(t *testing.T) string {
				_, ca := testServer(t, joinHandler)
				down := httptest.NewServer(http.NotFoundHandler())
				down.Close() // nothing listens there now
				return join.Line("https://"+down.Listener.Addr().String(), "tok", "sha256:aa", ca, svc)
			},
			want: []string{"osm-vm join: step 1 of 4 failed: fetching the mesh CA from https://127.0.0.1:"},
			not:  "downloading",
		},
		{
			name: "the CA does not match the hash",
			line: func(t *testing.T) string {
				u, _ := testServer(t, joinHandler)
				return join.Line(u, "tok", "sha256:aa", []byte(caPEM), svc)
			},
			want: []string{"osm-vm join: step 2 of 4 failed: the mesh CA from " + "https://127.0.0.1:", "does not match the hash"},
			not:  "downloading",
		},
		{
			name: "the script is not found",
			line: func(t *testing.T) string {
				u, ca := testServer(t, noScript)
				return join.Line(u, "tok", "sha256:aa", ca, svc)
			},
			want: []string{"404", "osm-vm join: step 3 of 4 failed: downloading the join script from https://127.0.0.1:"},
			not:  "downloading osm-agent",
		},
		{
			name: "the script fails",
			line: func(t *testing.T) string {
				u, ca := testServer(t, joinHandler)
				return join.Line(u, "tok", "sha256:aa", ca, svc)
			},
			// As root with dpkg or rpm: the server has no package; otherwise
			// the script wants root or a package manager.
			want: []string{"osm-vm join: step 4 of 4 failed: the join script stopped"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := tc.line(t)
			tmp := t.TempDir()
			cmd := exec.Command("/bin/sh", "-c", line)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("the line exited with %v, want a non-zero status\nstderr: %s\nline: %s", err, stderr.String(), line)
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr %q does not say %q", stderr.String(), want)
				}
			}
			if tc.not != "" && strings.Contains(stdout.String()+stderr.String(), tc.not) {
				t.Errorf("the line went on after the failed step: %s%s", stdout.String(), stderr.String())
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("the line left %d files in TMPDIR", len(left))
			}
		})
	}
}
