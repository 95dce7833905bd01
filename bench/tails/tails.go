// Package tails is `osm-bench tails`: what a server ran during M5's slow
// joins, from a runtime trace of it (`osm-bench run --trace-dir`) and the
// joins' times (--joins-out), per band of join latency. It owns the reading
// of runtime traces (golang.org/x/exp/trace, which nothing of the product
// links) and imports nothing of osm-vm.
package tails

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/exp/trace"
)

// ran is one stretch of a goroutine running on a P, in Unix nanoseconds,
// with the function it was started with (its category).
type ran struct {
	start, end int64
	fn         string
}

// tracedRuns reads a runtime trace and returns every stretch a goroutine
// ran, dated by the trace's clock snapshot (Go 1.25 and later write one
// at each generation), and when the trace begins and ends. A goroutine's
// function is the outermost frame of its stack where it first stopped
// running that is not a WaitGroup.Go or errgroup wrapper (so a worker is
// named by what it runs).
func tracedRuns(r io.Reader) (runs []ran, first, last int64, err error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("trace: %w", err)
	}
	var (
		snap  *trace.ClockSnapshot
		since = map[trace.GoID]trace.Time{}
		fn    = map[trace.GoID]string{}
		raw   []struct {
			s, e trace.Time
			g    trace.GoID
		}
		from, to trace.Time
	)
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("trace: %w", err)
		}
		if from == 0 {
			from = ev.Time()
		}
		to = ev.Time()
		switch ev.Kind() {
		case trace.EventSync:
			if s := ev.Sync(); snap == nil && s.ClockSnapshot != nil {
				snap = s.ClockSnapshot
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			g := st.Resource.Goroutine()
			before, after := st.Goroutine()
			switch {
			case after == trace.GoRunning:
				since[g] = ev.Time()
			case before == trace.GoRunning:
				if fn[g] == "" { // the event's stack is the goroutine's own
					fn[g] = goroutineFunc(ev.Stack())
				}
				if s, ok := since[g]; ok {
					raw = append(raw, struct {
						s, e trace.Time
						g    trace.GoID
					}{s, ev.Time(), g})
					delete(since, g)
				}
			}
		}
	}
	if snap == nil {
		return nil, 0, 0, errors.New("trace: no clock snapshot to date it by (written by Go 1.25 and later: rebuild osm-server with this Go)")
	}
	wall := func(t trace.Time) int64 { return snap.Wall.UnixNano() + int64(t-snap.Trace) }
	runs = make([]ran, 0, len(raw))
	for _, x := range raw {
		f := fn[x.g]
		if f == "" {
			f = "(unknown)"
		}
		runs = append(runs, ran{wall(x.s), wall(x.e), f})
	}
	return runs, wall(from), wall(to), nil
}

// goroutineFunc names a goroutine by the outermost frame of stack that is
// not a WaitGroup.Go or errgroup wrapper, without its package path.
func goroutineFunc(stack trace.Stack) string {
	var frames []string
	for f := range stack.Frames() {
		frames = append(frames, f.Func)
	}
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		if strings.HasSuffix(f, "sync.(*WaitGroup).Go.func1") || strings.HasSuffix(f, "errgroup.(*Group).Go.func1") {
			continue
		}
		if j := strings.LastIndex(f, "/"); j >= 0 {
			f = f[j+1:]
		}
		return f
	}
	return ""
}

// join is one M5 join: its start (Unix nanoseconds) and latency.
type join struct {
	start, latency int64
}

// readJoins reads --joins-out lines ("server startµs latencyµs") of
// server.
func readJoins(r io.Reader, server string) ([]join, error) {
	var out []join
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		var s string
		var start, lat int64
		if _, err := fmt.Sscan(sc.Text(), &s, &start, &lat); err != nil {
			return nil, fmt.Errorf("joins line %d %q: %w (want: server startµs latencyµs, as --joins-out writes)", n, sc.Text(), err)
		}
		if s == server {
			out = append(out, join{start * 1000, lat * 1000})
		}
	}
	return out, sc.Err()
}

// band is a range of joins by latency rank, [lo, hi) in percent.
type band struct {
	name   string
	lo, hi float64
}

var tailBands = []band{{"slowest 1%", 99, 100}, {"p90-p99", 90, 99}, {"p40-p60", 40, 60}}

// bandShare is what the goroutines of fn ran, on average, inside the
// joins of a band.
type bandShare struct {
	fn string
	ns int64 // per join
}

// bandResult is one band's joins and what ran during them.
type bandResult struct {
	band       band
	joins      int
	meanLat    int64
	byFunction []bandShare // most first
}

// attribute sorts the joins that lie wholly inside [first, last] by
// latency and, for each band, adds up how long each function's goroutines
// ran inside each join.
func attribute(runs []ran, first, last int64, joins []join, bands []band) (inTrace int, out []bandResult) {
	var in []join
	for _, j := range joins {
		if j.start >= first && j.start+j.latency <= last {
			in = append(in, j)
		}
	}
	slices.SortStableFunc(in, func(a, b join) int { return cmp.Compare(a.latency, b.latency) })
	for _, b := range bands {
		lo, hi := int(float64(len(in))*b.lo/100), int(float64(len(in))*b.hi/100)
		js := in[lo:hi]
		if len(js) == 0 {
			continue
		}
		by := map[string]int64{}
		var lat int64
		for _, j := range js {
			lat += j.latency
			for _, r := range runs {
				if s, e := max(r.start, j.start), min(r.end, j.start+j.latency); e > s {
					by[r.fn] += e - s
				}
			}
		}
		res := bandResult{band: b, joins: len(js), meanLat: lat / int64(len(js))}
		for fn, ns := range by {
			res.byFunction = append(res.byFunction, bandShare{fn, ns / int64(len(js))})
		}
		slices.SortFunc(res.byFunction, func(a, b bandShare) int {
			return cmp.Or(cmp.Compare(b.ns, a.ns), strings.Compare(a.fn, b.fn))
		})
		out = append(out, res)
	}
	return len(in), out
}

// writeTails writes attribute's result: per band, the functions whose
// goroutines ran at least a microsecond per join, top ones first.
func writeTails(w io.Writer, inTrace int, bands []bandResult, top int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%d joins lie inside the trace\n", inTrace)
	for _, b := range bands {
		fmt.Fprintf(tw, "%s: %d joins, mean latency %.0f µs; running in them, per join:\n", b.band.name, b.joins, float64(b.meanLat)/1e3)
		for i, s := range b.byFunction {
			if i == top || s.ns < int64(time.Microsecond) {
				break
			}
			fmt.Fprintf(tw, "\t%.0f µs\t  %s\n", float64(s.ns)/1e3, s.fn)
		}
	}
	return tw.Flush()
}

// Run is `osm-bench tails` with its arguments.
func Run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("osm-bench tails", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traceFile := fs.String("trace", "", "a runtime trace of the server over M5's joins (`osm-bench run --trace-dir DIR` writes DIR/O-M5.trace)")
	joinsFile := fs.String("joins", "", "the joins' times (`osm-bench run --joins-out FILE`)")
	server := fs.String("server", "O", "whose joins in the joins file")
	top := fs.Int("top", 12, "functions shown per band")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: osm-bench tails --trace DIR/O-M5.trace --joins FILE [--server O]")
		fmt.Fprintln(stderr, "For the slowest 1% of M5's joins, the p90-p99 and the middle ones, how long each function's goroutines ran in the server during them, per join.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *traceFile == "" || *joinsFile == "" {
		fs.Usage()
		return errors.New("tails: --trace and --joins are both needed")
	}
	tf, err := os.Open(*traceFile)
	if err != nil {
		return err
	}
	defer tf.Close()
	runs, first, last, err := tracedRuns(bufio.NewReader(tf))
	if err != nil {
		return fmt.Errorf("%s: %w", *traceFile, err)
	}
	jf, err := os.Open(*joinsFile)
	if err != nil {
		return err
	}
	defer jf.Close()
	joins, err := readJoins(jf, *server)
	if err != nil {
		return fmt.Errorf("%s: %w", *joinsFile, err)
	}
	inTrace, bands := attribute(runs, first, last, joins, tailBands)
	if inTrace == 0 {
		return fmt.Errorf("none of the %d joins of %s in %s lies inside the trace (%s to %s): were they written by the same run?",
			len(joins), *server, *joinsFile, time.Unix(0, first).UTC().Format(time.RFC3339Nano), time.Unix(0, last).UTC().Format(time.RFC3339Nano))
	}
	return writeTails(stdout, inTrace, bands, *top)
}
