package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/testaddr"
)

func TestMain(m *testing.M) {
	agenttest.RunFakeEnvoyIfAsked() // the test binary doubles as the Envoy stand-in
	os.Exit(m.Run())
}

// TestDemo builds the binaries, runs the demo (runDemo) with -json and
// checks what a user is told to look at: bookbuyer bought from both
// bookstore versions about 80/20, bookthief was refused every time (and
// bookstore's RBAC, not only a missing route, refused it), all five
// proxies connected, and no process the demo started is left.
func TestDemo(t *testing.T) {
	got, _ := runDemo(t, "-proxy", "none")
	checkTraffic(t, got)
	want := []string{"bookbuyer (grpc)", "bookstore-v1 (grpc)", "bookstore-v2 (grpc)", "bookthief (grpc)", "bookwarehouse (grpc)"}
	if !slices.Equal(got.Proxies, want) {
		t.Errorf("connected proxies %v, want %v", got.Proxies, want)
	}
	checkProcesses(t, got, 11, nil) // server, 5 agents, 5 apps
	checkAgentMetrics(t, got, "bookbuyer", "bookstore-v1", "bookstore-v2", "bookthief", "bookwarehouse")
}

// checkAgentMetrics checks that every agent served its metrics (each on
// its machine's address: none collided on the one host).
func checkAgentMetrics(t *testing.T, got summary, agents ...string) {
	t.Helper()
	slices.Sort(agents)
	if !slices.Equal(got.AgentMetrics, agents) {
		t.Errorf("agents whose metrics answered %v, want every agent %v", got.AgentMetrics, agents)
	}
}

// TestDemoWithEnvoy runs the demo as it runs where envoy is on PATH, with
// the Envoy stand-in (agenttest) as Envoy: it binds every listener it is
// sent, as Envoy does, and NACKs when it cannot. The demo's traffic checks
// hold as without Envoy, the five Envoy machines connect, each Envoy
// binds and ACKs its listeners (nothing clashes with the apps or another
// Envoy on the one host), and no Envoy is left when the demo ends.
func TestDemoWithEnvoy(t *testing.T) {
	t.Setenv(agenttest.FakeEnvoyEnv, "1")
	t.Setenv(agenttest.FakeEnvoyCrashEnv, "")
	got, state := runDemo(t, "-proxy", "envoy", "-envoy-path", os.Args[0])
	checkTraffic(t, got)
	var want []string
	for _, m := range machines {
		want = append(want, m.service+" (envoy)", m.service+" (grpc)")
	}
	slices.Sort(want)
	if !slices.Equal(got.Proxies, want) {
		t.Errorf("connected proxies %v, want %v", got.Proxies, want)
	}
	pidRE := regexp.MustCompile(`\]\[(\d+)\]\[info\]\[fake\] loaded bootstrap`)
	var envoys []int
	for _, m := range machines {
		b, err := os.ReadFile(filepath.Join(state, m.service+"-envoy", "agent.log"))
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if !strings.Contains(log, "lds: ACKed version") || strings.Contains(log, "lds: rejecting") {
			t.Errorf("%s's Envoy did not bind and ACK its listeners; its agent's log:\n%s", m.service, log)
		}
		if inbound := "bound to " + m.envoyIP() + ":14001"; !strings.Contains(log, inbound) {
			t.Errorf("%s's Envoy log has no %q", m.service, inbound)
		}
		for _, sm := range pidRE.FindAllStringSubmatch(log, -1) {
			pid, _ := strconv.Atoi(sm[1])
			envoys = append(envoys, pid)
		}
	}
	if len(envoys) < len(machines) {
		t.Errorf("found %d Envoy pids in the logs, want at least %d", len(envoys), len(machines))
	}
	checkProcesses(t, got, 16, envoys) // server, 10 agents, 5 apps; Envoys are the agents' children
	var agents []string
	for _, m := range machines {
		agents = append(agents, m.service, m.service+"-envoy")
	}
	checkAgentMetrics(t, got, agents...)
}

// runDemo builds the binaries and runs the demo with -json and args until
// every bookbuyer bought 100 books and bookthief tried 50 times each way
// (-until-purchases; a busy machine takes longer, bounded by 3 minutes);
// it returns the summary and the state directory.
func runDemo(t *testing.T, args ...string) (summary, string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the demo's loopback addresses 127.0.10.x and Pdeathsig are Linux")
	}
	if testing.Short() {
		t.Skip("builds seven binaries and runs the demo until 100 purchases")
	}
	bin := t.TempDir()
	build(t, bin)

	state := filepath.Join(t.TempDir(), "demo")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	err := run(ctx, append([]string{
		"-root", filepath.Join("..", ".."), "-bin", bin, "-state", state,
		"-api-address", testaddr.Free(t), "-xds-address", testaddr.Free(t), "-debug-address", testaddr.Free(t),
		"-duration", "3m", "-until-purchases", "100", "-json",
		// The Go apps only, whatever is installed here; TestPolyglotDemo
		// (-tags polyglot) runs the Python and Node bookbuyers too.
		"-python", filepath.Join(t.TempDir(), "no-python"), "-node-modules", "",
	}, args...), &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v\nview:\n%s", err, stderr.String())
	}
	var got summary
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("summary: %v\n%s", err, stdout.String())
	}
	t.Logf("summary: %+v", got)
	if got.StoppedBy != "purchases" {
		t.Errorf("the demo stopped by %q, want by purchases: the traffic it shows did not all happen in 3 minutes", got.StoppedBy)
	}
	return got, state
}

// checkTraffic checks the demo's outcomes: the 80/20 split, bookthief
// refused both ways (directly by bookstore's RBAC), bookwarehouse restocked.
func checkTraffic(t *testing.T, got summary) {
	t.Helper()
	b := got.Bookbuyer
	if total := b.V1 + b.V2; total < 50 || b.V2 == 0 {
		t.Errorf("bookbuyer bought v1 %d, v2 %d: want at least 50 purchases from both versions", b.V1, b.V2)
	} else if share := float64(b.V1) / float64(total); share < 0.65 || share > 0.92 {
		t.Errorf("bookbuyer's v1 share = %.2f (v1 %d, v2 %d), want about 0.8 (0.65-0.92)", share, b.V1, b.V2)
	}
	if b.Errors > (b.V1+b.V2)/10 {
		t.Errorf("bookbuyer had %d errors in %d purchases, want under 10%%", b.Errors, b.V1+b.V2)
	}
	th := got.Bookthief
	if th.Stolen != 0 || th.RefusedMesh == 0 || th.RefusedDirect == 0 {
		t.Errorf("bookthief: stolen %d, refused through the mesh %d, directly %d: want nothing stolen and both ways refused", th.Stolen, th.RefusedMesh, th.RefusedDirect)
	}
	// Through the mesh bookthief is refused at once with PermissionDenied
	// (its refusal listener), not by a timeout: its calls have 1 s.
	if th.DeniedMesh == 0 || th.DeniedMesh < th.RefusedMesh*9/10 {
		t.Errorf("bookthief's mesh calls: %d PermissionDenied of %d refused, want (nearly) all (last error %q)", th.DeniedMesh, th.RefusedMesh, th.LastError)
	}
	if th.DeniedDirect != th.RefusedDirect {
		t.Errorf("bookthief's direct calls: %d denied by RBAC of %d refused, want all (last error %q)", th.DeniedDirect, th.RefusedDirect, th.LastError)
	}
	if got.Restocked == 0 {
		t.Error("bookwarehouse restocked nothing: bookstore's calls to it failed")
	}
}

// checkProcesses checks the demo started n processes and that none of
// them, their process groups, or the others pids given is left.
func checkProcesses(t *testing.T, got summary, n int, others []int) {
	t.Helper()
	if len(got.Processes) != n {
		t.Errorf("demo started %d processes, want %d: %v", len(got.Processes), n, got.Processes)
	}
	var targets []int
	for _, pid := range got.Processes {
		targets = append(targets, pid, -pid) // the process, and its group
	}
	for _, pid := range others {
		targets = append(targets, pid)
	}
	for _, target := range targets {
		if err := syscall.Kill(target, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kill(%d, 0) = %v after the demo ended, want ESRCH: something was left behind", target, err)
		}
	}
}

// build compiles the demo's binaries into dir, as make demo does into bin/.
func build(t *testing.T, dir string) {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatal("no go command to build the demo binaries")
		}
	}
	cmd := exec.Command(goBin, "build", "-o", dir,
		"../../cmd/osm-server", "../../cmd/osm-agent", "../../providers/static",
		"../bookstore/bookbuyer", "../bookstore/bookthief", "../bookstore/bookstore", "../bookstore/bookwarehouse")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(dir, "static"), filepath.Join(dir, "osm-provider-static")); err != nil {
		t.Fatal(err)
	}
}
