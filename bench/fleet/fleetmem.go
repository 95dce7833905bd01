package fleet

import (
	"bufio"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The fleet's collector. The fleet is this process: ten thousand
// simulated proxies in one Go heap, where the real fleet is ten thousand
// Envoys on as many machines, none of which collects anything. With Go's
// default collector the fleet collected 3 to 6 times in one reconnect
// storm (the storm allocates 1.5 GB in the fleet), which took 2.6 to 5.6 s
// of the fleet's 9 to 11 s of CPU; on two cores that the server shares
// with the fleet, a storm's time follows the CPU of both, so one
// collection more or fewer (half a second of wall time) moved a server's
// storm by 6%, more than the servers differ by. So the harness turns its
// collector off while it measures (GOGC=off) and bounds its heap instead
// (GOMEMLIMIT, debug.SetMemoryLimit): the runtime then collects only when
// the heap reaches the bound, and the harness collects before each fill
// and storm (and before an M2/M3 change that might reach it, see
// Collector), so that a window starts with the whole bound free and
// fits in it. The debug log's "fleet usage" lines show each window's
// collections.

// defaultFleetMemoryMiB is the bound when the machine has room for it: the
// Fleet holds up to 1 GB live at 11,000 connections, and its largest
// window allocates 1.5 GB.
const defaultFleetMemoryMiB = 6 << 10

// MemoryAuto is the --fleet-memory default: defaultFleetMemoryMiB,
// or a quarter of the machine's memory when that is less.
const MemoryAuto = -1

// MemoryMiB resolves --fleet-memory: auto is the default bound or a
// quarter of MemTotal, whichever is less; 0 stays 0 (the collector as
// GOGC and GOMEMLIMIT set it).
func MemoryMiB(flag int) (int, error) {
	if flag != MemoryAuto {
		return flag, nil
	}
	total, err := memTotalKiB()
	if err != nil {
		return 0, err
	}
	return min(defaultFleetMemoryMiB, int(total>>10)/4), nil
}

// SetMemory turns the collector off within mib MiB and returns what
// restores the collector as it was, and the report's word on it. With mib
// 0, or when GOGC or GOMEMLIMIT is set in the environment (the operator's
// choice), it changes nothing.
func SetMemory(mib int) (restore func(), note string) {
	if env := gcEnv(); env != "" {
		return func() {}, "fleet: collector as " + env + " sets it"
	}
	if mib <= 0 {
		return func() {}, "fleet: Go's default collector (--fleet-memory 0)"
	}
	oldPercent := debug.SetGCPercent(-1)
	oldLimit := debug.SetMemoryLimit(int64(mib) << 20)
	return func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	}, fmt.Sprintf("fleet: collector off within %d MiB (--fleet-memory), collected before each fill and storm", mib)
}

// gcEnv names the collector settings in the environment, "" if none.
func gcEnv() string {
	var set []string
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, ok := os.LookupEnv(k); ok {
			set = append(set, k+"="+v)
		}
	}
	return strings.Join(set, " ")
}

// memTotalKiB is /proc/meminfo's MemTotal.
func memTotalKiB() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("machine memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo MemTotal %q: %w", v, err)
			}
			return kib, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("/proc/meminfo: %w", err)
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal")
}
