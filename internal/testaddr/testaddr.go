// Package testaddr picks loopback addresses for servers that tests start
// in other processes. It is test support: only _test.go files, other
// test-support packages and the benchmark harness (bench/cmd/osm-bench, which
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

// The ports Free hands out: below the kernel's ephemeral range
// (32768-60999 by default). A port from the ephemeral range (what
// listening on port 0 gives) may be taken, between the test's pick and the
// server's bind, as the source port of any connection on the machine, and
// tests run beside others that connect all the time.
const (
	firstPort = 10000
	ports     = 22000
	blockSize = 500 // ports per block a process claims (44 blocks)
)

// given holds the ports Free returned in this process: each is free when
// picked but not bound until the test's server starts, so a second pick
// could return it again (a replica's debug address and another's API
// address, both refused but one). blocks are the port blocks this process
// holds (see claimBlock): other processes that use this package pick
// outside them, so a test binary's pick is not bound by another test
// binary running beside it in the time before its server binds.
var given struct {
	sync.Mutex
	ports  map[int]bool
	blocks []int
	used   int // ports handed out from blocks
	shared bool
}

// Free returns a 127.0.0.1 address with a port that is free now, was not
// returned before in this process, and lies in a block of ports this
// process holds, so that no other process using this package picks it.
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
		port, err := candidate()
		if err != nil {
			return "", err
		}
		if given.ports[port] {
			continue
		}
		given.ports[port] = true // tried: not offered again, free or not
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr, nil
	}
	return "", errors.New("no free port on 127.0.0.1 between 10000 and 31999 in 200 tries")
}

// candidate returns a port of a block this process holds, claiming another
// block when those it holds are used up; when no block can be claimed (all
// held by other processes, or no lock files on this system) it returns any
// port of the range, as before blocks existed.
func candidate() (int, error) {
	if !given.shared && given.used >= len(given.blocks)*blockSize {
		b, ok := claimBlock()
		if ok {
			given.blocks = append(given.blocks, b)
		} else {
			given.shared = true
		}
	}
	if given.shared {
		return firstPort + rand.IntN(ports), nil
	}
	// Ports of the held blocks in turn, from a random start in each, so
	// that a rerun does not reuse the ports a stopped server left in
	// TIME_WAIT.
	i := given.used
	given.used++
	b := given.blocks[i/blockSize]
	return firstPort + b*blockSize + (i+blockOffset(b))%blockSize, nil
}

var offsets = map[int]int{}

func blockOffset(b int) int {
	o, ok := offsets[b]
	if !ok {
		o = rand.IntN(blockSize)
		offsets[b] = o
	}
	return o
}

// FreePort is Free's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(Free(t))
	n, _ := strconv.Atoi(p)
	return n
}
