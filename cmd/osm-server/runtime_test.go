package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1024", 1024},
		{"512B", 512},
		{"64KiB", 64 << 10},
		{"3GiB", 3 << 30},
		{" 1536 MiB ", 1536 << 20},
		{"2TiB", 2 << 40},
	} {
		if got, err := parseBytes(tc.in); err != nil || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "0", "1.5GiB", "3GB", "9999999TiB"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d; want an error", in, got)
		}
	}
}

// restoreRuntime puts the test binary's GC settings back after a test
// that changes them.
func restoreRuntime(t *testing.T) {
	gc := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	debug.SetGCPercent(gc)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

func TestApplyRuntimeFromConfig(t *testing.T) {
	restoreRuntime(t)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	cfg := defaultConfig()
	cfg.GCPercent, cfg.MemoryLimit = 30, 2<<30
	got := applyRuntime(discardLogger(), cfg)
	if got.GCPercent != 30 || got.MemoryLimit != 2<<30 || got.Source != "gcPercent, memoryLimit" {
		t.Errorf("applyRuntime = %+v; want 30%%, 2 GiB from the config keys", got)
	}
	if gc := debug.SetGCPercent(-1); gc != 30 {
		t.Errorf("runtime GC percent = %d, want 30", gc)
	}
	if limit := debug.SetMemoryLimit(-1); limit != 2<<30 {
		t.Errorf("runtime memory limit = %d, want %d", limit, int64(2<<30))
	}

	// The default: gcPercent 50, no limit.
	got = applyRuntime(discardLogger(), defaultConfig())
	if got.GCPercent != defaultGCPercent || got.MemoryLimit != math.MaxInt64 {
		t.Errorf("applyRuntime(defaults) = %+v; want %d%%, no limit", got, defaultGCPercent)
	}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		t.Errorf("runtime memory limit = %d, want none", limit)
	}
}

func TestApplyRuntimeEnvironmentWins(t *testing.T) {
	restoreRuntime(t)
	// The runtime read GOGC and GOMEMLIMIT at start; stand in for that.
	t.Setenv("GOGC", "80")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(80)
	debug.SetMemoryLimit(1 << 30)
	cfg := defaultConfig()
	cfg.MemoryLimit = 4 << 30
	got := applyRuntime(discardLogger(), cfg)
	if got.GCPercent != 80 || got.MemoryLimit != 1<<30 || got.Source != "GOGC, GOMEMLIMIT" {
		t.Errorf("applyRuntime = %+v; want GOGC's 80%% and GOMEMLIMIT's 1 GiB", got)
	}
	if gc := debug.SetGCPercent(-1); gc != 80 {
		t.Errorf("runtime GC percent = %d, want GOGC's 80", gc)
	}
}

func TestGCGovernorFollowsBursts(t *testing.T) {
	var opened atomic.Uint64
	var mu sync.Mutex
	var set []int
	collected := 0
	g := &gcGovernor{
		log: discardLogger(), steady: 50, opened: opened.Load,
		setGC: func(p int) int {
			mu.Lock()
			defer mu.Unlock()
			set = append(set, p)
			return 0
		},
		collect: func() {
			mu.Lock()
			defer mu.Unlock()
			collected++
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time) // unbuffered: a send waits for the previous tick's work
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, ticks) }()
	ticks <- time.Now() // run has read the count it starts from
	// Each step: streams opened before the tick.
	steps := []uint64{
		3,                // a few connects: no burst
		burstStreams,     // a burst starts
		burstStreams * 4, // goes on
		1,                // quiet 1
		burstStreams,     // busy again: the quiet count starts over
		0, 0, 0,          // quiet 1-3
		0,                // quiet 4: the burst is over
		0,                // steady
		burstStreams - 1, // below the rate: steady
	}
	for _, n := range steps {
		opened.Add(n)
		ticks <- time.Now()
	}
	ticks <- time.Now() // the last step's tick is handled once this one is taken
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{burstGCPercent, 50}; !slices.Equal(set, want) {
		t.Errorf("targets set %v, want %v", set, want)
	}
	if collected != 1 {
		t.Errorf("collections forced: %d, want 1 (when the burst ended)", collected)
	}
}

func TestGCGovernorRestoresOnStop(t *testing.T) {
	var opened atomic.Uint64
	var set []int
	g := &gcGovernor{log: discardLogger(), steady: 40, opened: opened.Load,
		setGC: func(p int) int { set = append(set, p); return 0 }, collect: func() {}}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, ticks) }()
	ticks <- time.Now() // run has read the count it starts from
	opened.Add(burstStreams)
	ticks <- time.Now()
	ticks <- time.Now() // the burst's tick is handled
	cancel()
	<-done
	if want := []int{burstGCPercent, 40}; !slices.Equal(set, want) {
		t.Errorf("targets set %v, want %v (the steady target restored when run returns)", set, want)
	}
}

func TestNewGCGovernor(t *testing.T) {
	opened := func() uint64 { return 0 }
	for _, tc := range []struct {
		name string
		s    runtimeSettings
		want bool
	}{
		{"the default target", runtimeSettings{GCPercent: 50, Source: "gcPercent"}, true},
		{"GOGC decides", runtimeSettings{GCPercent: 50, Source: "GOGC"}, false},
		{"collector off", runtimeSettings{GCPercent: -1, Source: "gcPercent"}, false},
		{"already at the burst's target", runtimeSettings{GCPercent: burstGCPercent, Source: "gcPercent"}, false},
		{"above it", runtimeSettings{GCPercent: 200, Source: "gcPercent, memoryLimit"}, false},
	} {
		if got := newGCGovernor(discardLogger(), tc.s, opened) != nil; got != tc.want {
			t.Errorf("%s: governor %t, want %t", tc.name, got, tc.want)
		}
	}
}
