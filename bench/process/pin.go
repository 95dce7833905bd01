package process

import (
	"errors"
	"fmt"

	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pinning puts the servers on CPU 0 and the harness, which is the
// simulated fleet, on the other CPUs (--pin). Sharing two cores, the fleet
// and the server interleave differently in every run, and the server's
// CPU figures move by ±15% with it (docs/performance.md); on its own core
// the server's figures measure the server. Times grow: each side has
// fewer cores.
type Pinning struct {
	serverCPUs string // taskset's list
	taskset    string // its path
}

// NewPinning checks that Pinning can be done here: Linux, two CPUs or
// more, and taskset(1) (util-linux) to start the servers with.
func NewPinning() (*Pinning, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("--pin: Linux only")
	}
	if runtime.NumCPU() < 2 {
		return nil, fmt.Errorf("--pin: needs 2 CPUs or more, this machine has %d", runtime.NumCPU())
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return nil, fmt.Errorf("--pin: taskset not found (apt-get install util-linux): %w", err)
	}
	return &Pinning{serverCPUs: "0", taskset: ts}, nil
}

// PinSelf moves every thread of this process to CPUs 1..N-1; threads
// started later inherit it from the thread that starts them.
func (p *Pinning) PinSelf() error {
	var set unix.CPUSet
	for c := 1; c < runtime.NumCPU(); c++ {
		set.Set(c)
	}
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(filepath.Base(t))
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("--pin: set the harness's thread %d on CPUs 1-%d: %w", tid, runtime.NumCPU()-1, err)
		}
	}
	return nil
}

// Wrap returns the command that runs path with args on the servers' CPU
// (path and args themselves when p is nil). taskset execs path, so the
// process keeps its pid.
func (p *Pinning) Wrap(path string, args []string) (string, []string) {
	if p == nil {
		return path, args
	}
	return p.taskset, append([]string{"-c", p.serverCPUs, path}, args...)
}

// Note is the table's and the JSON's word on it.
func (p *Pinning) Note() string {
	fleet := "CPU 1"
	if n := runtime.NumCPU(); n > 2 {
		fleet = fmt.Sprintf("CPUs 1-%d", n-1)
	}
	return fmt.Sprintf("pinned (--pin): the server on CPU %s, the harness and its fleet on %s", p.serverCPUs, fleet)
}
