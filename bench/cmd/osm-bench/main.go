// Command osm-bench is the control-plane benchmark harness behind `make
// bench`. It simulates a fleet of N proxies, each with its own client
// certificate, TCP+TLS connection and ADS stream, and measures, one after
// another with the same fleet and workload, these xDS servers:
//
//   - O: osm-server itself (bin/osm-server), fed through its real static
//     provider and policy API;
//   - L: go-control-plane's SnapshotCache fed pre-built snapshots (and
//     L-mux: a MuxCache with a LinearCache for EDS), run as `osm-bench serve-l`;
//   - F: a floor server that marshals each resource once and writes the
//     same bytes to every stream, run as `osm-bench serve-f`;
//   - HA: three osm-server replicas on a three-server Consul (--consul).
//
// Each server is its own process, so its CPU-seconds and peak RSS come from
// /proc. Everything listens on 127.0.0.1; a run is bounded by --timeout and
// every child dies with the harness (Pdeathsig) or is killed on exit.
// `osm-bench tails` reads a run's trace and joins and says what ran while
// the slowest joins waited.
//
// Results go to the terminal and to a JSON file (bench/results/latest.json
// under make bench). The metrics (M1-M11, HA) and their targets are listed
// in bench/report and explained in docs/performance.md.
//
// This command is wiring: flags, the servers' order over rounds, and the
// packages under bench/, one per job: fleet (the simulated proxies and
// their connections), peer (the servers under test: O as a process, and
// L, L-mux and F, which this same binary serves), metrics (M1-M11 against
// one server), ha (the several-servers section), report (the table and
// the JSON), tails (`osm-bench tails`), and their leaves workload (W),
// wire, pki and process. The harness is a client of the product, never a
// part of it: of osm-vm it imports only the wire and client packages an
// agent uses (internal/mesh, internal/meshapi, internal/meshclient) and
// internal/testaddr, and nothing of the product imports it (deps_test.go).
//
// It stays in the main module, not a module of its own: `go mod tidy`
// without it takes nothing out of go.mod or go.sum (go-control-plane's
// caches are internal/xds's too, and consul/api brings golang.org/x/exp),
// and what a binary links is decided by its imports, which deps_test.go
// checks (no product package reaches bench/, x/exp/trace or
// go-control-plane's server); a second module would only add a go.mod to
// keep in step and take the harness out of `./...` (build, vet, test and
// the import rules).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/ha"
	"github.com/osm-vm/osm-vm/bench/metrics"
	"github.com/osm-vm/osm-vm/bench/peer"
	"github.com/osm-vm/osm-vm/bench/pki"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/report"
	"github.com/osm-vm/osm-vm/bench/tails"
	"github.com/osm-vm/osm-vm/bench/workload"
)

func main() {
	os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
}

func mainExit(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args, stdout, stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "osm-bench:", err)
		}
		return 1
	}
	return 0
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var level slog.LevelVar // info; `run --log-level debug` lowers it
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: &level}))
	if _, err := process.RaiseNoFile(); err != nil {
		return err
	}
	switch cmd {
	case "run":
		cfg, err := parseRunFlags(args, stderr)
		if err != nil {
			return err
		}
		level.Set(cfg.logLevel)
		return runBench(ctx, log, cfg, stdout)
	case "serve-l", "serve-f":
		o, err := peer.ParseFlags(cmd, args, stderr)
		if err != nil {
			return err
		}
		return peer.Serve(ctx, log.With("proc", cmd), cmd, o, stdout)
	case "tails":
		return tails.Run(args, stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q: want run, tails, serve-l or serve-f", cmd)
	}
}

// runConfig is the parsed `osm-bench run` command line.
type runConfig struct {
	quick   bool
	plan    metrics.Plan
	servers []string
	// rounds is how often each server is measured, the servers taking
	// turns; the report gives each figure's median (see mergeRounds).
	rounds    int
	out       string
	osmServer string
	// pin, when set, puts the servers and the fleet on separate CPUs.
	pin          *process.Pinning
	fleetMemory  int // --fleet-memory: MiB, 0 or fleetMemoryAuto
	staticPlugin string
	timeout      time.Duration
	workDir      string
	// logLevel is the harness's own; serverLogLevel is passed to O's
	// osm-server (its log goes to servers.log in the work directory).
	logLevel       slog.Level
	serverLogLevel string
	// The HA section: the consul binary, proxies and applies.
	consul               string
	haProxies, haApplies int
}

func parseRunFlags(args []string, stderr io.Writer) (runConfig, error) {
	var (
		c                                         runConfig
		servers                                   string
		proxies, services, endpoints, reps, joins int
		metrics, logLevel                         string
	)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.quick, "quick", false, "small N, finishes in under two minutes")
	fs.IntVar(&proxies, "proxies", 0, "proxies in the fleet (default 10000, quick 500)")
	fs.IntVar(&services, "services", 0, "services in W (default 1000, quick 100)")
	fs.IntVar(&endpoints, "endpoints", 10, "endpoints per service")
	fs.IntVar(&reps, "reps", 0, "changes measured for M2 and M3 (default 20, quick 5)")
	fs.IntVar(&joins, "joins", 0, "joins measured for M5, one after another (default 1000, quick 10); p99 is nearest-rank, the 10th slowest of 1000")
	fs.StringVar(&servers, "servers", "O,L,L-mux,F,HA", "servers to measure, in order (HA: three osm-server replicas on a three-server Consul, see --consul)")
	fs.IntVar(&c.rounds, "rounds", 1, "measure every server this many times, taking turns in an order reversed every other round (O, L-mux, L-mux, O, O, ...), and report each figure's median (M5's p50 and p99: of every round's joins together), with every round's in the JSON's samples: one run's ratios move by ±15% on a 2-core machine (docs/performance.md)")
	fs.StringVar(&c.consul, "consul", "", "consul binary for HA (HA is skipped without it; make bench builds it with hack/build-consul.sh)")
	fs.IntVar(&c.haProxies, "ha-proxies", 0, "HA: proxies spread over the three replicas (default 900, quick 90)")
	fs.IntVar(&c.haApplies, "ha-applies", 0, "HA: applies measured (default 20, quick 5)")
	fs.StringVar(&c.out, "out", "bench/results/latest.json", "JSON results file")
	fs.IntVar(&c.fleetMemory, "fleet-memory", fleet.MemoryAuto, "MiB the harness's own heap (the fleet's) may grow to before it collects: its collector is off while it measures and it collects before each fill and storm, so that the fleet's collections, which the real fleet of Envoys does not have, stay out of the windows measured (default 6144 or a quarter of the machine's memory, whichever is less; 0: Go's default collector; GOGC or GOMEMLIMIT in the environment also leave it as they set it)")
	var pin bool
	fs.BoolVar(&pin, "pin", false, "put the servers on CPU 0 and the harness with its fleet on the others (Linux, taskset), so that the servers' CPU figures do not depend on how the fleet interleaves with them; times grow, each side having fewer cores")
	fs.StringVar(&c.osmServer, "osm-server", "bin/osm-server", "osm-server binary for O (O is skipped when missing)")
	fs.StringVar(&c.staticPlugin, "static-plugin", "", "osm-provider-static binary for O (default: next to --osm-server)")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound on the whole run (default 15m, quick 2m)")
	fs.StringVar(&c.workDir, "work-dir", "", "directory for certificates, server data and logs (default: a temporary directory, removed)")
	fs.StringVar(&metrics, "metrics", "", "measure only these metrics, e.g. M3 or M2,M5 (default all; M1 and M7 are always measured, M8 comes with M2)")
	fs.StringVar(&logLevel, "log-level", "info", "the harness's log level (debug logs every change with its start time, to line up with the server's log)")
	fs.StringVar(&c.serverLogLevel, "server-log-level", "warn", "osm-server's --log-level for O; its log is servers.log in --work-dir")
	fs.DurationVar(&c.plan.QuietMax, "quiet-max", 5*time.Second, "before each M2/M3 change, wait up to this long for the server to finish the previous one (under 5% of a core for 200 ms); 0: do not wait")
	fs.StringVar(&c.plan.TraceDir, "trace-dir", "", "for O, write a runtime trace and a CPU profile of osm-server over the first seconds of M2's and M3's changes, of M5's joins and of M6's storm, to DIR/O-<metric>.trace (go tool trace) and DIR/O-<metric>.cpu.pb.gz, and heap profiles after a collection at the start and at the metric's end, DIR/O-<metric>.allocs-start.pb.gz and .allocs.pb.gz (go tool pprof -sample_index=alloc_space -diff_base START END); with --rounds, each round's in DIR/round-<n>")
	fs.StringVar(&c.plan.JoinsOut, "joins-out", "", "append each server's M5 joins to FILE, one line each: the server, when the join started (Unix microseconds, to line up with osm-server's --log-level debug log, which has each commit of the proxies' claims) and its latency (microseconds)")
	fs.BoolVar(&c.plan.NoResume, "no-resume", false, "make every connection of the fleet a full TLS handshake (by default a proxy resumes its TLS session when it reconnects in M6 and M10, as Envoy does)")
	fs.StringVar(&c.plan.ProfileDir, "profile-dir", "", "write to DIR/<server>-*: each server's CPU and allocation profiles of the fleet fill's first 15 s, of M2's and M3's first changes (10 s at most), of M5's joins (1-10 s by --joins) and of M6's and M10's storms' first 8 s (O's changes, joins and M6's storm only without --trace-dir), O's CPU profile of M1's idle window; beside each server CPU profile, the fleet's own over the same window (DIR/<server>-<window>.fleet.cpu.pb.gz); after each fill, the fleet's heap right after a collection (DIR/<server>-fill.fleet.heap.pb.gz); after M7's RSS is read, each server's /proc status and smaps_rollup, heap profile and MemStats (heap?debug=1), and O's goroutines and /debug/proxies; with --rounds, each round's in DIR/round-<n>")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	def := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if c.quick {
				*v = quick
			}
		}
	}
	def(&proxies, 10000, 500)
	def(&services, 1000, 100)
	def(&reps, 20, 5)
	def(&joins, 1000, 10)
	def(&c.haProxies, 900, 90)
	def(&c.haApplies, 20, 5)
	if c.rounds < 1 {
		return c, fmt.Errorf("run: --rounds %d: want 1 or more", c.rounds)
	}
	if c.timeout == 0 {
		c.timeout = 15 * time.Minute
		if c.quick {
			c.timeout = 2 * time.Minute
		}
		c.timeout *= time.Duration(c.rounds)
	}
	if services < 2 || endpoints < 1 || proxies < 1 || reps < 1 || joins < 1 {
		return c, errors.New("run: need --services >= 2, --endpoints, --proxies, --reps and --joins >= 1")
	}
	if endpoints > 250 || services*endpoints >= 1<<23 {
		return c, errors.New("run: the workload's addresses run out beyond 8M endpoints or 250 per service")
	}
	if err := c.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return c, fmt.Errorf("run: --log-level %q: want debug, info, warn or error", logLevel)
	}
	if metrics != "" {
		c.plan.Metrics = map[string]bool{}
		for _, m := range strings.Split(metrics, ",") {
			switch m = strings.TrimSpace(m); m {
			case "M1", "M2", "M3", "M5", "M6", "M7", "M8", "M9", "M10", "M11":
				c.plan.Metrics[m] = true
			case "M4":
				return c, errors.New("run: --metrics: M4 is measured by Go benchmarks in internal/xds, not by the harness")
			default:
				return c, fmt.Errorf("run: --metrics: unknown metric %q (want M1-M11)", m)
			}
		}
	}
	if pin {
		var err error
		if c.pin, err = process.NewPinning(); err != nil {
			return c, err
		}
	}
	if c.fleetMemory < fleet.MemoryAuto {
		return c, fmt.Errorf("run: --fleet-memory %d: want MiB, or 0 for Go's default collector", c.fleetMemory)
	}
	if c.staticPlugin == "" {
		c.staticPlugin = filepath.Join(filepath.Dir(c.osmServer), "osm-provider-static")
	}
	// The flags set the plan's other fields already.
	c.plan.Workload = workload.Workload{Services: services, Endpoints: endpoints, Proxies: proxies}
	c.plan.Reps, c.plan.Joins = reps, joins
	c.plan.IdleWindow, c.plan.Settle, c.plan.RepBudget, c.plan.FillTimeout = 5*time.Second, 30*time.Second, 60*time.Second, 2*time.Minute
	c.plan.Parallel, c.plan.WideScale = 128, 10
	if c.quick {
		c.plan.IdleWindow, c.plan.Settle, c.plan.RepBudget, c.plan.FillTimeout = 2*time.Second, 10*time.Second, 10*time.Second, 30*time.Second
	}
	for _, s := range strings.Split(servers, ",") {
		switch s = strings.TrimSpace(s); s {
		case "O", "L", "L-mux", "F", "HA":
			c.servers = append(c.servers, s)
		case "":
		default:
			return c, fmt.Errorf("run: --servers: unknown server %q (want O, L, L-mux, F or HA)", s)
		}
	}
	return c, nil
}

// runBench measures every server and writes the report.
func runBench(ctx context.Context, log *slog.Logger, c runConfig, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.pin != nil {
		if err := c.pin.PinSelf(); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find osm-bench's own executable: %w", err)
	}
	dir := c.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "osm-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	ca, err := pki.NewCA()
	if err != nil {
		return err
	}
	if err := ca.WriteServerFiles(dir); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "servers.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	fleetMiB, err := fleet.MemoryMiB(c.fleetMemory)
	if err != nil {
		return err
	}
	restoreGC, fleetNote := fleet.SetMemory(fleetMiB)
	defer restoreGC()
	ids := &peer.IdentityCache{CA: ca}
	p := c.plan
	log.Info("minting client certificates", "n", p.Workload.Proxies+p.Joins)
	if _, err := ids.Get(p.Workload, p.Workload.Proxies+p.Joins); err != nil {
		return err
	}

	rep := &report.Report{
		Date:    time.Now().UTC(),
		Machine: report.Machine{Cores: runtime.NumCPU(), CPU: report.CPUModel(), Go: runtime.Version()},
		Quick:   c.quick, N: p.Workload.Proxies, Services: p.Workload.Services,
		Endpoints: p.Workload.Endpoints, Reps: p.Reps, Joins: p.Joins,
	}
	if c.pin != nil {
		rep.Pinned = c.pin.Note()
	}
	rep.Fleet = fleetNote
	roles := map[string]string{
		"O":     "osm-server",
		"L":     "go-control-plane SnapshotCache, pre-built snapshots",
		"L-mux": "go-control-plane MuxCache: SnapshotCache + LinearCache EDS",
		"F":     "floor: marshal once, same bytes to every stream",
		"HA":    "3 osm-server replicas on a 3-server Consul, the proxies spread over them",
	}
	rounds := map[string][]report.Round{}
measuring:
	for round := 1; round <= c.rounds; round++ {
		for _, name := range roundOrder(c.servers, round) {
			if c.rounds > 1 {
				log.Info("measuring", "server", name, "round", round, "of", c.rounds)
			}
			rp := p
			if c.rounds > 1 {
				// Each round's profiles and traces in a directory of
				// their own, or the last round's would replace the others.
				for _, d := range []*string{&rp.ProfileDir, &rp.TraceDir} {
					if *d != "" {
						*d = filepath.Join(*d, fmt.Sprintf("round-%d", round))
					}
				}
			}
			rounds[name] = append(rounds[name], measureServer(ctx, log, c, rp, name, dir, self, ids, logf, round == 1))
			if ctx.Err() != nil {
				log.Warn("run deadline reached: reporting what was measured", "timeout", c.timeout)
				break measuring
			}
		}
	}
	for _, name := range c.servers {
		if rs := rounds[name]; len(rs) > 0 {
			rep.Servers = append(rep.Servers, report.MergeRounds(name, roles[name], rs))
		}
	}
	rep.Rounds = c.rounds
	rep.Build()
	rep.WriteTable(stdout)
	if c.out != "" {
		if err := rep.WriteJSON(c.out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nresults: %s\n", c.out)
	}
	return nil
}

// measureServer measures one server once; withM4 adds O's in-process M4
// figures (the first round only: they are the Go benchmarks').
func measureServer(ctx context.Context, log *slog.Logger, c runConfig, p metrics.Plan, name, dir, self string, ids *peer.IdentityCache, logf io.Writer, withM4 bool) report.Round {
	var t metrics.Target
	switch name {
	case "O":
		t = &peer.OTarget{Pin: c.pin, OSMServer: c.osmServer, StaticPlugin: c.staticPlugin, Dir: filepath.Join(dir, "o"), LogW: logf, Log: log, LogLevel: c.serverLogLevel}
	case "L":
		t = &peer.LFTarget{Pin: c.pin, Label: name, Kind: "serve-l", Mode: "snapshot", Self: self, Dir: dir, IDs: ids, LogW: logf}
	case "L-mux":
		t = &peer.LFTarget{Pin: c.pin, Label: name, Kind: "serve-l", Mode: "mux", Self: self, Dir: dir, IDs: ids, LogW: logf}
	case "F":
		t = &peer.LFTarget{Pin: c.pin, Label: name, Kind: "serve-f", Mode: "snapshot", Self: self, Dir: dir, IDs: ids, LogW: logf}
	}
	m := metrics.New(log, p)
	var (
		res *metrics.Result
		err error
	)
	if name == "HA" {
		// Each round's replicas and Consul start from nothing: on the
		// last round's data its applies would change nothing.
		haDir, derr := os.MkdirTemp(dir, "ha-")
		if derr != nil {
			return report.Round{Err: derr}
		}
		settle := 30 * time.Second
		rest := 10 * time.Second
		if c.quick {
			rest = 5 * time.Second
		}
		res, err = ha.Measure(ctx, log, ha.Plan{Consul: c.consul, OSMServer: c.osmServer, StaticPlugin: c.staticPlugin,
			Dir: haDir, LogW: logf, LogLevel: c.serverLogLevel,
			Proxies: c.haProxies, Services: 10, Reps: c.haApplies, Rest: rest, Settle: settle})
	} else {
		res, err = m.Run(ctx, t)
	}
	if err != nil {
		// The servers' own words on why (a port taken, a crash) are in
		// servers.log, which a temporary --work-dir takes with it.
		log.Warn("server not measured", "server", name, "reason", err, "servers.log", logTail(filepath.Join(dir, "servers.log"), 20))
		return report.Round{Err: err}
	}
	if name != "HA" && p.Want("M9") {
		if werr := m.MeasureWide(ctx, t, res); werr != nil {
			res.Note("M9: %v", werr)
		}
	}
	if name == "O" && p.Metrics == nil && withM4 {
		if ms, note := metrics.MeasureM4(); note != "" {
			res.Notes = append(res.Notes, note)
		} else {
			for k, v := range ms {
				res.Values[k] = v
			}
		}
	}
	return report.Round{Values: res.Values, Latencies: res.Latencies, Notes: res.Notes}
}

// logTail returns the last n lines of the file at path (what reading it
// failed with, if it did).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// roundOrder is the order the servers are measured in a round: as given
// in odd rounds, reversed in even ones (O, L-mux, L-mux, O, O, L-mux,
// ...). A machine whose speed drifts over a run (a 2-core VM's does by
// 10-30% within minutes) then favours neither the server measured first
// nor the one measured last.
func roundOrder(servers []string, round int) []string {
	if round%2 == 1 {
		return servers
	}
	r := slices.Clone(servers)
	slices.Reverse(r)
	return r
}
