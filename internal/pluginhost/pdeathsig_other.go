//go:build !linux

package pluginhost

import "os/exec"

// setParentDeathSignal is Linux-only; elsewhere the plugin SDK exits when
// its parent process changes.
func setParentDeathSignal(*exec.Cmd) {}
