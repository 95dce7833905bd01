package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
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
