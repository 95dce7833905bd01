package fleet

import (
	"log/slog"
	"runtime/metrics"
	"syscall"
	"time"
)

// Usage is what this process (the fleet) has used so far: its CPU
// split into user and system time, its minor page faults, its collections
// and the bytes it allocated. The difference of two tells where a
// window's fleet CPU went (logSince); the debug log has it for the fill
// and the storms.
type Usage struct {
	user, sys   time.Duration
	faults      int64
	collections uint64
	allocated   uint64
	gcCPU       float64 // seconds of CPU the collector took (runtime/metrics' estimate)
}

func ReadUsage() Usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // RUSAGE_SELF on a valid struct does not fail
	s := []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
	}
	metrics.Read(s)
	return Usage{
		user:        time.Duration(ru.Utime.Nano()),
		sys:         time.Duration(ru.Stime.Nano()),
		faults:      ru.Minflt,
		collections: s[0].Value.Uint64(),
		allocated:   s[1].Value.Uint64(),
		gcCPU:       s[2].Value.Float64(),
	}
}

// LogSince logs at debug level what the fleet used since u, for window.
func (u Usage) LogSince(log *slog.Logger, window string) {
	now := ReadUsage()
	log.Debug("fleet usage", "window", window,
		"user_s", (now.user - u.user).Seconds(), "sys_s", (now.sys - u.sys).Seconds(),
		"minor_faults", now.faults-u.faults, "collections", now.collections-u.collections,
		"gc_cpu_s", now.gcCPU-u.gcCPU, "allocated_mib", (now.allocated-u.allocated)>>20)
}
