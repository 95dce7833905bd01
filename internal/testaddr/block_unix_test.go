//go:build unix

package testaddr

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestBlocksAreHeldByOneProcess: a port this process was given lies in a
// block it holds, and another process can take neither that block's lock
// nor, through Free, a port of it.
func TestBlocksAreHeldByOneProcess(t *testing.T) {
	if b := os.Getenv("TESTADDR_CHILD_BLOCK"); b != "" {
		n, _ := strconv.Atoi(b)
		_, locked := lockBlock(blockDir(), n)
		fmt.Printf("locked=%v port=%d\n", locked, FreePort(t))
		return
	}
	port := FreePort(t)
	b := (port - firstPort) / blockSize
	given.Lock()
	holds := slices.Contains(given.blocks, b)
	given.Unlock()
	if !holds {
		t.Fatalf("port %d is in block %d, which this process does not hold (blocks %v)", port, b, given.blocks)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBlocksAreHeldByOneProcess$")
	cmd.Env = append(os.Environ(), "TESTADDR_CHILD_BLOCK="+strconv.Itoa(b))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var locked bool
	var childPort int
	for _, l := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(l, "locked=%t port=%d", &locked, &childPort); err == nil {
			break
		}
	}
	if childPort == 0 {
		t.Fatalf("child printed no port:\n%s", out)
	}
	if locked {
		t.Errorf("another process took the lock of block %d, which this process holds", b)
	}
	if got := (childPort - firstPort) / blockSize; got == b {
		t.Errorf("another process was given port %d, in block %d that this process holds", childPort, b)
	}
}
