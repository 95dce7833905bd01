package fleet

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var fleetGCSink [][]byte

func TestFleetCollector(t *testing.T) {
	c := NewCollector()
	// Before the first change: what a change allocates is not known yet.
	before := gcCycles()
	if !c.BeforeChange() || gcCycles() <= before {
		t.Fatal("beforeChange did not collect before the first change")
	}
	for range 64 {
		fleetGCSink = append(fleetGCSink, make([]byte, 64<<10))
	}
	c.AfterChange()
	if c.last < 64*64<<10 {
		t.Fatalf("afterChange: the change allocated %d bytes; want at least %d", c.last, 64*64<<10)
	}
	fleetGCSink = nil
	// A change that allocated as little as one byte leaves the heap far
	// from its trigger after a collection.
	runtime.GC()
	c.last = 1
	before = gcCycles()
	if c.BeforeChange() || gcCycles() != before {
		t.Fatal("beforeChange collected with the heap far from its trigger")
	}
	// A change that allocates as much as the heap's whole trigger would
	// start a collection: the fleet collects first.
	_, _, trigger := c.read()
	c.last = trigger
	before = gcCycles()
	if !c.BeforeChange() {
		t.Fatal("beforeChange did not collect with the goal nearer than twice the last change")
	}
	if gcCycles() <= before {
		t.Fatal("beforeChange reported a collection that did not happen")
	}
}
