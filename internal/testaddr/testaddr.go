// Package testaddr picks loopback addresses for servers that tests start
// in other processes. It is test support: only _test.go files, other
// test-support packages and the benchmark harness (cmd/osm-bench, which
// starts servers in other processes too) import it.
package testaddr

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// given holds the ports Free returned in this process: each is free when
// picked but not bound until the test's server starts, so a second pick
// could return it again (a replica's debug address and another's API
// address, both refused but one).
var given struct {
	sync.Mutex
	ports map[int]bool
}

// Free returns a 127.0.0.1 address with a port that is free now, was not
// returned before in this process, and lies below the kernel's ephemeral
// range (32768-60999 by default). A port from
// the ephemeral range (what listening on port 0 gives) may be taken,
// between the test's pick and the server's bind, as the source port of any
// connection on the machine, and tests run beside others that connect all
// the time.
func Free(t testing.TB) string {
	t.Helper()
	addr, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Pick is Free for a program that is not a test: it returns the error
// Free fails the test with.
func Pick() (string, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	for range 200 {
		port := 10000 + rand.IntN(22000)
		if given.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		given.ports[port] = true
		return addr, nil
	}
	return "", errors.New("no free port on 127.0.0.1 between 10000 and 31999 in 200 tries")
}

// FreePort is Free's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(Free(t))
	n, _ := strconv.Atoi(p)
	return n
}
