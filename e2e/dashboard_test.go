package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	meshtypes "github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// TestDashboardInChromium loads the dashboard of a real osm-server running
// the bookstore mesh, with a connected proxy, in headless Chromium driven by
// playwright-core (e2e/browser/dashboard.mjs): the graph shows bookbuyer ->
// bookstore and not bookthief -> bookstore, a split changed with
// `osm-server apply` appears without a reload, bookstore's failure
// handling shows the policy that set each part, the backend its caller's
// Envoy ejected and that its proxyless caller reports none, and a
// screenshot is saved
// in the test's artifact directory (go test -artifacts keeps it).
//
// It needs Debian's chromium and the npm packages of e2e/browser
// (hack/install-playwright.sh, found through OSM_PLAYWRIGHT_DIR); make test
// installs both, and the test fails without them.
func TestDashboardInChromium(t *testing.T) {
	pwDir, node := browserTools(t)
	dir := t.TempDir()
	bin := buildBinaries(t, dir, "osm-server", "osm-provider-static")
	api, xdsAddr, _, serverDir := writeServerConfig(t, dir, bin)
	dashboardURL := startDashboardServer(t, dir, bin)
	osm := adminCLI{bin: bin, api: api, dataDir: serverDir}
	osm.apply(t, "../examples/bookstore/mesh.yaml")
	xs := xdstest.Server{API: api, XDS: xdsAddr, DataDir: serverDir}
	buyer := meshtypes.MeshService{Namespace: "default", Name: "bookbuyer"}
	buyerCert := xs.Enroll(t, buyer)
	xs.Connect(t, buyerCert, "127.0.0.1")
	// Failure handling: a policy on bookstore, a backend its Envoy caller
	// reports ejected through the agent API (as osm-agent does), and a
	// proxyless caller, which reports none.
	xs.Apply(t, `apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: bookstore, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: bookstore}]
  outlierDetection: {consecutiveGatewayErrors: 3}
`)
	caPEM, err := os.ReadFile(filepath.Join(serverDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := meshclient.SendEjectionReport(t.Context(), "https://"+api, caPEM, buyerCert, meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{
		{Cluster: "default/bookstore", Hosts: []string{"127.0.0.9:14001"}},
	}}); err != nil {
		t.Fatal(err)
	}
	xs.ConnectGRPC(t, xs.Enroll(t, buyer), "127.0.0.2")

	splitFile, _ := filepath.Abs("../examples/bookstore/split-50-50.yaml")
	applyCmd, _ := json.Marshal(osm.cmd("apply", "-f", splitFile))
	shot := filepath.Join(t.ArtifactDir(), "dashboard.png")
	runBrowser(t, node, "browser/dashboard.mjs",
		"PLAYWRIGHT_DIR="+pwDir,
		"DASHBOARD_URL="+dashboardURL+"#token="+osm.token(t),
		"APPLY="+string(applyCmd),
		"SCREENSHOT="+shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	if dst := os.Getenv("OSM_DASHBOARD_SCREENSHOT"); dst != "" {
		// For the docs: OSM_DASHBOARD_SCREENSHOT=$PWD/docs/dashboard.png.
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// browserTools returns the directory of playwright-core's node_modules
// and node, and fails the test when Chromium, playwright-core or node are
// missing (make test-deps installs them).
func browserTools(t *testing.T) (pwDir, node string) {
	t.Helper()
	pwDir = os.Getenv("OSM_PLAYWRIGHT_DIR")
	if pwDir == "" {
		out, err := exec.Command("../hack/install-playwright.sh").Output()
		if err != nil {
			t.Fatalf("playwright-core is not installed and hack/install-playwright.sh failed: %v (run make test-deps)", err)
		}
		pwDir = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Fatal("/usr/bin/chromium not found: install Debian's chromium (make test-deps does)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node not found: install Debian's nodejs (make test-deps does)")
	}
	return pwDir, node
}

// startDashboardServer runs osm-server serve with dir/server.yaml until
// the test ends and returns the dashboard URL it logs.
func startDashboardServer(t *testing.T, dir, bin string) string {
	t.Helper()
	serverLog := &testlog.Buffer{}
	server := exec.Command(filepath.Join(bin, "osm-server"), "serve", "--config", filepath.Join(dir, "server.yaml"))
	server.Stdout, server.Stderr = serverLog, serverLog
	server.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		server.Process.Kill()
		server.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", serverLog)
		}
	})
	waitLog(t, "osm-server up", serverLog, func(s string) bool {
		return strings.Contains(s, "xDS listening") && strings.Contains(s, "HTTPS API listening")
	})
	// osm-server logs where the dashboard is.
	m := regexp.MustCompile(`url=(http://\S+/dashboard/)`).FindStringSubmatch(serverLog.String())
	if m == nil {
		t.Fatalf("osm-server logged no dashboard URL:\n%s", serverLog)
	}
	return m[1]
}

// adminCLI runs osm-server's admin commands against a running server.
type adminCLI struct{ bin, api, dataDir string }

// cmd is the command line of osm-server args against the server.
func (a adminCLI) cmd(args ...string) []string {
	return append([]string{filepath.Join(a.bin, "osm-server")}, append(args, "--server", "https://"+a.api, "--data-dir", a.dataDir)...)
}

// apply applies the files (paths relative to e2e/ or absolute).
func (a adminCLI) apply(t *testing.T, files ...string) {
	t.Helper()
	args := []string{"apply"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	cmd := a.cmd(args...)
	if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("osm-server apply: %v\n%s", err, out)
	}
}

// token is the admin token the server wrote.
func (a adminCLI) token(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// runBrowser runs a playwright script of e2e/browser with env added and
// returns its output; the test fails if it fails.
func runBrowser(t *testing.T, node, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("%s in Chromium failed: %v", script, err)
	}
	return string(out)
}
