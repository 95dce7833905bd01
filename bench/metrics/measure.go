// Package metrics measures one server with the fleet: the fill, M1's
// streams and idle CPU, M2 and M3's changes, M5's joins, M6's reconnect
// storm, M7's memory, M8's bytes, M9's wide proxy and M10's restart, each
// in a window the fleet's own collections and the server's previous work
// are kept out of, with --profile-dir's and --trace-dir's profiles and
// traces of those windows. It declares the Target it needs (a server kind
// that starts a peer.Server) and returns each server's figures as a
// Result; the report merges and prints them. It imports no osm-vm
// package itself (peer, whose Server it measures, does).
package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/peer"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/report"
	"github.com/osm-vm/osm-vm/bench/workload"
)

// Target starts a server kind for a workload.
type Target interface {
	Name() string
	// Start runs the server for w with identities for w.Proxies+extra proxies.
	Start(ctx context.Context, w workload.Workload, extra int) (*peer.Server, error)
}

// Plan sizes one run.
type Plan struct {
	Workload    workload.Workload
	Reps        int           // changes measured for M2 and M3
	Joins       int           // joins measured for M5
	IdleWindow  time.Duration // M1 idle CPU window
	Settle      time.Duration // wait for a change to reach every affected proxy
	RepBudget   time.Duration // stop repeating a change metric after this long (at least 3 reps)
	Parallel    int           // handshakes in flight while filling the fleet
	FillTimeout time.Duration // bound on filling the fleet and on the reconnect storm
	WideScale   int           // M9: services × WideScale, one wide proxy
	// Metrics, when not nil, limits the run to these metrics (M1 and M7
	// are always measured; M8 comes with M2).
	Metrics map[string]bool
	// TraceDir, when set, receives a runtime trace of O taken during the
	// first changes of each change metric.
	TraceDir string
	// QuietMax bounds the wait, before each change, for the server to
	// finish the previous one (0: no wait); see waitQuiet.
	QuietMax time.Duration
	// ProfileDir, when set, receives M1's idle-window profile of O (see
	// profileIdle) and where each server's memory is with the fleet
	// connected (see dumpMemory).
	ProfileDir string
	// NoResume makes every connection of the fleet a full TLS handshake;
	// by default a proxy keeps its TLS session and resumes it when it
	// reconnects (M6, M10), as Envoy does.
	NoResume bool
	// JoinsOut, when set, is a file each server's M5 joins are appended
	// to, one line each (see writeJoins).
	JoinsOut string
}

// Want reports whether metric id is to be measured.
func (p Plan) Want(id string) bool { return p.Metrics == nil || p.Metrics[id] }

// traceSeconds is how long a --trace-dir trace runs: the first few
// changes of a metric, at a size go tool trace opens quickly.
const traceSeconds = 4

// changeProfileSeconds is how long --profile-dir profiles M2's and M3's
// changes (at most; a second a change with fewer --reps): the first
// several, each with the quiet wait after it.
const changeProfileSeconds = 10

// stormTraceSeconds is how long M6's trace runs: the storm's first half.
const stormTraceSeconds = 8

// joinsProfileSeconds is how long --profile-dir's profile of M5's joins
// runs: about as long as n joins take (2-5 ms each), from 1 s to 10 s
// (4 s for the default 1,000).
func joinsProfileSeconds(n int) int {
	return min(max(n*4/1000, 1), 10)
}

// Measurer runs the metrics against one target.
type Measurer struct {
	log  *slog.Logger
	plan Plan
	seq  int
}

// New returns a Measurer that runs p's metrics, logging to log.
func New(log *slog.Logger, p Plan) *Measurer { return &Measurer{log: log, plan: p} }

// Result is what one target produced: metric id -> value, plus notes.
type Result struct {
	Values map[string]float64
	Notes  []string
	// Latencies holds the samples behind report.Percentile figures (see
	// report.PooledFigures): with --rounds, those figures are taken over every
	// round's samples together.
	Latencies map[string][]float64
}

func (r *Result) Set(id string, v float64) { r.Values[id] = v }

// MinFleetCPU is the least fleet CPU a per-fleet-CPU ratio is made from:
// /proc counts CPU in 10 ms ticks, and a quick run's storm is a tick or
// two.
const MinFleetCPU = 0.1

// SetPerFleetCPU sets id to the server's CPU (the figure serverID) over
// the fleet's in the same window (fleetID). The fleet does nearly the same
// work whichever server it fills, so the ratio takes out how fast the
// machine was in those seconds, which moves a 2-core VM's figures by
// ±20% from one minute to the next (docs/performance.md). It is left out
// when either is missing or the fleet's CPU is under minFleetCPU.
func (r *Result) SetPerFleetCPU(id, serverID, fleetID string) {
	server, ok1 := r.Values[serverID]
	fleet, ok2 := r.Values[fleetID]
	if ok1 && ok2 && fleet >= MinFleetCPU {
		r.Set(id, server/fleet)
	}
}

func (r *Result) Note(format string, a ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, a...))
}

// Run measures M1-M3 and M5-M10 (M4 is in-process, see MeasureM4) against t.
func (m *Measurer) Run(ctx context.Context, t Target) (*Result, error) {
	res := &Result{Values: map[string]float64{}}
	p := m.plan
	w := p.Workload
	log := m.log.With("server", t.Name())

	log.Info("starting server", "services", w.Services, "proxies", w.Proxies)
	srv, err := t.Start(ctx, w, p.Joins)
	if err != nil {
		return nil, err
	}
	defer func() { srv.Close() }() // M10 restarts it
	pid := srv.Proc.PID()
	time.Sleep(500 * time.Millisecond) // let the server finish its start-up work before the baseline
	baseRSS, err := process.MemKiB(pid, "VmRSS")
	if err != nil {
		return nil, err
	}
	f := &fleet.Fleet{Endpoint: srv.Endpoint, NoResume: p.NoResume}

	// M1: hold N streams; idle CPU with nothing changing.
	//
	// The fill starts with the fleet's heap collected: what the run left
	// before it (the 11,000 client certificates minted before the first
	// Server, the last server's 10,000 closed connections) would
	// otherwise be collected during this server's fill or not, as the
	// Fleet's trigger happens to fall, and its fleet CPU with it.
	runtime.GC()
	fillProfiled := m.profileFill(ctx, srv, t.Name())
	start := time.Now()
	fillCPU0, fillErr := process.CPUSeconds(pid)
	fleetCPU0, fleetErr := process.CPUSeconds(os.Getpid())
	usage := fleet.ReadUsage()
	pcs, err := f.ConnectAll(ctx, srv.IDs[:w.Proxies], p.Parallel, p.FillTimeout)
	usage.LogSince(log, "fill")
	defer func() { fleet.CloseAll(pcs) }()
	if err != nil {
		return nil, fmt.Errorf("fill the fleet (%d of %d connected): %w", len(pcs), w.Proxies, err)
	}
	log.Info("fleet configured", "proxies", len(pcs), "took", time.Since(start).Round(time.Millisecond))
	res.Set("fleet_fill_s", time.Since(start).Seconds())
	res.Set("fleet_fill_reconnects", float64(f.Retries.Load()))
	if fillCPU1, err := process.CPUSeconds(pid); err == nil && fillErr == nil {
		res.Set("fleet_fill_server_cpu_s", fillCPU1-fillCPU0)
	}
	if cpu1, err := process.CPUSeconds(os.Getpid()); err == nil && fleetErr == nil {
		res.Set("fleet_fill_fleet_cpu_s", cpu1-fleetCPU0)
	}
	res.SetPerFleetCPU("fleet_fill_server_per_fleet_cpu", "fleet_fill_server_cpu_s", "fleet_fill_fleet_cpu_s")
	if err := fillProfiled(); err != nil {
		res.Note("fill profile: %v", err)
	}
	if err := m.profileFleetHeap(t.Name() + "-fill"); err != nil {
		res.Note("fill: the fleet's heap profile: %v", err)
	}
	time.Sleep(p.IdleWindow / 2) // let the last ACKs drain
	idleProfiled := m.profileIdle(ctx, srv, t.Name())
	cpu0, err := process.CPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	time.Sleep(p.IdleWindow)
	cpu1, err := process.CPUSeconds(pid)
	if perr := idleProfiled(); perr != nil {
		res.Note("M1: idle profile: %v", perr)
	} else if p.ProfileDir != "" && srv.DebugAddr != "" {
		res.Note("M1: idle CPU measured while a CPU profile of the server ran (--profile-dir)")
	}
	if err != nil {
		return nil, err
	}
	res.Set("M1.streams", float64(countLive(pcs)))
	res.Set("M1.idle_cpu", 100*(cpu1-cpu0)/p.IdleWindow.Seconds())

	// M7: RSS per connected proxy.
	rss, err := process.MemKiB(pid, "VmRSS")
	if err != nil {
		return nil, err
	}
	res.Set("M7.rss_per_proxy", (rss-baseRSS)/float64(len(pcs)))
	if p.ProfileDir != "" {
		if err := dumpMemory(ctx, p.ProfileDir, t.Name(), srv); err != nil {
			res.Note("M7: memory dump: %v", err)
		}
	}

	// M2, M8: one endpoint change seen by every proxy; M3: by 5%.
	for _, c := range []struct {
		metric  string
		service int
	}{{"M2", 0}, {"M3", 1}} {
		if !p.Want(c.metric) {
			continue
		}
		affected := len(w.AffectedProxies(c.service))
		var last, each []float64
		m.waitQuiet(ctx, pid, res, c.metric)
		// The trace (when asked for) covers the first changes, not the wait.
		traced := m.startTrace(ctx, srv, res, t.Name()+"-"+c.metric, traceSeconds)
		// --profile-dir: every server's first changes (DIR/<server>-M2.*);
		// O's only without --trace-dir, which profiles them itself.
		profiled := func() error { return nil }
		profileSeconds := min(changeProfileSeconds, max(1, p.Reps)) // about a second a change
		if p.TraceDir == "" || srv.DebugAddr == "" {
			profiled = m.profileWindow(ctx, srv, t.Name()+"-"+c.metric, profileSeconds)
		}
		began := time.Now()
		inProfile := 0 // changes begun within the profile's window
		srvCPU0, err1 := process.CPUSeconds(pid)
		fleetCPU0, err2 := process.CPUSeconds(os.Getpid())
		fleetGC := fleet.NewCollector()
		for rep := range p.Reps {
			if rep >= 3 && time.Since(began) > p.RepBudget {
				res.Note("%s: stopped after %d of %d changes (%s budget)", c.metric, rep, p.Reps, p.RepBudget)
				break
			}
			quiet := time.Duration(0)
			if rep > 0 {
				quiet = m.waitQuiet(ctx, pid, res, c.metric)
			}
			fleetCollected := fleetGC.BeforeChange()
			r, err := m.change(ctx, f, srv, c.service, affected)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.metric, err)
			}
			fleetGC.AfterChange()
			if r.start.Sub(began) < time.Duration(profileSeconds)*time.Second {
				inProfile++
			}
			log.Debug("change", "metric", c.metric, "seq", m.seq, "start", r.start.Format(time.RFC3339Nano),
				"last_ack_ms", r.last, "acked", r.got, "affected", affected, "quiet_wait", quiet, "fleet_collected", fleetCollected)
			if r.got < affected {
				res.Note("%s: %d of %d affected proxies ACKed the change within %s", c.metric, r.got, affected, p.Settle)
			}
			last = append(last, r.last)
			each = append(each, r.each...)
			if c.metric == "M2" && r.claBytes > 0 {
				res.Set("M8.bytes", float64(r.bytes))
				res.Set("M8.cla_bytes", float64(r.claBytes))
				res.Set("M8.ratio", float64(r.bytes)/float64(r.claBytes))
			}
			time.Sleep(100 * time.Millisecond)
		}
		m.waitQuiet(ctx, pid, res, c.metric) // the last change's work counts in its CPU
		// Read before the trace's and the profile's last collections.
		srvCPU1, err3 := process.CPUSeconds(pid)
		fleetCPU1, err4 := process.CPUSeconds(os.Getpid())
		if err := traced(); err != nil {
			res.Note("%s: runtime trace: %v", c.metric, err)
		}
		if err := profiled(); err != nil {
			res.Note("%s: profile: %v", c.metric, err)
		} else if p.ProfileDir != "" && srv.PprofAddr != "" {
			res.Note("%s: the profile's %d s hold %d changes and the quiet between them", c.metric, profileSeconds, inProfile)
		}
		log.Info("change measured", "metric", c.metric, "affected", affected, "changes", len(last), "last_ack_p50_ms", report.Percentile(last, 50))
		if errors.Join(err1, err2, err3, err4) == nil && len(last) > 0 {
			// Where a change's time goes on a shared machine: the server's
			// work and the fleet's (TLS, framing, ACKs), per change.
			res.Set(c.metric+".server_cpu_ms", 1000*(srvCPU1-srvCPU0)/float64(len(last)))
			// Less the fleet's own collections before the changes (see
			// Collector).
			res.Set(c.metric+".fleet_cpu_ms", 1000*(fleetCPU1-fleetCPU0-fleetGC.CPU())/float64(len(last)))
		}
		res.Set(c.metric+".p50", report.Percentile(last, 50))
		res.Set(c.metric+".p99", report.Percentile(last, 99))
		res.Set(c.metric+".proxy_p99", report.Percentile(each, 99))
		res.Set(c.metric+".affected", float64(affected))
	}

	// M11: a failure-handling policy on one service (O only).
	if p.Want("M11") && srv.Apply != nil {
		if err := m.measurePolicy(ctx, f, srv, pcs, res); err != nil {
			return nil, err
		}
	}

	// M5: a new proxy joins the full fleet.
	var joins []float64
	var joinStarts []time.Time
	var joinsTraced func() error
	joinsProfiled := func() error { return nil }
	if p.Want("M5") {
		// The harness collects its own garbage first: the fleet's heap
		// (10,000 connections, 500-600 MB live) takes 0.4 s to mark, and
		// a collection of it among the joins slowed a tenth of them 2-10
		// times, setting the p99 of whichever server was measured. The
		// joins allocate far less than the heap's next goal.
		runtime.GC()
		joinsTraced = m.startTrace(ctx, srv, res, t.Name()+"-M5", traceSeconds)
		// --profile-dir profiles every server's joins (DIR/<server>-M5.*),
		// O's unless its trace already does, to set O's against L-mux's.
		if p.TraceDir == "" || srv.DebugAddr == "" {
			joinsProfiled = m.profileWindow(ctx, srv, t.Name()+"-M5", joinsProfileSeconds(p.Joins))
		}
	}
	joinsCPU0, joinsCPUErr := process.CPUSeconds(pid)
	for j := range p.Joins {
		if !p.Want("M5") {
			break
		}
		id := srv.IDs[w.Proxies+j]
		t0 := time.Now()
		pc, err := f.Connect(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("M5: %w", err)
		}
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = pc.WaitConfigured(jctx)
		cancel()
		if err != nil {
			pc.Close()
			return nil, fmt.Errorf("M5: %w", err)
		}
		joins = append(joins, ms(pc.ReadyAt.Sub(t0)))
		joinStarts = append(joinStarts, t0)
		pc.Close()
	}
	joinsCPU1, joinsCPUErr1 := process.CPUSeconds(pid)
	if p.Want("M5") {
		if err := joinsTraced(); err != nil {
			res.Note("M5: trace: %v", err)
		}
		if err := joinsProfiled(); err != nil {
			res.Note("M5: profile: %v", err)
		}
		log.Info("joins measured", "n", len(joins))
		if p.JoinsOut != "" {
			if err := appendJoins(p.JoinsOut, t.Name(), joinStarts, joins); err != nil {
				return nil, fmt.Errorf("M5: --joins-out: %w", err)
			}
		}
		res.Latencies = map[string][]float64{"M5": joins}
		res.Set("M5.p50", report.Percentile(joins, 50))
		res.Set("M5.p99", report.Percentile(joins, 99))
		// A join's cost to the server (the handshake, the stream and
		// the leave after): its latency on a loaded 2-core machine
		// follows it. A collection that lands among the joins adds to
		// every server's figure alike.
		if joinsCPUErr1 == nil && joinsCPUErr == nil && len(joins) > 0 {
			res.Set("M5.server_cpu_ms", (joinsCPU1-joinsCPU0)*1000/float64(len(joins)))
		}
	}
	if p.Want("M6") {
		m.storm(ctx, t.Name(), f, srv, &pcs, res)
	}
	if cpu, err := process.CPUSeconds(pid); err == nil {
		res.Set("cpu_seconds", cpu)
	}
	if hwm, err := process.MemKiB(pid, "VmHWM"); err == nil {
		res.Set("peak_rss_mib", hwm/1024)
	}
	if p.Want("M10") {
		m.restartStorm(ctx, t.Name(), f, srv, &pcs, res)
	}
	return res, nil
}

// restartStorm is M10: the server is stopped and started again on the
// same state, and the whole fleet reconnects to it, each proxy offering
// the session ticket it kept (as Envoy does). Measured from when the new
// process serves xDS until every proxy is configured: the time, the
// Server's CPU and the fleet's, and how many handshakes resumed (O keeps
// its ticket keys in its store; L and F, as go-control-plane's users
// do, in memory only). *pcs becomes the reconnected fleet.
func (m *Measurer) restartStorm(ctx context.Context, name string, f *fleet.Fleet, srv *peer.Server, pcs *[]*fleet.ProxyClient, res *Result) {
	p := m.plan
	log := m.log.With("server", name)
	if srv.Restart == nil {
		res.Note("M10: %s cannot be restarted by the harness", name)
		return
	}
	fleet.CloseAll(*pcs)
	*pcs = nil
	// The closed fleet's garbage is collected before the clock starts,
	// as before M6's storm.
	runtime.GC()
	down := time.Now()
	proc, addr, err := srv.Restart(ctx)
	if err != nil {
		res.Note("M10: restart: %v", err)
		return
	}
	srv.Proc, srv.Close, srv.Endpoint.Addr, f.Endpoint.Addr = proc, proc.Stop, addr, addr
	res.Set("M10.restart_s", time.Since(down).Seconds())
	// --profile-dir: the storm's first seconds (DIR/<server>-M10.*).
	profiled := m.profileWindow(ctx, srv, name+"-M10", stormTraceSeconds)
	t0 := time.Now()
	cpu0, cpuErr := process.CPUSeconds(proc.PID())
	fleetCPU0, fleetErr := process.CPUSeconds(os.Getpid())
	resumed0 := f.Resumed.Load()
	usage := fleet.ReadUsage()
	got, err := f.ConnectAll(ctx, srv.IDs[:p.Workload.Proxies], p.Workload.Proxies, p.FillTimeout)
	usage.LogSince(log, "M10")
	*pcs = got
	if err != nil {
		res.Note("M10: not every proxy was configured within %s after the restart: %v", p.FillTimeout, err)
	}
	res.Set("M10.all_configured_s", time.Since(t0).Seconds())
	res.Set("M10.resumed", float64(f.Resumed.Load()-resumed0))
	if cpu1, err := process.CPUSeconds(proc.PID()); err == nil && cpuErr == nil {
		res.Set("M10.server_cpu_s", cpu1-cpu0)
	}
	if cpu1, err := process.CPUSeconds(os.Getpid()); err == nil && fleetErr == nil {
		res.Set("M10.fleet_cpu_s", cpu1-fleetCPU0)
	}
	log.Info("restart storm measured", "configured", len(got), "resumed", f.Resumed.Load()-resumed0, "took", time.Since(t0).Round(time.Millisecond))
	if err := profiled(); err != nil {
		res.Note("M10: profile: %v", err)
	}
}

// storm is M6: every proxy in *pcs drops its connection and all reconnect
// at once; *pcs becomes the reconnected fleet.
func (m *Measurer) storm(ctx context.Context, name string, f *fleet.Fleet, srv *peer.Server, pcs *[]*fleet.ProxyClient, res *Result) {
	p := m.plan
	w := p.Workload
	log := m.log.With("server", name)

	var before int64
	// The trace (when asked for) covers the storm's first seconds, and so
	// do --profile-dir's CPU and allocation profiles of every server
	// (DIR/<server>-M6.cpu.pb.gz, .allocs.pb.gz) unless O's trace already
	// profiles it.
	traced := m.startTrace(ctx, srv, res, name+"-M6", stormTraceSeconds)
	profiled := func() error { return nil }
	if p.TraceDir == "" || srv.DebugAddr == "" {
		profiled = m.profileWindow(ctx, srv, name+"-M6", stormTraceSeconds)
	}
	fleet.CloseAll(*pcs)
	*pcs = nil
	// The storm starts with the fleet's heap collected, the closed
	// connections' garbage with it: with the collector off within
	// --fleet-memory, no collection then falls inside the storm; with
	// Go's default collector, how many did depended on where the fleet's
	// heap stood when the storm began (fleetmem.go).
	runtime.GC()
	t0 := time.Now()
	cpu0, cpuErr := process.CPUSeconds(srv.Proc.PID())
	fleetCPU0, fleetErr := process.CPUSeconds(os.Getpid())
	retries0, resumed0 := f.Retries.Load(), f.Resumed.Load()
	usage := fleet.ReadUsage()
	got, err := f.ConnectAll(ctx, srv.IDs[:w.Proxies], w.Proxies, p.FillTimeout)
	usage.LogSince(log, "M6")
	*pcs = got
	if err != nil {
		res.Note("M6: not every proxy was configured within %s after the storm: %v", p.FillTimeout, err)
	}
	res.Set("M6.reconnects", float64(f.Retries.Load()-retries0))
	res.Set("M6.resumed", float64(f.Resumed.Load()-resumed0))
	res.Set("M6.all_configured_s", time.Since(t0).Seconds())
	if cpu1, err := process.CPUSeconds(srv.Proc.PID()); err == nil && cpuErr == nil {
		res.Set("M6.server_cpu_s", cpu1-cpu0)
	}
	if cpu1, err := process.CPUSeconds(os.Getpid()); err == nil && fleetErr == nil {
		res.Set("M6.fleet_cpu_s", cpu1-fleetCPU0)
	}
	res.SetPerFleetCPU("M6.server_per_fleet_cpu", "M6.server_cpu_s", "M6.fleet_cpu_s")
	log.Info("reconnect storm measured", "configured", len(got), "took", time.Since(t0).Round(time.Millisecond))
	if err := traced(); err != nil {
		res.Note("M6: trace: %v", err)
	}
	if err := profiled(); err != nil {
		res.Note("M6: profile: %v", err)
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		// How the storm went: proxies configured in each second, and the
		// wait of each from its dial to its last first ACK.
		perSecond := map[int]int{}
		var waits []float64
		for _, pc := range got {
			perSecond[int(pc.ReadyAt.Sub(t0).Seconds())]++
			waits = append(waits, pc.ReadyAt.Sub(pc.Started).Seconds()*1000)
		}
		slices.Sort(waits)
		for _, s := range slices.Sorted(maps.Keys(perSecond)) {
			log.Debug("storm timeline", "second", s, "configured", perSecond[s])
		}
		if len(waits) > 0 {
			log.Debug("storm dial-to-configured", "p50_ms", waits[len(waits)/2], "p90_ms", waits[len(waits)*9/10], "max_ms", waits[len(waits)-1])
		}
	}
	var maxResp int64
	for _, pc := range got {
		before += pc.Responses.Load()
		maxResp = max(maxResp, pc.Responses.Load())
	}
	time.Sleep(time.Second) // a retry loop would keep sending
	var after int64
	for _, pc := range got {
		after += pc.Responses.Load()
	}
	res.Set("M6.max_responses_per_proxy", float64(maxResp))
	res.Set("M6.responses_after_configured", float64(after-before))
	res.Set("M6.server_alive", boolf(srv.Proc.Alive()))
}

// Quiet is under quietCPU of CPU time over quietWindow: 5% of a core (O
// holding 10,000 idle streams uses 0.2%). /proc counts it in 10 ms ticks.
const (
	quietWindow = 200 * time.Millisecond
	quietCPU    = 0.010 // seconds
)

// waitQuiet waits until the server at pid has gone quiet, at most
// plan.QuietMax, and returns how long it waited. The last affected proxy's
// ACK is not the end of a change for the server: it still reads and
// handles every proxy's ACK. Measured straight after, a change would pay
// for the one before it (traced at 10,000 proxies: M3's first change
// started with 5,700 of M2's last 10,000 ACKs still unread, 0.9 s).
func (m *Measurer) waitQuiet(ctx context.Context, pid int, res *Result, metric string) time.Duration {
	if m.plan.QuietMax <= 0 {
		return 0
	}
	start := time.Now()
	prev, err := process.CPUSeconds(pid)
	for err == nil && time.Since(start) < m.plan.QuietMax {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(quietWindow):
		}
		var now float64
		if now, err = process.CPUSeconds(pid); err == nil && now-prev < quietCPU {
			return time.Since(start)
		}
		prev = now
	}
	if err == nil {
		res.Note("%s: the server was still busy %s after a change (more than 5%% of a core)", metric, m.plan.QuietMax)
	}
	return time.Since(start)
}

// startTrace starts a runtime trace and a CPU profile of srv's next
// seconds (O only, with --trace-dir) into TraceDir/name.trace and
// name.cpu.pb.gz, and takes a heap profile right after a collection into
// name.allocs-start.pb.gz; the function it returns waits for the trace
// and the profile and takes the second heap profile, name.allocs.pb.gz,
// after another collection: what was allocated between the two is what
// the metric allocated (see profileWindow for why a window of time alone
// does not show it). The caller reads the server's CPU before calling it.
func (m *Measurer) startTrace(ctx context.Context, srv *peer.Server, res *Result, name string, seconds int) (wait func() error) {
	if m.plan.TraceDir == "" || srv.DebugAddr == "" {
		return func() error { return nil }
	}
	res.Note("%s: the first %d s measured under a runtime trace and a CPU profile of the server, and its allocations from their start to the metric's end (--trace-dir)", name, seconds)
	path := func(suffix string) string { return filepath.Join(m.plan.TraceDir, name+suffix) }
	if err := os.MkdirAll(m.plan.TraceDir, 0o755); err != nil {
		return func() error { return err }
	}
	if err := fetchHeapAfterGC(ctx, srv.DebugAddr, srv.DebugToken, path(".allocs-start.pb.gz")); err != nil {
		return func() error { return fmt.Errorf("allocations at the start: %w", err) }
	}
	kinds := []struct{ path, file string }{{"trace", ".trace"}, {"profile", ".cpu.pb.gz"}}
	done := make(chan error, len(kinds))
	for _, f := range kinds {
		go func() {
			done <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", srv.DebugAddr, f.path, seconds), srv.DebugToken, path(f.file))
		}()
	}
	time.Sleep(50 * time.Millisecond) // let the trace start before the first change
	return func() error {
		var errs []error
		for range kinds {
			errs = append(errs, <-done)
		}
		errs = append(errs, fetchHeapAfterGC(ctx, srv.DebugAddr, srv.DebugToken, path(".allocs.pb.gz")))
		return errors.Join(errs...)
	}
}

// MeasureWide is M9: the largest single message a proxy that sees every
// service receives, at WideScale × the workload.
func (m *Measurer) MeasureWide(ctx context.Context, t Target, res *Result) error {
	w := m.plan.Workload
	w.Services *= m.plan.WideScale
	w.Proxies, w.Wide = 1, true
	srv, err := t.Start(ctx, w, 0)
	if err != nil {
		return err
	}
	defer srv.Close()
	f := &fleet.Fleet{Endpoint: srv.Endpoint}
	pcs, err := f.ConnectAll(ctx, srv.IDs[:1], 1, m.plan.FillTimeout)
	defer fleet.CloseAll(pcs)
	if err != nil {
		return fmt.Errorf("M9: wide proxy: %w", err)
	}
	res.Set("M9.largest_mib", float64(pcs[0].MaxMsg.Load())/(1<<20))
	return nil
}

type changeResult struct {
	start    time.Time // when the change was made
	got      int
	last     float64   // ms until the last affected proxy ACKed
	each     []float64 // ms per proxy
	bytes    int
	claBytes int
}

// change applies one endpoint change and collects the ACKs of the
// responses that carry it.
func (m *Measurer) change(ctx context.Context, f *fleet.Fleet, srv *peer.Server, service, affected int) (changeResult, error) {
	m.seq++
	pr := &fleet.Probe{Seq: m.seq, Marker: workload.MarkerBytes(workload.ChangedAddr(m.seq)), Acks: make(chan fleet.AckEvent, affected)}
	f.Probe.Store(pr)
	defer f.Probe.Store(nil)
	if srv.Prepare != nil {
		if err := srv.Prepare(service, m.seq); err != nil {
			return changeResult{}, err
		}
	}
	t0 := time.Now()
	if err := srv.Change(ctx, service, m.seq); err != nil {
		return changeResult{}, err
	}
	return m.collect(ctx, pr, t0, affected)
}

func countLive(pcs []*fleet.ProxyClient) int {
	n := 0
	for _, pc := range pcs {
		select {
		case <-pc.Done():
		default:
			n++
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// appendJoins appends server's joins (see writeJoins) to the file path.
func appendJoins(path, server string, starts []time.Time, latencies []float64) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	writeJoins(w, server, starts, latencies)
	return errors.Join(w.Flush(), f.Close())
}

// writeJoins writes one line per join: the server's name, when the join
// started (Unix microseconds, to line up with a server's log) and its
// latency (microseconds), separated by spaces.
func writeJoins(w io.Writer, server string, starts []time.Time, latencies []float64) {
	for i, t0 := range starts {
		fmt.Fprintf(w, "%s %d %.0f\n", server, t0.UnixMicro(), math.Round(latencies[i]*1000))
	}
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
