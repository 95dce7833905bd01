//go:build k8sintegration && linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// controlPlane is a real etcd and kube-apiserver on 127.0.0.1, built by
// hack/build-kube-apiserver.sh. There is no controller-manager: tests write
// EndpointSlices themselves, in a fresh namespace each.
type controlPlane struct {
	t          *testing.T
	dir        string
	binDir     string
	token      string
	apiPort    int
	etcdURL    string
	apiserver  *exec.Cmd
	kubeconfig string
	client     kubernetes.Interface
}

// binDir is where hack/build-kube-apiserver.sh put the binaries.
func binDir(t *testing.T) string {
	dir := os.Getenv("OSM_KUBE_BIN_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatalf("no OSM_KUBE_BIN_DIR and no home directory: %v", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "osm-vm", "kube-v1.34.4")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s not found in %s (%v); run hack/build-kube-apiserver.sh and set OSM_KUBE_BIN_DIR to the directory it prints", b, dir, err)
		}
	}
	return dir
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, dir: t.TempDir(), binDir: binDir(t)}
	tok := make([]byte, 16)
	rand.Read(tok)
	cp.token = hex.EncodeToString(tok)

	etcdClient, etcdPeer := testaddr.FreePort(t), testaddr.FreePort(t)
	cp.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd := cp.command("etcd",
		"--data-dir", filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls", cp.etcdURL, "--advertise-client-urls", cp.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")
	cp.start(etcd)
	t.Cleanup(func() { stop(etcd) })
	cp.waitHTTP("etcd", cp.etcdURL+"/health", "")

	// Service-account keys and the admin token.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	cp.write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	cp.write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	cp.write("tokens.csv", []byte(cp.token+`,admin,admin,"system:masters"`+"\n"))

	cp.apiPort = testaddr.FreePort(t)
	cp.startAPIServer()
	t.Cleanup(cp.stopAPIServer)

	cp.kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	cp.write("kubeconfig", fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %s}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, cp.apiPort, cp.token))
	rc, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The tests' own writes must not wait on client-go's default 5 QPS
	// throttle, or they would measure it.
	rc.QPS, rc.Burst = 1000, 1000
	cp.client, err = kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

func (cp *controlPlane) startAPIServer() {
	cp.t.Helper()
	start := time.Now()
	cp.apiserver = cp.command("kube-apiserver",
		"--etcd-servers", cp.etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(cp.apiPort),
		"--cert-dir", filepath.Join(cp.dir, "certs"),
		"--token-auth-file", filepath.Join(cp.dir, "tokens.csv"),
		"--authorization-mode", "AlwaysAllow",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(cp.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(cp.dir, "sa.key"),
		"--disable-admission-plugins", "ServiceAccount",
		"--endpoint-reconciler-type", "none",
		"--service-cluster-ip-range", "10.0.0.0/24")
	cp.start(cp.apiserver)
	cp.waitHTTP("kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", cp.apiPort), cp.token)
	cp.t.Logf("kube-apiserver ready in %v", time.Since(start).Round(10*time.Millisecond))
}

func (cp *controlPlane) stopAPIServer() {
	if cp.apiserver != nil {
		stop(cp.apiserver)
		cp.apiserver = nil
	}
}

// crashAPIServer kills the API server with SIGKILL, as a crash or an OOM
// kill would: no graceful closing of watches.
func (cp *controlPlane) crashAPIServer() {
	cp.apiserver.Process.Kill()
	cp.apiserver.Wait()
	cp.apiserver = nil
}

func (cp *controlPlane) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(cp.binDir, bin), args...)
	logf, err := os.OpenFile(filepath.Join(cp.dir, bin+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	// Die with the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (cp *controlPlane) start(cmd *exec.Cmd) {
	cp.t.Helper()
	if err := cmd.Start(); err != nil {
		cp.t.Fatalf("start %s: %v", cmd.Path, err)
	}
}

// stop ends a process with SIGTERM, then SIGKILL after 10 seconds, and
// waits for it.
func stop(cmd *exec.Cmd) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func (cp *controlPlane) write(name string, b []byte) {
	cp.t.Helper()
	if err := os.WriteFile(filepath.Join(cp.dir, name), b, 0o600); err != nil {
		cp.t.Fatal(err)
	}
}

// waitHTTP waits until the test's deadline (the machine is shared) for
// url to answer 200, then fails with the end of the component's log.
func (cp *controlPlane) waitHTTP(what, url, token string) {
	cp.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(testwait.Bound(cp.t))
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := os.ReadFile(filepath.Join(cp.dir, strings.Fields(what)[0]+".log"))
	if len(logs) > 4000 {
		logs = logs[len(logs)-4000:]
	}
	cp.t.Fatalf("%s not ready at %s (last: %s); log tail:\n%s", what, url, last, bytes.TrimSpace(logs))
}

// namespace creates a fresh namespace for one test.
func (cp *controlPlane) namespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "osm-test-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}
