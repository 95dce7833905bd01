//go:build !linux

package agenttest

import "syscall"

// reusePort does nothing: Envoy turns SO_REUSEPORT off for TCP listeners
// on macOS and Windows.
func reusePort(network, address string, c syscall.RawConn) error { return nil }
