package xds

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is Linux's TCP_USER_TIMEOUT socket option.
const tcpUserTimeout = 0x12

// setTCPUserTimeout sets TCP_USER_TIMEOUT, as gRPC does on a *net.TCPConn
// it sees: unacknowledged data ends the connection after d.
func setTCPUserTimeout(c *net.TCPConn, d time.Duration) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d/time.Millisecond))
	})
}
