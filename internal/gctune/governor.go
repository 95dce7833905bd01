package gctune

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// DefaultGCPercent is osm-server's garbage-collector target (Go's GOGC)
// unless gcPercent or GOGC says otherwise. Go's own default, 100, lets
// the heap grow by what is live plus the goroutine stacks before it
// collects: at 10,000 proxies that headroom was 37-64 of the 100-125 KiB
// of RSS per proxy (docs/performance.md, M7). 50 halves it (89-93 KiB
// per proxy) for more collections while the heap grows, as when the fleet
// connects to a fresh server (docs/operator-guide.md has the trade).
const DefaultGCPercent = 50

// Config is the runtime's memory configuration as the server's config
// file gives it.
type Config struct {
	GCPercent   int   // the collector's target (the config's gcPercent)
	MemoryLimit int64 // the soft memory limit in bytes; 0 for none
}

// Settings are the Go runtime's memory settings as Apply applied them.
type Settings struct {
	GCPercent   int    // what debug.SetGCPercent got, or -1 when GOGC=off
	MemoryLimit int64  // bytes; math.MaxInt64 when none
	Source      string // which of the config keys and GOGC/GOMEMLIMIT decided
}

// Apply sets the garbage collector's target and soft memory limit
// from the configuration. GOGC and GOMEMLIMIT in the environment win over
// the config keys, as they do for any Go program: the runtime has already
// read them, and an operator who set them meant them.
func Apply(log *slog.Logger, cfg Config) Settings {
	var s Settings
	var src []string
	if os.Getenv("GOGC") != "" {
		s.GCPercent = debug.SetGCPercent(-1) // read it back...
		debug.SetGCPercent(s.GCPercent)      // ...and restore it
		src = append(src, "GOGC")
	} else {
		debug.SetGCPercent(cfg.GCPercent)
		s.GCPercent = cfg.GCPercent
		src = append(src, "gcPercent")
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		s.MemoryLimit = debug.SetMemoryLimit(-1) // a negative limit only reads it
		src = append(src, "GOMEMLIMIT")
	} else {
		s.MemoryLimit = math.MaxInt64
		if cfg.MemoryLimit > 0 {
			s.MemoryLimit = cfg.MemoryLimit
			src = append(src, "memoryLimit")
		}
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	s.Source = strings.Join(src, ", ")
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		limit = strconv.FormatInt(s.MemoryLimit, 10)
	}
	log.Info("Go runtime memory settings", "gc_percent", s.GCPercent, "memory_limit_bytes", limit, "from", s.Source)
	return s
}

// A fleet connecting to a freshly started server, or reconnecting after a
// restart or a failover, allocates fast (TLS handshakes, HTTP/2
// transports, each proxy's first answers) while what is live grows: at
// osm-server's steady target (gcPercent, 50 by default) the collector
// then ran about twice as often as at Go's default, each collection
// scanning every connection's goroutine stacks, and was a quarter of the
// server's CPU in the fill (docs/performance.md, issue 26). So while
// connections arrive in a burst the collector runs at burstGCPercent, and
// when the burst is over the steady target returns, and once nothing
// arrives one collection also returns the burst's extra heap to the
// system at once (debug.FreeOSMemory: the runtime's own scavenger would
// give it back over minutes, and only down to a tenth above the new
// target).
//
// What arrives is counted as connections accepted plus streams opened
// (Load, from the xDS server), and a burst lasts while handshakes are in flight: in
// a reconnect storm 10,000 connections are accepted at once and their
// handshakes, sharing two cores, end seconds later and in waves. Following
// the streams opened alone, the target was raised 5 s into the storm and
// dropped twice in its gaps (osm-bench M6, 10,000 proxies).
//
// The burst's target is 200, twice Go's default: against 100 it took
// about 15% off the fill's server CPU (osm-bench, 10,000 proxies: the
// collector was osm-server's largest cost beyond go-control-plane's), for
// 3-7 KiB per proxy more after the burst's heap is given back (the larger
// peak's fragmentation; eight pairs of runs, with a fix that saved 2.4 KiB
// in the same change). 400 saved no more. A memoryLimit bounds the
// burst's heap as any other (issue 26's fifth and ninth rounds in the
// history of docs/performance.md).
const (
	burstGCPercent = 200
	// burstTick is how often the server's load is read. burstStreams
	// arrivals in one tick (100 a second) start a burst; burstQuietTicks
	// ticks in a row with fewer than quietStreams arrivals each (20 a
	// second, for half a second) and fewer handshakes in flight end it,
	// soon enough that its collection is over before the server is idle
	// (osm-bench's M1 window starts 2.5 s after the last proxy is
	// configured; with 2 s it fell into it). A storm that slows down (on a
	// loaded machine) may end and start again; that only sets the target
	// (see releaseEvery).
	burstTick       = 250 * time.Millisecond
	burstStreams    = 25
	quietStreams    = 5
	burstQuietTicks = 2
	// The burst's heap is given back (debug.FreeOSMemory, a whole
	// collection) once nothing arrived and no handshake was in flight for
	// releaseQuietTicks ticks after it, and at most every releaseEvery: a
	// storm slowed down by a loaded machine ends its bursts while streams
	// still open, and memory given back then is wanted again at once.
	releaseQuietTicks = 2
	releaseEvery      = time.Minute
	// Only a burst of at least releaseMinStreams opened streams grows the
	// heap enough to be worth a whole collection: a few hundred proxies
	// joining (a scale-out) would pay the collection's latency for little
	// memory (osm-bench's M5 p99 rose from 5.5 to 14.6 ms when its 200
	// joins ended in one).
	releaseMinStreams = 1000
)

// Load is how busy the server is with new connections at a tick: the
// counts grow from the server's start (the xDS server's Load).
type Load struct {
	// Accepted counts the connections accepted, Opened the streams
	// authenticated and opened.
	Accepted, Opened uint64
	// Handshaking is how many accepted connections are in their TLS
	// handshake or HTTP/2 preface now.
	Handshaking int
}

// gcGovernor raises the collector's target while connections arrive in a
// burst and restores the steady one after (see burstGCPercent).
type gcGovernor struct {
	log     *slog.Logger
	steady  int           // the configured target
	load    func() Load   // the server's arrivals (the xDS server's Load)
	setGC   func(int) int // debug.SetGCPercent
	collect func()        // debug.FreeOSMemory
	now     func() time.Time
}

// newGCGovernor returns the governor for the settings in force, or nil
// when they leave it nothing to do: GOGC in the environment decides, the
// collector is off, or the steady target is already at least the burst's.
func newGCGovernor(log *slog.Logger, s Settings, load func() Load) *gcGovernor {
	if strings.Contains(s.Source, "GOGC") || s.GCPercent < 0 || s.GCPercent >= burstGCPercent {
		return nil
	}
	return &gcGovernor{log: log, steady: s.GCPercent, load: load, setGC: debug.SetGCPercent, collect: debug.FreeOSMemory, now: time.Now}
}

// run follows the server's load at each tick until ctx is done.
func (g *gcGovernor) run(ctx context.Context, ticks <-chan time.Time) error {
	last := g.load()
	inBurst, quiet := false, 0
	var burstTotal uint64 // streams opened in the current burst
	// pending: a burst ended and its heap is not given back yet; idle
	// counts the ticks since with nothing arriving or handshaking.
	pending, idle := false, 0
	var released time.Time
	for {
		select {
		case <-ctx.Done():
			if inBurst {
				g.setGC(g.steady)
			}
			return nil
		case <-ticks:
		}
		l := g.load()
		opened := l.Opened - last.Opened
		arrived := l.Accepted - last.Accepted + opened
		last = l
		switch {
		case !inBurst && arrived >= burstStreams:
			inBurst, quiet, pending, burstTotal = true, 0, false, opened
			g.setGC(burstGCPercent)
			g.log.Info("xDS connections arriving in a burst: collector target raised until it is over", "gc_percent", burstGCPercent, "handshaking", l.Handshaking)
		case !inBurst:
			if !pending {
				break
			}
			if idle = idle + 1; arrived > 0 || l.Handshaking > 0 {
				idle = 0
			}
			if idle >= releaseQuietTicks {
				pending = false
				if released.IsZero() || g.now().Sub(released) >= releaseEvery {
					g.collect()
					released = g.now()
					g.log.Info("no xDS connections arriving: the burst's heap given back to the system")
				}
			}
		case arrived >= quietStreams || l.Handshaking >= quietStreams:
			quiet, burstTotal = 0, burstTotal+opened
		default:
			burstTotal += opened
			if quiet++; quiet < burstQuietTicks {
				break
			}
			inBurst, pending, idle = false, burstTotal >= releaseMinStreams, 0
			g.setGC(g.steady)
			g.log.Info("burst of xDS connections over: collector target restored", "gc_percent", g.steady)
		}
	}
}
