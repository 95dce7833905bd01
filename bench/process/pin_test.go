package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// allowedCPUs returns the Cpus_allowed_list of a /proc status file.
func allowedCPUs(t *testing.T, status string) string {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s: no Cpus_allowed_list", status)
	return ""
}

func TestPinning(t *testing.T) {
	p, err := NewPinning()
	if runtime.NumCPU() < 2 {
		if err == nil || !strings.Contains(err.Error(), "needs 2 CPUs") {
			t.Fatalf("NewPinning on %d CPU: %v, want refused", runtime.NumCPU(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// A server started through wrap runs on CPU 0 only.
	path, args := p.Wrap("/bin/sh", []string{"-c", "grep Cpus_allowed_list /proc/self/status"})
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v: %s", path, args, err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[1] != "0" {
		t.Errorf("a wrapped command runs on CPUs %q, want 0", out)
	}

	// Every thread of the harness leaves CPU 0; they are given every CPU
	// back when the test ends.
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	t.Cleanup(func() {
		var set unix.CPUSet
		for c := range runtime.NumCPU() {
			set.Set(c)
		}
		tasks, _ := filepath.Glob("/proc/self/task/*")
		for _, task := range tasks {
			var tid int
			fmt.Sscan(filepath.Base(task), &tid)
			_ = unix.SchedSetaffinity(tid, &set)
		}
		if got := allowedCPUs(t, "/proc/self/status"); got != all {
			t.Errorf("after the test the process runs on %s, want %s", got, all)
		}
	})
	if err := p.PinSelf(); err != nil {
		t.Fatal(err)
	}
	want := "1"
	if runtime.NumCPU() > 2 {
		want = fmt.Sprintf("1-%d", runtime.NumCPU()-1)
	}
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if _, err := os.Stat(task); err != nil {
			continue // the thread has exited
		}
		if got := allowedCPUs(t, filepath.Join(task, "status")); got != want {
			t.Errorf("thread %s runs on CPUs %s, want %s", filepath.Base(task), got, want)
		}
	}
}
