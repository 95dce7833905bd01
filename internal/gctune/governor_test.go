package gctune

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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
	cfg := Config{GCPercent: DefaultGCPercent}
	cfg.GCPercent, cfg.MemoryLimit = 30, 2<<30
	got := Apply(discardLogger(), cfg)
	if got.GCPercent != 30 || got.MemoryLimit != 2<<30 || got.Source != "gcPercent, memoryLimit" {
		t.Errorf("Apply = %+v; want 30%%, 2 GiB from the config keys", got)
	}
	if gc := debug.SetGCPercent(-1); gc != 30 {
		t.Errorf("runtime GC percent = %d, want 30", gc)
	}
	if limit := debug.SetMemoryLimit(-1); limit != 2<<30 {
		t.Errorf("runtime memory limit = %d, want %d", limit, int64(2<<30))
	}

	// The default: gcPercent 50, no limit.
	got = Apply(discardLogger(), Config{GCPercent: DefaultGCPercent})
	if got.GCPercent != DefaultGCPercent || got.MemoryLimit != math.MaxInt64 {
		t.Errorf("Apply(defaults) = %+v; want %d%%, no limit", got, DefaultGCPercent)
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
	cfg := Config{GCPercent: DefaultGCPercent}
	cfg.MemoryLimit = 4 << 30
	got := Apply(discardLogger(), cfg)
	if got.GCPercent != 80 || got.MemoryLimit != 1<<30 || got.Source != "GOGC, GOMEMLIMIT" {
		t.Errorf("Apply = %+v; want GOGC's 80%% and GOMEMLIMIT's 1 GiB", got)
	}
	if gc := debug.SetGCPercent(-1); gc != 80 {
		t.Errorf("runtime GC percent = %d, want GOGC's 80", gc)
	}
}

// recorder is a gcGovernor's runtime, recorded.
type recorder struct {
	mu        sync.Mutex
	set       []int
	collected int
	now       time.Time
}

func (r *recorder) governor(steady int, load func() Load) *gcGovernor {
	return &gcGovernor{
		log: discardLogger(), steady: steady, load: load,
		setGC: func(p int) int {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.set = append(r.set, p)
			return 0
		},
		collect: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.collected++
		},
		now: func() time.Time {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.now
		},
	}
}

func (r *recorder) advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
}

// runGovernor runs the governor newGov returns, opening before each tick
// the streams of one step, and returns once the last step's tick was
// handled and run returned. Each step's streams are opened only after the
// previous tick's count was read.
func runGovernor(t *testing.T, newGov func(load func() Load) *gcGovernor, steps []uint64, between func(i int)) {
	t.Helper()
	loads := make([]Load, len(steps))
	for i, n := range steps {
		loads[i] = Load{Opened: n}
	}
	runGovernorLoads(t, newGov, loads, between)
}

// runGovernorLoads is runGovernor with each step's connections accepted
// and streams opened (added to the counts) and handshakes in flight (as
// they are after it).
func runGovernorLoads(t *testing.T, newGov func(load func() Load) *gcGovernor, steps []Load, between func(i int)) {
	t.Helper()
	var mu sync.Mutex
	var count Load
	read := make(chan struct{})
	g := newGov(func() Load {
		mu.Lock()
		l := count
		mu.Unlock()
		read <- struct{}{}
		return l
	})
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- g.run(ctx, ticks) }()
	<-read // the count it starts from
	for i, step := range steps {
		if between != nil {
			between(i)
		}
		mu.Lock()
		count.Accepted += step.Accepted
		count.Opened += step.Opened
		count.Handshaking = step.Handshaking
		mu.Unlock()
		ticks <- time.Now()
		<-read
	}
	ticks <- time.Now() // taken once the last step's tick is handled
	<-read
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func quietTicks(n int) []uint64 { return make([]uint64, n) }

func TestGCGovernorFollowsBursts(t *testing.T) {
	r := &recorder{now: time.Unix(1e9, 0)}
	steps := []uint64{
		3,                 // a few connects: no burst
		burstStreams - 1,  // below the rate: no burst
		burstStreams,      // a burst starts
		releaseMinStreams, // goes on: big enough to give its heap back
		quietStreams - 1,  // quiet 1
		quietStreams,      // busy again (a storm slowed down): the quiet count starts over
	}
	steps = append(steps, quietTicks(burstQuietTicks-1)...)   // quiet, not yet long enough
	steps = append(steps, 0)                                  // the burst is over
	steps = append(steps, quietTicks(releaseQuietTicks)...)   // no stream opens: its heap is given back
	steps = append(steps, burstStreams-1, quietStreams, 0, 0) // steady
	runGovernor(t, func(load func() Load) *gcGovernor { return r.governor(50, load) }, steps, nil)
	if want := []int{burstGCPercent, 50}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v", r.set, want)
	}
	if r.collected != 1 {
		t.Errorf("memory released %d times, want 1 (when the burst ended)", r.collected)
	}
}

// Bursts ending less than releaseEvery apart restore the target, and
// release memory only once.
func TestGCGovernorReleasesAtMostEveryMinute(t *testing.T) {
	r := &recorder{now: time.Unix(1e9, 0)}
	burst := append([]uint64{releaseMinStreams}, quietTicks(burstQuietTicks+releaseQuietTicks)...)
	var steps []uint64
	for range 3 {
		steps = append(steps, burst...)
	}
	runGovernor(t, func(load func() Load) *gcGovernor { return r.governor(50, load) }, steps, func(i int) {
		if i == 2*len(burst) { // the third burst ends a minute after the first
			r.advance(releaseEvery)
		}
	})
	if want := []int{burstGCPercent, 50, burstGCPercent, 50, burstGCPercent, 50}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v", r.set, want)
	}
	if r.collected != 2 {
		t.Errorf("memory released %d times, want 2 (first burst, and third, a minute later)", r.collected)
	}
}

// A storm slowed down by a loaded machine ends its burst while streams
// still open: the target is restored, and the heap is given back only once
// no stream opens.
func TestGCGovernorReleasesOnlyWhenNoStreamOpens(t *testing.T) {
	r := &recorder{now: time.Unix(1e9, 0)}
	steps := []uint64{releaseMinStreams}
	for range burstQuietTicks + 6 {
		steps = append(steps, quietStreams-1) // slow: under the rate that ends a burst
	}
	steps = append(steps, quietTicks(releaseQuietTicks)...)
	collectedBefore := -1
	runGovernor(t, func(load func() Load) *gcGovernor { return r.governor(50, load) }, steps, func(i int) {
		if i == len(steps)-releaseQuietTicks {
			r.mu.Lock()
			collectedBefore = r.collected
			r.mu.Unlock()
		}
	})
	if want := []int{burstGCPercent, 50}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v", r.set, want)
	}
	if collectedBefore != 0 || r.collected != 1 {
		t.Errorf("memory released %d times while streams still opened, %d in all; want 0, then 1 once none opened", collectedBefore, r.collected)
	}
}

// A burst of a few hundred streams (a scale-out, osm-bench's M5 joins)
// raises and restores the target but gives nothing back: the collection
// would cost its joins' latency for little memory.
func TestGCGovernorSmallBurstKeepsItsHeap(t *testing.T) {
	r := &recorder{now: time.Unix(1e9, 0)}
	steps := []uint64{burstStreams, burstStreams, releaseMinStreams - 2*burstStreams - 1}
	steps = append(steps, quietTicks(burstQuietTicks+releaseQuietTicks+2)...)
	runGovernor(t, func(load func() Load) *gcGovernor { return r.governor(50, load) }, steps, nil)
	if want := []int{burstGCPercent, 50}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v", r.set, want)
	}
	if r.collected != 0 {
		t.Errorf("memory released %d times after a burst of %d streams, want 0", r.collected, releaseMinStreams-1)
	}
}

// A reconnect storm: every connection is accepted at once, and their
// handshakes end seconds later, in waves with gaps (two cores share them).
// The target is raised at the accepts, kept through the gaps while
// handshakes are in flight, and restored once none is.
func TestGCGovernorFollowsAStormsHandshakes(t *testing.T) {
	r := &recorder{now: time.Unix(1e9, 0)}
	const n = 10000
	steps := []Load{{Accepted: n, Handshaking: n}} // the storm arrives
	for range burstQuietTicks + 4 {
		steps = append(steps, Load{Handshaking: n}) // no stream open yet
	}
	steps = append(steps, Load{Opened: n / 2, Handshaking: n / 2}) // a wave
	for range burstQuietTicks + 4 {
		steps = append(steps, Load{Handshaking: n / 2}) // a gap
	}
	steps = append(steps, Load{Opened: n / 2}) // the last wave
	var setDuring []int
	for range burstQuietTicks + releaseQuietTicks {
		steps = append(steps, Load{})
	}
	runGovernorLoads(t, func(load func() Load) *gcGovernor { return r.governor(50, load) }, steps, func(i int) {
		if i == len(steps)-burstQuietTicks-releaseQuietTicks {
			r.mu.Lock()
			setDuring = slices.Clone(r.set)
			r.mu.Unlock()
		}
	})
	if want := []int{burstGCPercent}; !slices.Equal(setDuring, want) {
		t.Errorf("targets set during the storm %v, want %v (raised at the accepts, kept while handshakes are in flight)", setDuring, want)
	}
	if want := []int{burstGCPercent, 50}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v", r.set, want)
	}
	if r.collected != 1 {
		t.Errorf("memory released %d times, want 1 (after the storm)", r.collected)
	}
}

func TestGCGovernorRestoresOnStop(t *testing.T) {
	r := &recorder{}
	runGovernor(t, func(load func() Load) *gcGovernor { return r.governor(40, load) }, []uint64{burstStreams}, nil)
	if want := []int{burstGCPercent, 40}; !slices.Equal(r.set, want) {
		t.Errorf("targets set %v, want %v (the steady target restored when run returns)", r.set, want)
	}
}

func TestNewGCGovernor(t *testing.T) {
	load := func() Load { return Load{} }
	for _, tc := range []struct {
		name string
		s    Settings
		want bool
	}{
		{"the default target", Settings{GCPercent: 50, Source: "gcPercent"}, true},
		{"GOGC decides", Settings{GCPercent: 50, Source: "GOGC"}, false},
		{"collector off", Settings{GCPercent: -1, Source: "gcPercent"}, false},
		{"already at the burst's target", Settings{GCPercent: burstGCPercent, Source: "gcPercent"}, false},
		{"above it", Settings{GCPercent: 2 * burstGCPercent, Source: "gcPercent, memoryLimit"}, false},
		{"Go's default, below it", Settings{GCPercent: 100, Source: "gcPercent"}, true},
	} {
		if got := newGCGovernor(discardLogger(), tc.s, load) != nil; got != tc.want {
			t.Errorf("%s: governor %t, want %t", tc.name, got, tc.want)
		}
	}
}
