//go:build !linux

package main

import "syscall"

// sysProcAttr puts a child in its own process group, so the demo can end
// it and anything it starts.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
