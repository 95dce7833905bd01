package localxds_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/agent/agenttest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// counts is a localxds.Observer that counts.
type counts struct {
	mu              sync.Mutex
	local, up, lost int
}

func (c *counts) LocalStream(d int) { c.mu.Lock(); c.local += d; c.mu.Unlock() }
func (c *counts) UpstreamUp()       { c.mu.Lock(); c.up++; c.mu.Unlock() }
func (c *counts) UpstreamDown(lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up--
	if lost {
		c.lost++
	}
}

// wait waits until cond holds of the counts: local streams, upstreams up
// and upstreams lost.
func (c *counts) wait(t *testing.T, what string, cond func(local, up, lost int) bool) {
	t.Helper()
	testwait.Until(t, what, func() (bool, string) {
		c.mu.Lock()
		l, u, x := c.local, c.up, c.lost
		c.mu.Unlock()
		return cond(l, u, x), fmt.Sprintf("local streams %d, upstreams up %d, lost %d", l, u, x)
	})
}

func is(local, up, lost int) func(int, int, int) bool {
	return func(l, u, x int) bool { return l == local && u == up && x == lost }
}

// TestObserverSeesStreams: the observer learns of an application's
// stream, of its upstream answering, of the upstream lost when its server
// dies, and of the application leaving (not a loss).
func TestObserverSeesStreams(t *testing.T) {
	ca := agenttest.NewCA(t)
	first, second := agenttest.StartADS(t, ca), agenttest.StartADS(t, ca)
	var c creds
	c.set(t, ca, "m1.bookbuyer.default")
	var o counts
	p := startObserved(t, &c, &o, first.Addr, second.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local := dialLocal(t, p.TCPAddr())
	app, leave := context.WithCancel(ctx)
	sotw(t, app, local)
	o.wait(t, "an application connected", is(1, 1, 0))
	first.Stop()
	// The application's stream ends, or is carried to the other server.
	o.wait(t, "its server died", func(_, _, lost int) bool { return lost == 1 })
	leave()
	o.wait(t, "the application left", is(0, 0, 1))
}
