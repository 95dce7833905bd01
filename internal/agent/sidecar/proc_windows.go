package sidecar

import (
	"os"
	"os/exec"
)

// terminate kills the proxy: Windows has no SIGTERM. Drain, which runs
// first, is what makes the stop graceful.
func terminate(p *os.Process) error { return p.Kill() }

func prepare(*exec.Cmd) {}
