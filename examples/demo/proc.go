package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

// proc is one process the demo started, in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it exited
	err  error         // set before done is closed
}

// procs are the processes the demo runs; stop ends them all, newest first.
type procs struct {
	mu      sync.Mutex
	list    []*proc
	exited  chan *proc // every exit, for the main loop
	stats   map[string]bookapi.Stats
	started []int // every pid ever started, for the summary
}

func newProcs() *procs {
	return &procs{exited: make(chan *proc, 64), stats: map[string]bookapi.Stats{}}
}

// start runs cmd as name with its stderr (and stdout, unless statsOut)
// appended to logPath. With statsOut its stdout is read as bookapi.Stats
// lines.
func (ps *procs) start(name string, cmd *exec.Cmd, logPath string, statsOut bool) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	if statsOut {
		cmd.Stdout = &statsWriter{ps: ps}
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.started = append(ps.started, cmd.Process.Pid)
	ps.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
		ps.exited <- p
	}()
	return p, nil
}

// stop sends SIGTERM to every process group, newest first, waits up to
// grace for each, and SIGKILLs the group of any still running. It returns
// once every process has exited.
func (ps *procs) stop(grace time.Duration) {
	ps.mu.Lock()
	list := append([]*proc(nil), ps.list...)
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		p := list[i]
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
		// Anything the process left in its group goes too.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

func (ps *procs) pids() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return append([]int(nil), ps.started...)
}

func (ps *procs) setStats(s bookapi.Stats) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.stats[s.App] = s
}

func (ps *procs) stat(app string) bookapi.Stats {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.stats[app]
}

// statsWriter parses an app's stdout, one bookapi.Stats JSON per line.
type statsWriter struct {
	ps  *procs
	buf []byte
}

func (w *statsWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		var s bookapi.Stats
		if json.Unmarshal(w.buf[:i], &s) == nil && s.App != "" {
			w.ps.setStats(s)
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 {
		return 0, errors.New("stats line too long")
	}
	return len(p), nil
}
