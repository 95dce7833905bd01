package gctune

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"time"
)

// The garbage collector starts a cycle when the heap reaches its
// trigger, which is nearly always in the middle of work: the garbage
// comes from work. At 10,000 proxies a cycle marks 350-450 MB of heap and
// 270 MB of goroutine stacks, and one that started while an endpoint
// change was being pushed made the allocating goroutines help mark (0.28
// s of CPU) and the push reach its last proxy in 560-690 ms instead of
// 330 (osm-bench M2, issue 26's thirtieth round in the history of docs/performance.md).
// So when osm-server goes idle after a burst of work and the heap is
// nearer the next cycle's earliest trigger than the next burst would
// allocate (idleBurstMargin times the largest of the last idleBursts), it
// collects then, while the cores are free, and the next burst starts
// with the heap's whole headroom. A collection is only brought forward:
// by that margin and by the trigger's own (the runtime starts a cycle
// between 45/64 of the way from what is live to the goal and the goal),
// so over a steady churn of pushes the collector runs up to about a
// third more often, each cycle at idle. A server whose bursts are small
// against its headroom collects at idle only when the heap is that near
// anyway.
const (
	// idleTick is how often the runtime's heap figures are read. A tick
	// in which the server allocated less than idleAlloc is idle, one with
	// more busy: the work that makes garbage allocates (an endpoint
	// change pushed to 10,000 proxies and their ACKs, about 10 MB), an
	// idle server does not (HTTP/2 pings, a metrics scrape: tens of KiB). Allocation, not CPU, is read
	// because it is what starts a collection, and because the runtime's
	// own CPU figures count an idle processor as busy until it wakes.
	idleTick  = 100 * time.Millisecond
	idleAlloc = 1 << 20
	// idleBurstMargin: collect when the heap plus this many times the
	// expected burst's allocation reaches the next cycle's earliest
	// trigger (the next burst may allocate more than the last ones).
	idleBurstMargin = 1.5
)

// gcSample is what the idle collector reads of the runtime at a tick.
type gcSample struct {
	allocs uint64 // bytes allocated on the heap since the process started
	cycles uint64 // collections completed since the process started
	live   uint64 // bytes the last collection marked live
	goal   uint64 // the heap size at which the current cycle is meant to end
	// connecting: connections arrived since the last tick or handshakes
	// are in flight. A lull in a fleet's reconnecting is not idle: the
	// storm goes on, the governor has raised the target for it, and a
	// collection then (its heap is the largest) is paid in the storm.
	connecting bool
}

// trigger is the lowest heap size at which the runtime may start the next
// cycle: 45/64 of the way from what was live to the goal (runtime's
// minTriggerRatioNum; the pacer starts it between there and the goal, the
// more stacks and heap to scan, the earlier).
func (s gcSample) trigger() uint64 {
	if s.goal <= s.live {
		return s.goal
	}
	return s.live + (s.goal-s.live)/64*45
}

// idleBursts is how many of the last bursts' allocations are remembered:
// the next burst is expected to allocate as much as the largest of them.
const idleBursts = 8

// idleCollector collects at the end of a burst of work when the next one
// would likely start a collection (see idleTick).
type idleCollector struct {
	log     *slog.Logger
	read    func() gcSample // newGCSampler's
	collect func()          // runtime.GC
	prev    gcSample        // the last tick's sample
	// atCycle is what had been allocated when the last collection was
	// first seen to have ended: the heap holds what it left live and
	// what was allocated since. (The runtime's count of bytes in heap
	// objects would lag: a collection frees them as it sweeps.)
	atCycle uint64
	// busy: the last tick was busy; start is the sample before the
	// burst's first busy tick; bursts are the last bursts' allocations.
	busy   bool
	start  gcSample
	bursts [idleBursts]uint64
	next   int // where in bursts the next goes
}

// newIdleCollector reads the runtime and, when load is not nil, the
// server's connections (see gcSample.connecting).
func newIdleCollector(log *slog.Logger, load func() Load) *idleCollector {
	return &idleCollector{log: log, read: newGCSampler(load), collect: runtime.GC}
}

// newGCSampler returns a function that reads a gcSample from
// runtime/metrics and load (nil: never connecting).
func newGCSampler(load func() Load) func() gcSample {
	var arrived uint64
	if load != nil {
		l := load()
		arrived = l.Accepted + l.Opened
	}
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/goal:bytes"},
	}
	return func() gcSample {
		metrics.Read(s)
		g := gcSample{
			allocs: s[0].Value.Uint64(),
			cycles: s[1].Value.Uint64(),
			live:   s[2].Value.Uint64(),
			goal:   s[3].Value.Uint64(),
		}
		if load != nil {
			l := load()
			g.connecting = l.Accepted+l.Opened != arrived || l.Handshaking > 0
			arrived = l.Accepted + l.Opened
		}
		return g
	}
}

// observe starts from s: what the runtime says now, with no burst under
// way.
func (c *idleCollector) observe(s gcSample) {
	c.prev, c.atCycle, c.busy = s, s.allocs, false
}

// step takes a tick's sample and reports whether to collect now: the
// tick is idle (it allocated little and no connection arrived or is in
// its handshake), the one before it was busy, and the heap plus
// idleBurstMargin times the largest recent burst reaches the next cycle's
// earliest trigger. heap is the heap's estimated size and expected what
// the next burst is expected to allocate, both 0 unless a burst just
// ended.
func (c *idleCollector) step(s gcSample) (collect bool, heap, expected uint64) {
	prev := c.prev
	c.prev = s
	if s.cycles != prev.cycles {
		c.atCycle = prev.allocs // the cycle ended during the tick
	}
	if s.allocs-prev.allocs >= idleAlloc || s.connecting {
		if !c.busy {
			c.busy, c.start = true, prev
		}
		return false, 0, 0
	}
	if !c.busy {
		return false, 0, 0
	}
	c.busy = false
	if s.cycles != c.start.cycles {
		// A collection ran during the burst: it was larger than the
		// heap's headroom (a fleet connecting), or the heap was already
		// near its trigger. Either way it says nothing of what fits.
		return false, 0, 0
	}
	c.bursts[c.next] = s.allocs - c.start.allocs
	c.next = (c.next + 1) % idleBursts
	for _, b := range c.bursts {
		expected = max(expected, b)
	}
	heap = s.live + (s.allocs - c.atCycle)
	return float64(heap)+idleBurstMargin*float64(expected) >= float64(s.trigger()), heap, expected
}

// run reads the runtime at each tick until ctx is done.
func (c *idleCollector) run(ctx context.Context, ticks <-chan time.Time) error {
	c.observe(c.read())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
		s := c.read()
		collect, heap, expected := c.step(s)
		if !collect {
			continue
		}
		c.collect()
		c.observe(c.read())
		c.log.Debug("idle after a burst of work with the heap near its next collection: collected",
			"heap_bytes", heap, "next_burst_bytes", expected, "trigger_bytes", s.trigger(), "goal_bytes", s.goal, "live_after_bytes", c.prev.live)
	}
}
