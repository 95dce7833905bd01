// Package gctune tunes the Go garbage collector of a long-running server
// to its work: Apply sets the configured target and soft memory limit
// (GOGC and GOMEMLIMIT in the environment win), and a Tuner, while it
// runs, raises the target while connections arrive in a burst (the
// governor, see burstGCPercent) and collects when the server goes idle
// after a burst with the heap near its next collection (the idle
// collector, see idleTick).
//
// It owns these policies and their measured figures, so that the code
// that does the work reads as the work. It must not import anything of
// the mesh: the server's load comes in as a function (Options.Load).
package gctune

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
)

// Options are a Tuner's.
type Options struct {
	// Settings are what Apply applied.
	Settings Settings
	// Load reads the server's arrivals (the xDS server's); nil runs no
	// governor, and the idle collector then reads allocation only.
	Load func() Load
	// IdleCollection runs the idle collector (config idleCollection),
	// unless the collector is off.
	IdleCollection bool
}

// Tuner runs the collector's tuning loops.
type Tuner struct {
	gov  *gcGovernor    // nil when the settings leave it nothing to do
	idle *idleCollector // nil when off
}

// New returns the tuner for opts; what it leaves nothing to do does not
// run.
func New(log *slog.Logger, opts Options) *Tuner {
	t := &Tuner{}
	if opts.Load != nil {
		t.gov = newGCGovernor(log, opts.Settings, opts.Load)
	}
	if opts.IdleCollection && opts.Settings.GCPercent >= 0 {
		t.idle = newIdleCollector(log, opts.Load)
	}
	return t
}

// Run follows the server until ctx is done; the governor leaves the
// steady target in force when it returns.
func (t *Tuner) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if t.gov != nil {
		g.Go(func() error {
			tk := time.NewTicker(burstTick)
			defer tk.Stop()
			return t.gov.run(ctx, tk.C)
		})
	}
	if t.idle != nil {
		g.Go(func() error {
			tk := time.NewTicker(idleTick)
			defer tk.Stop()
			return t.idle.run(ctx, tk.C)
		})
	}
	return g.Wait()
}
