package pluginhost

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel SIGKILL the plugin when the server
// dies, even by SIGKILL. The plugin SDK also exits when its parent changes,
// which covers the other platforms.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
