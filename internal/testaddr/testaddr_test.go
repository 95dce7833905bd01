package testaddr

import "testing"

// Free never hands out a port twice in a process: 2,000 picks from 22,000
// ports would repeat some ~90 times by chance.
func TestFreeNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		a := Free(t)
		if seen[a] {
			t.Fatalf("Free returned %s twice", a)
		}
		seen[a] = true
	}
}
