package main

import "syscall"

// sysProcAttr puts a child in its own process group (so the demo can end
// it and anything it starts) and kills it if the demo dies without
// cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
