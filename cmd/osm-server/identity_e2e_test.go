package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// identityServer is an osm-server process with a fixed data dir and API
// address, which can be killed and started again.
type identityServer struct {
	bin, dataDir, api, debug, xds string
	cmd                           *exec.Cmd
	exited                        chan error
}

func newIdentityServer(t *testing.T, bin string) *identityServer {
	return &identityServer{bin: bin, dataDir: filepath.Join(t.TempDir(), "data"), api: freeAddr(t), debug: freeAddr(t), xds: freeAddr(t)}
}

func (s *identityServer) start(t *testing.T) {
	t.Helper()
	s.cmd = exec.Command(filepath.Join(s.bin, "osm-server"), "serve", "--data-dir", s.dataDir, "--plugin-dir", s.bin,
		"--api-address", s.api, "--debug-address", s.debug, "--xds-address", s.xds)
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(s.dataDir), "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan error, 1)
	cmd := s.cmd
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() { s.kill() })
	deadline := time.Now().Add(testwait.Bound(t))
	for {
		if resp, err := http.Get("http://" + s.debug + "/healthz"); err == nil {
			resp.Body.Close()
			if _, err := os.Stat(filepath.Join(s.dataDir, caCertFile)); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(filepath.Dir(s.dataDir), "server.log"))
			t.Fatalf("osm-server not up:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *identityServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.exited <- nil
	s.cmd = nil
}

// cli runs an osm-server admin subcommand in-process against s.
func (s *identityServer) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errw strings.Builder
	cmd := newRootCmd(&out, &errw)
	cmd.SetArgs(append(args, "--server", "https://"+s.api, "--data-dir", s.dataDir))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func (s *identityServer) proxies(t *testing.T) []certificate.ProxyRecord {
	t.Helper()
	out, err := s.cli(t, "proxy", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var recs []certificate.ProxyRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("proxy list -o json: %v\n%s", err, out)
	}
	return recs
}

// parseJoin picks the token and CA hash out of a printed join command.
func parseJoin(t *testing.T, line string) (token, hash string) {
	t.Helper()
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "--token":
			token = f[i+1]
		case "--ca-cert-hash":
			hash = f[i+1]
		}
	}
	if token == "" || hash == "" || f[0] != "osm-agent" || f[1] != "enroll" {
		t.Fatalf("join command %q lacks osm-agent enroll, --token or --ca-cert-hash", line)
	}
	return token, hash
}

func enrollOnce(ctx context.Context, server, token, hash string, svc mesh.MeshService) (meshclient.Result, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return meshclient.Result{}, err
	}
	return meshclient.Enroll(ctx, nil, meshclient.JoinRequest{Server: server, Token: token, CACertHash: hash, Service: svc}, key)
}

func TestEnrollmentThroughTheServer(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	s.start(t)
	svc := mesh.MeshService{Namespace: "default", Name: "bookstore"}

	join, err := s.cli(t, "token", "create", "--print", "enroll", "--service", "bookstore", "--join-server", "https://"+s.api)
	if err != nil {
		t.Fatal(err)
	}
	token, hash := parseJoin(t, strings.TrimSpace(join))
	// Paste the printed command on "another machine": the real osm-agent binary.
	agentDir := filepath.Join(t.TempDir(), "agent")
	args := append(strings.Fields(strings.TrimSpace(join))[1:], "--data-dir", agentDir)
	out, err := exec.Command(filepath.Join(bin, "osm-agent"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("osm-agent %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	certPEM, err := os.ReadFile(filepath.Join(agentDir, "proxy.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(agentDir, "proxy.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("proxy.key: %v mode %v, want 0600", err, fi.Mode().Perm())
	}
	res := meshclient.Result{CertificatePEM: certPEM}
	block, _ := pem.Decode(res.CertificatePEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	id, err := mesh.ParseProxyIdentity(cert.Subject.CommonName)
	if err != nil || id.Service != svc {
		t.Fatalf("CN %q: %v; want <uuid>.bookstore.default", cert.Subject.CommonName, err)
	}
	if !strings.Contains(string(out), cert.Subject.CommonName) {
		t.Errorf("osm-agent enroll output does not print the identity %s:\n%s", cert.Subject.CommonName, out)
	}
	if len(cert.URIs) == 0 || !strings.HasPrefix(cert.URIs[0].String(), "spiffe://osm.local/ns/default/sa/bookstore") {
		t.Errorf("URI SANs %v: want spiffe://osm.local/ns/default/sa/bookstore...", cert.URIs)
	}
	if openssl, err := exec.LookPath("openssl"); err != nil {
		t.Error("openssl not found: install it with `apt-get install openssl` (make test does) so the certificate is checked as an operator would")
	} else {
		f := filepath.Join(t.TempDir(), "proxy.crt")
		os.WriteFile(f, res.CertificatePEM, 0o600)
		out, err := exec.Command(openssl, "x509", "-in", f, "-noout", "-subject", "-ext", "subjectAltName").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "CN = "+cert.Subject.CommonName) || !strings.Contains(string(out), "URI:spiffe://osm.local/ns/default/sa/bookstore") {
			t.Errorf("openssl x509 -subject -ext subjectAltName: %v\n%s", err, out)
		}
	}

	// The token was single-use.
	if _, err := enrollOnce(t.Context(), "https://"+s.api, token, hash, svc); err == nil || !strings.Contains(err.Error(), "used up") {
		t.Errorf("second enrollment with a single-use token: %v; want refused as used up", err)
	}
	// A wrong CA hash is refused before the token is sent.
	join2, _ := s.cli(t, "token", "create", "--print", "enroll", "--service", "bookstore")
	token2, _ := parseJoin(t, strings.TrimSpace(join2))
	if _, err := enrollOnce(t.Context(), "https://"+s.api, token2, "sha256:"+strings.Repeat("0", 64), svc); err == nil {
		t.Error("enrollment with a wrong CA hash succeeded")
	}
	tokens, _ := s.cli(t, "token", "list")
	if !strings.Contains(tokens, "1/1") {
		t.Errorf("token list after a refused pin: the second token must still have its use:\n%s", tokens)
	}

	recs := s.proxies(t)
	if len(recs) != 1 || recs[0].CN != cert.Subject.CommonName || recs[0].State != certificate.StateUnclaimed {
		t.Fatalf("proxy list = %+v, want the enrolled proxy, unclaimed", recs)
	}
	caBefore, _ := s.cli(t, "ca", "show")
	if out, err := s.cli(t, "apply", "-f", bookstoreFile); err != nil || !strings.Contains(out, "service/bookstore created") {
		t.Fatalf("apply the bookstore example through the real server: %v\n%s", err, out)
	}
	vipsBefore, err := s.cli(t, "get", "services", "-o", "json")
	if err != nil || !strings.Contains(vipsBefore, "127.77.") {
		t.Fatalf("get services: %v; want VIPs from 127.77.0.0/16:\n%s", err, vipsBefore)
	}

	// The proxy's TLS session, made before the restart, resumes after it:
	// the ticket keys are kept in the store.
	pair, err := tls.LoadX509KeyPair(filepath.Join(agentDir, "proxy.crt"), filepath.Join(agentDir, "proxy.key"))
	if err != nil {
		t.Fatal(err)
	}
	osm := xdstest.Server{API: s.api, XDS: s.xds, DataDir: s.dataDir}
	sessions := tls.NewLRUClientSessionCache(1)
	if osm.Resumes(t, pair, sessions) {
		t.Fatal("the proxy's first connection resumed a session it cannot have had")
	}

	// Restart: the CA, the tokens and the proxies are kept.
	s.kill()
	s.start(t)
	if !osm.Resumes(t, pair, sessions) {
		t.Error("the proxy's connection after the restart did not resume its TLS session")
	}
	caAfter, _ := s.cli(t, "ca", "show")
	if caBefore == "" || caAfter != caBefore {
		t.Errorf("CA changed across a restart:\n%s\n---\n%s", caBefore, caAfter)
	}
	if recs := s.proxies(t); len(recs) != 1 || recs[0].CN != cert.Subject.CommonName {
		t.Errorf("after restart proxy list = %+v", recs)
	}
	if vips, _ := s.cli(t, "get", "services", "-o", "json"); vips != vipsBefore {
		t.Errorf("services or VIPs changed across a restart:\n%s\n---\n%s", vipsBefore, vips)
	}
	if out, err := s.cli(t, "apply", "-f", bookstoreFile); err != nil || strings.Contains(out, "created") || strings.Contains(out, "configured") {
		t.Errorf("re-applying the bookstore after a restart must change nothing: %v\n%s", err, out)
	}
	if out, _ := s.cli(t, "token", "list"); strings.Count(out, "default/bookstore") != 2 {
		t.Errorf("after restart token list:\n%s", out)
	}
	if _, err := enrollOnce(t.Context(), "https://"+s.api, token2, hash, svc); err != nil {
		t.Errorf("enroll with the second token after restart: %v", err)
	}

	if _, err := s.cli(t, "proxy", "revoke", cert.Subject.CommonName); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.proxies(t) {
		if r.CN == cert.Subject.CommonName && r.State != certificate.StateRevoked {
			t.Errorf("revoked proxy shows state %s", r.State)
		}
	}
}

// TestSIGKILLDuringEnrollments kills the server repeatedly while agents
// enroll with one multi-use token. After each restart the CA is the same,
// and uses spent always equal proxies issued.
func TestSIGKILLDuringEnrollments(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	s.start(t)
	svc := mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
	const uses = 100000
	join, err := s.cli(t, "token", "create", "--print", "enroll", "--service", "bookbuyer", "--uses", fmt.Sprint(uses))
	if err != nil {
		t.Fatal(err)
	}
	token, hash := parseJoin(t, strings.TrimSpace(join))
	ca0, _ := s.cli(t, "ca", "show")

	var mu sync.Mutex
	succeeded := map[string]bool{}
	for round := range 4 {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					res, err := enrollOnce(ctx, "https://"+s.api, token, hash, svc)
					if err == nil {
						mu.Lock()
						succeeded[res.Identity] = true
						mu.Unlock()
					}
				}
			})
		}
		time.Sleep(time.Duration(150+round*60) * time.Millisecond)
		s.kill()
		cancel()
		wg.Wait()
		s.start(t)
		if ca, _ := s.cli(t, "ca", "show"); ca != ca0 {
			t.Fatalf("round %d: the CA changed after SIGKILL", round)
		}
	}
	recs := s.proxies(t)
	issued := map[string]bool{}
	for _, r := range recs {
		if r.Serial == "" || r.Issued.IsZero() || r.Expires.IsZero() || r.State != certificate.StateUnclaimed {
			t.Errorf("half-written proxy record: %+v", r)
		}
		issued[r.CN] = true
	}
	for cn := range succeeded {
		if !issued[cn] {
			t.Errorf("agent got certificate %s but the server has no record of it", cn)
		}
	}
	out, err := s.cli(t, "token", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var toks []meshapi.TokenStatus
	if err := json.Unmarshal([]byte(out), &toks); err != nil || len(toks) != 1 {
		t.Fatalf("token list: %v %s", err, out)
	}
	if spent := toks[0].UsesTotal - toks[0].UsesLeft; spent != len(recs) {
		t.Errorf("token uses spent %d but %d proxies issued: a use was lost or a proxy issued without one", spent, len(recs))
	}
	if len(recs) == 0 {
		t.Error("no enrollment succeeded in any round; the test proves nothing")
	}
	t.Logf("%d proxies enrolled across 4 SIGKILLs, %d seen by agents", len(recs), len(succeeded))
}
