//go:build unix && !linux

package sidecar

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere the service manager's
// process-group kill (systemd KillMode=control-group, launchd) covers it.
func setParentDeathSignal(*exec.Cmd) {}
