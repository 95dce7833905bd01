package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestDemo builds the binaries, runs the demo for 15s with -json and
// checks what a user is told to look at: bookbuyer bought from both
// bookstore versions about 80/20, bookthief was refused every time (and
// bookstore's RBAC, not only a missing route, refused it), all five
// proxies connected, and no process the demo started is left.
func TestDemo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the demo's loopback addresses 127.0.10.x and Pdeathsig are Linux")
	}
	if testing.Short() {
		t.Skip("builds seven binaries and runs the demo for 15s")
	}
	bin := t.TempDir()
	build(t, bin)

	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	err := run(ctx, []string{
		"-root", filepath.Join("..", ".."), "-bin", bin, "-state", filepath.Join(t.TempDir(), "demo"),
		"-api-address", free(), "-xds-address", free(), "-debug-address", free(),
		"-duration", "15s", "-json", "-proxy", "none",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v\nview:\n%s", err, stderr.String())
	}
	var got summary
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("summary: %v\n%s", err, stdout.String())
	}
	t.Logf("summary: %+v", got)

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
	if th.DeniedDirect != th.RefusedDirect {
		t.Errorf("bookthief's direct calls: %d denied by RBAC of %d refused, want all (last error %q)", th.DeniedDirect, th.RefusedDirect, th.LastError)
	}
	if got.Restocked == 0 {
		t.Error("bookwarehouse restocked nothing: bookstore's calls to it failed")
	}
	want := []string{"bookbuyer (grpc)", "bookstore-v1 (grpc)", "bookstore-v2 (grpc)", "bookthief (grpc)", "bookwarehouse (grpc)"}
	if !slices.Equal(got.Proxies, want) {
		t.Errorf("connected proxies %v, want %v", got.Proxies, want)
	}

	if len(got.Processes) != 11 { // server, 5 agents, 5 apps
		t.Errorf("demo started %d processes, want 11: %v", len(got.Processes), got.Processes)
	}
	for _, pid := range got.Processes {
		for _, target := range []int{pid, -pid} { // the process, and its group
			if err := syscall.Kill(target, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("kill(%d, 0) = %v after the demo ended, want ESRCH: something was left behind", target, err)
			}
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
