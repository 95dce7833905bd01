//go:build race

package xds

// raceEnabled: the test binary runs under the race detector (about ten
// times slower), so the largest workloads are cut down.
const raceEnabled = true
