//go:build !linux

package consulstore

import "syscall"

// setUserTimeout is Linux only; elsewhere keepalives alone find a dead
// peer.
func setUserTimeout(network, address string, c syscall.RawConn) error { return nil }
