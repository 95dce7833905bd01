package join_test

import (
	"io"
	"log/slog"
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
		"curl -fsSk https://10.0.0.5:15443/join/ca.pem",
		`echo "` + join.PEMHash([]byte(caPEM)) + `  $ca" | sha256sum -c`,
		`curl -fsS --cacert "$ca" https://10.0.0.5:15443/join/install.sh | sh -s --`,
		"--server https://10.0.0.5:15443 --token tok --ca-cert-hash sha256:aa --service bookstore --namespace default",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Line = %q\nwant it to contain %q", got, want)
		}
	}
	// The hash is checked before anything else is fetched.
	if strings.Index(got, "sha256sum") > strings.Index(got, "install.sh") {
		t.Errorf("Line fetches the script before it checks the CA: %q", got)
	}
}
