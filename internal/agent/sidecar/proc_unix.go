//go:build unix

package sidecar

import (
	"os"
	"os/exec"
	"syscall"
)

// terminate asks the proxy to exit (SIGTERM: Envoy shuts down cleanly).
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// prepare makes the kernel SIGTERM the proxy if the agent dies (Linux), so
// a SIGKILLed agent leaves no orphan proxy behind: the restarted agent
// starts a fresh one on the same admin port.
func prepare(cmd *exec.Cmd) { setParentDeathSignal(cmd) }
