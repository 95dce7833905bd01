package xds

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// userTimeoutOf reads c's TCP_USER_TIMEOUT, in milliseconds.
func userTimeoutOf(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		v, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

// TestHandshakeListenerSetsUserTimeout: gRPC sets TCP_USER_TIMEOUT only on
// a *net.TCPConn, so the listener that wraps each connection sets it.
func TestHandshakeListenerSetsUserTimeout(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := handshakeListener{Listener: inner, idle: time.Second, userTimeout: 7 * time.Second}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", inner.Addr().String()); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := userTimeoutOf(t, c.(*handshakeConn).Conn.(*net.TCPConn))
	if got != 7000 {
		t.Errorf("TCP_USER_TIMEOUT = %d ms, want 7000", got)
	}
}
