// Package process runs the servers under test as processes of their own
// and reads what the kernel counts for them: a child that dies with the
// harness, its CPU-seconds and memory from /proc, the harness's file
// limit, and --pin's split of the CPUs between the servers and the fleet
// (taskset). It imports nothing of osm-vm or of the rest of the harness.
package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds is the user+system CPU time of pid so far.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("server CPU time: %w", err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64) // field 14
	stime, err2 := strconv.ParseFloat(f[12], 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / clockTicks, nil
}

// MemKiB reads a field (VmRSS, VmHWM) of /proc/<pid>/status, in KiB.
func MemKiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("server memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kib float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f kB", &kib); err != nil {
				return 0, fmt.Errorf("/proc/%d/status %s: %w", pid, field, err)
			}
			return kib, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// Child is a server process the harness started. It dies with the harness
// (Pdeathsig) and is killed by stop on every exit path.
type Child struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartChild starts path with args; stderr goes to logw. When readyPrefix is
// set, it waits for a stdout line starting with it and returns its fields.
func StartChild(ctx context.Context, path string, args, env []string, logw io.Writer, readyPrefix string) (*Child, []string, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out io.ReadCloser
	if readyPrefix != "" {
		var err error
		if out, err = cmd.StdoutPipe(); err != nil {
			return nil, nil, err
		}
	} else {
		cmd.Stdout = logw
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	c := &Child{cmd: cmd, exited: make(chan struct{})}
	lines := make(chan []string, 1)
	go func() {
		if out != nil {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), readyPrefix) {
					lines <- strings.Fields(sc.Text())
					break
				}
			}
			_, _ = io.Copy(io.Discard, out)
		}
		c.err = cmd.Wait()
		close(c.exited)
	}()
	if readyPrefix == "" {
		return c, nil, nil
	}
	select {
	case f := <-lines:
		return c, f, nil
	case <-c.exited:
		return nil, nil, fmt.Errorf("%s exited before it was ready: %v (its log is in the harness work directory)", path, c.err)
	case <-ctx.Done():
		c.Stop()
		return nil, nil, fmt.Errorf("%s: not ready: %w", path, ctx.Err())
	}
}

func (c *Child) PID() int { return c.cmd.Process.Pid }

func (c *Child) Alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, then SIGKILL after 5 s, and waits for the exit.
// kill sends the process SIGKILL and waits for it to exit (a crash, as
// the HA section's failover has it).
func (c *Child) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

func (c *Child) Stop() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// RaiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns it.
func RaiseNoFile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", r.Max, err)
		}
	}
	return r.Cur, nil
}

// ErrNotAvailable is why a server under test was not measured: it did
// not start, or what it needs (a binary) is missing.
var ErrNotAvailable = errors.New("not available")
