//go:build unix

package testaddr

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// claimBlock takes an exclusive lock on one of the range's blocks of ports
// (a lock file per block in the temp directory) and holds it until the
// process exits, when the kernel releases it: a block is held by one live
// process at a time, and a killed test frees its block at once. It reports
// false when every block is held or no lock can be taken.
func claimBlock() (int, bool) {
	dir := blockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, false
	}
	n := ports / blockSize
	start := rand.IntN(n)
	for i := range n {
		b := (start + i) % n
		if f, ok := lockBlock(dir, b); ok {
			held = append(held, f) // kept open: the lock lasts as long as the process
			return b, true
		}
	}
	return 0, false
}

var held []*os.File

// lockBlock takes block b's lock, or reports false when another process
// holds it.
func lockBlock(dir string, b int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(dir, "block-"+strconv.Itoa(b)), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

func blockDir() string { return filepath.Join(os.TempDir(), "osm-vm-testaddr") }
