//go:build !linux

package xds

import (
	"net"
	"time"
)

// setTCPUserTimeout does nothing where TCP_USER_TIMEOUT does not exist
// (gRPC sets it on Linux only, too).
func setTCPUserTimeout(*net.TCPConn, time.Duration) {}
