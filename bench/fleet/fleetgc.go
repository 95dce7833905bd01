package fleet

import (
	"os"
	"runtime"
	"runtime/metrics"

	"github.com/osm-vm/osm-vm/bench/process"
)

// Collector keeps the fleet's own collections out of M2's and M3's
// changes. The fleet is this process: at 10,000 connections its heap
// holds 500-900 MB, a collection of it takes 0.3-0.5 s of both cores, and
// one that started inside a change nearly doubled the change's time to
// its last ACK (650 against 330 ms), whichever server was measured. With
// 20 changes, M2's p99 is about the slowest, so a run's p99 depended on
// whether the fleet's heap reached its trigger during one of them. Before
// the first change, and before each one after it when the heap is nearer
// the earliest point the runtime may start a collection (45/64 of the way
// from what the last one left live to the goal, the runtime's
// minTriggerRatioNum) than twice what the last change allocated, the
// Fleet collects; the collection's CPU is left out of the fleet's CPU per
// change.
type Collector struct {
	samples [4]metrics.Sample
	last    uint64  // bytes the last change allocated; 0 before the first
	before  uint64  // bytes allocated when the current change began
	cpu     float64 // seconds of this process's CPU its collections took
}

func NewCollector() *Collector {
	c := &Collector{}
	c.samples[0].Name = "/gc/heap/allocs:bytes"
	c.samples[1].Name = "/gc/heap/goal:bytes"
	c.samples[2].Name = "/memory/classes/heap/objects:bytes"
	c.samples[3].Name = "/gc/heap/live:bytes"
	return c
}

// read returns what has been allocated, the heap's size now and the
// earliest size at which the runtime may start the next collection.
func (c *Collector) read() (allocs, heap, trigger uint64) {
	metrics.Read(c.samples[:])
	allocs, goal, heap, live := c.samples[0].Value.Uint64(), c.samples[1].Value.Uint64(), c.samples[2].Value.Uint64(), c.samples[3].Value.Uint64()
	trigger = goal
	if live < goal {
		trigger = live + (goal-live)/64*45
	}
	return allocs, heap, trigger
}

// BeforeChange collects if the next change would likely start a
// collection, and reports whether it did.
func (c *Collector) BeforeChange() bool {
	allocs, heap, trigger := c.read()
	collect := c.last == 0 || heap+2*c.last >= trigger
	if collect {
		cpu0, err0 := process.CPUSeconds(os.Getpid())
		runtime.GC()
		cpu1, err1 := process.CPUSeconds(os.Getpid())
		if err0 == nil && err1 == nil {
			c.cpu += cpu1 - cpu0
		}
		allocs, _, _ = c.read()
	}
	c.before = allocs
	return collect
}

// AfterChange records what the change allocated.
func (c *Collector) AfterChange() {
	allocs, _, _ := c.read()
	c.last = allocs - c.before
}

// CPU is the seconds of this process's CPU the collections BeforeChange
// started took.
func (c *Collector) CPU() float64 { return c.cpu }
