package gctune

import (
	"context"
	"runtime"
	"testing"
	"time"
)

const mib = 1 << 20

// idleRun drives an idleCollector's step through ticks, each adding
// alloc bytes (a tick below idleAlloc is idle), and says at which ticks
// it would have collected. The heap starts with live bytes left by a
// collection and a goal of goal; collect makes that collection happen at
// the tick the collector asks for it, leaving live bytes live again.
type idleRun struct {
	c *idleCollector
	s gcSample
}

func newIdleRun(live, goal uint64) *idleRun {
	r := &idleRun{c: &idleCollector{log: discardLogger()}, s: gcSample{allocs: 1000 * mib, cycles: 7, live: live, goal: goal}}
	r.c.observe(r.s)
	return r
}

// tick allocates alloc bytes and returns what step says.
func (r *idleRun) tick(alloc uint64) bool {
	r.s.allocs += alloc
	collect, _, _ := r.c.step(r.s)
	if collect {
		r.s.cycles++
		r.c.observe(r.s)
	}
	return collect
}

// burst is a burst of work allocating total bytes over busy ticks, then
// an idle tick; it returns whether the idle tick collected (a busy one
// never may).
func (r *idleRun) burst(t *testing.T, total uint64, busy int) bool {
	t.Helper()
	for range busy {
		if r.tick(total / uint64(busy)) {
			t.Fatal("collected in a busy tick")
		}
	}
	return r.tick(0)
}

func TestGCSampleTrigger(t *testing.T) {
	s := gcSample{live: 64 * mib, goal: 128 * mib}
	if got, want := s.trigger(), uint64(64*mib+45*mib); got != want {
		t.Errorf("trigger = %d; want %d (45/64 of the way from live to the goal)", got, want)
	}
	if s := (gcSample{live: 200 * mib, goal: 128 * mib}); s.trigger() != s.goal {
		t.Errorf("trigger with live above the goal = %d; want the goal", s.trigger())
	}
}

func TestIdleCollectorCollectsBeforeTheBurstThatWouldTrigger(t *testing.T) {
	// 400 MiB live, goal 592 MiB: the earliest trigger is at 535 MiB.
	r := newIdleRun(400*mib, 592*mib)
	trigger := r.s.trigger()
	for i := 0; ; i++ {
		heapBefore := r.s.live + (r.s.allocs - r.c.atCycle)
		collected := r.burst(t, 15*mib, 3)
		heap := heapBefore + 15*mib
		if want := heap+15*mib*3/2 >= trigger; collected != want {
			t.Fatalf("burst %d: heap %d MiB after it, trigger %d MiB: collected = %v; want %v", i, heap/mib, trigger/mib, collected, want)
		}
		if collected {
			if i != 7 { // 400 + 8*15 + 22.5 >= 535
				t.Fatalf("collected after burst %d; want after burst 7", i)
			}
			break
		}
		if i > 10 {
			t.Fatal("never collected")
		}
	}
	// The heap is back to what is live: the next bursts fit again.
	if r.burst(t, 15*mib, 3) {
		t.Fatal("collected right after a collection")
	}
}

func TestIdleCollectorIdleServer(t *testing.T) {
	// A heap at its trigger, but nothing busy: nothing to bring forward.
	r := newIdleRun(400*mib, 592*mib)
	r.s.allocs += 134 * mib
	r.c.observe(r.s)
	r.c.atCycle -= 134 * mib
	for i := range 50 {
		if r.tick(idleAlloc - 1) {
			t.Fatalf("tick %d: collected with no burst of work", i)
		}
	}
}

func TestIdleCollectorIgnoresBurstsWithACollection(t *testing.T) {
	// A fleet connecting: 2 GiB allocated, the runtime collecting many
	// times. It says nothing of the bursts after it.
	r := newIdleRun(20*mib, 30*mib)
	for range 20 {
		r.s.cycles++
		r.s.live += 20 * mib
		r.s.goal = r.s.live * 3 / 2
		r.tick(100 * mib)
	}
	if r.tick(0) {
		t.Fatal("collected after a burst the runtime already collected in")
	}
	// A small burst after it is expected again, not the fleet's.
	r.tick(10 * mib)
	if _, _, expected := r.c.step(r.s); expected != 10*mib {
		t.Fatalf("after the fleet's burst and one of 10 MiB, the next is expected to allocate %d MiB; want 10", expected/mib)
	}
}

func TestIdleCollectorHeapAfterARuntimeCollection(t *testing.T) {
	// The runtime collects during a quiet spell: the heap is what it
	// left live plus what was allocated since, however far the count of
	// allocations has gone.
	r := newIdleRun(400*mib, 592*mib)
	for range 6 {
		r.burst(t, 15*mib, 3)
	}
	r.s.cycles++
	r.s.live, r.s.goal = 410*mib, 607*mib
	r.tick(0)
	_, heap, _ := r.c.step(r.s)
	if heap != 0 {
		t.Fatalf("step on an idle tick after no burst reported a heap of %d", heap)
	}
	for range 3 {
		r.tick(5 * mib)
	}
	collect, heap, expected := r.c.step(r.s)
	if collect || heap != 410*mib+15*mib || expected != 15*mib {
		t.Fatalf("after the runtime's collection and a 15 MiB burst: collect %v, heap %d MiB, expected %d MiB; want false, 425, 15", collect, heap/mib, expected/mib)
	}
}

// TestIdleCollectorRun runs the collector against the real runtime: a
// burst that allocates more than the heap's headroom, then idle ticks,
// makes it collect once.
func TestIdleCollectorRun(t *testing.T) {
	collected := make(chan struct{}, 10)
	c := newIdleCollector(discardLogger(), nil)
	c.collect = func() {
		runtime.GC()
		collected <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan error, 1)
	runtime.GC()
	go func() { done <- c.run(ctx, ticks) }()
	s := c.read()
	headroom := s.trigger() - s.live
	var keep [][]byte
	for b := range 40 {
		// A burst of idleAlloc or more, below a tenth of the headroom,
		// one tick, then an idle tick.
		size := max(idleAlloc, int(headroom/10))
		keep = append(keep, make([]byte, size))
		ticks <- time.Now() // busy
		ticks <- time.Now() // idle: it may collect
		ticks <- time.Now() // taken once the idle tick was handled
		select {
		case <-collected:
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if b == 0 {
				t.Fatal("collected after the first burst: nothing said how large a burst is")
			}
			runtime.KeepAlive(keep)
			return
		default:
		}
	}
	cancel()
	<-done
	t.Fatalf("no collection after 40 bursts of a tenth of the heap's headroom (%d bytes)", headroom)
}

// TestIdleCollectorWaitsOutAConnectionStorm: a fleet reconnecting has
// ticks that allocate little (handshakes waiting on the cores), and the
// heap is then nearest its trigger; those ticks are not idle, so the
// collection waits for the end of the storm (osm-bench M6: two forced
// collections of 800 MB of heap inside one storm before this).
func TestIdleCollectorWaitsOutAConnectionStorm(t *testing.T) {
	r := newIdleRun(400*mib, 592*mib)
	// A burst that leaves the heap past what the next would need.
	for range 3 {
		r.tick(45 * mib)
	}
	for i := range 5 {
		r.s.connecting = true
		if r.tick(idleAlloc / 4) {
			t.Fatalf("lull %d of the storm: collected while connections arrive", i)
		}
	}
	r.s.connecting = false
	if !r.tick(0) {
		t.Fatal("no collection once the storm is over, with the heap past its trigger")
	}
}

// TestGCSamplerConnecting: a sample is connecting when connections or
// streams arrived since the last one, or handshakes are in flight.
func TestGCSamplerConnecting(t *testing.T) {
	var l Load
	read := newGCSampler(func() Load { return l })
	if read().connecting {
		t.Fatal("connecting with nothing arriving")
	}
	l.Accepted++
	if !read().connecting {
		t.Fatal("a connection accepted since the last sample: not connecting")
	}
	if read().connecting {
		t.Fatal("still connecting with nothing new")
	}
	l.Handshaking = 3
	if !read().connecting {
		t.Fatal("handshakes in flight: not connecting")
	}
	l.Handshaking = 0
	l.Opened++
	if !read().connecting {
		t.Fatal("a stream opened since the last sample: not connecting")
	}
	if newGCSampler(nil)().connecting {
		t.Fatal("connecting without a load to read")
	}
}
