package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// viewer draws the live view: in place on a terminal, as a short block
// every few seconds otherwise (a log, CI).
type viewer struct {
	w                     io.Writer
	tty                   bool
	note, splitCmd, state string
	envoy                 bool // the -envoy machines run
	start                 time.Time
	lastPrint             time.Time
	window                []buyerSample // bookbuyer's counts, once a second
	polyglot              []machine     // the Python and Node bookbuyers that run
}

type buyerSample struct{ v1, v2 int64 }

func newViewer(w io.Writer, tty bool, note, splitCmd, state string, envoy bool) *viewer {
	return &viewer{w: w, tty: tty, note: note, splitCmd: splitCmd, state: state, envoy: envoy, start: time.Now()}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func pct(n, total int64) string {
	if total == 0 {
		return "  -"
	}
	return fmt.Sprintf("%3.0f%%", 100*float64(n)/float64(total))
}

func (v *viewer) show(ps *procs, proxies []string, proxyErr error) {
	buyer := ps.stat("bookbuyer").Counts
	v.window = append(v.window, buyerSample{buyer["v1"], buyer["v2"]})
	if len(v.window) > 6 {
		v.window = v.window[1:]
	}
	first, last := v.window[0], v.window[len(v.window)-1]
	dv1, dv2 := last.v1-first.v1, last.v2-first.v2
	total := buyer["v1"] + buyer["v2"]

	var b strings.Builder
	fmt.Fprintf(&b, "osm-vm bookstore demo  %s  %s\n", time.Since(v.start).Round(time.Second), v.note)
	fmt.Fprintf(&b, "  bookbuyer   bought %5d   v1 %5d %s   v2 %5d %s   last 5s: v1 %s v2 %s   errors %d   (Go, gRPC-Go)\n",
		total, buyer["v1"], pct(buyer["v1"], total), buyer["v2"], pct(buyer["v2"], total), pct(dv1, dv1+dv2), pct(dv2, dv2+dv1), buyer["errors"])
	if e := ps.stat("bookbuyer").LastError; buyer["errors"] > 0 && e != "" {
		fmt.Fprintf(&b, "              last error: %s\n", e)
	}
	for _, m := range v.polyglot {
		st := ps.stat(m.name())
		c := st.Counts
		n := c["v1"] + c["v2"]
		fmt.Fprintf(&b, "  bookbuyer   bought %5d   v1 %5d %s   v2 %5d %s   errors %d   (%s: %s)\n",
			n, c["v1"], pct(c["v1"], n), c["v2"], pct(c["v2"], n), c["errors"], m.lang, m.name())
		if c["errors"] > 0 && st.LastError != "" {
			fmt.Fprintf(&b, "              last error: %s\n", st.LastError)
		}
	}
	thief := ps.stat("bookthief").Counts
	refusedMesh := thief["deniedMesh"] + thief["failedMesh"]
	refusedDirect := thief["deniedDirect"] + thief["failedDirect"]
	fmt.Fprintf(&b, "  bookthief   refused %5d   (through the mesh %d, PermissionDenied at once by its refusal listener %d; direct mTLS denied by RBAC %d)   stolen %d\n",
		refusedMesh+refusedDirect, refusedMesh, thief["deniedMesh"], thief["deniedDirect"], thief["stolenMesh"]+thief["stolenDirect"])
	v1, v2, wh := ps.stat("bookstore-v1").Counts, ps.stat("bookstore-v2").Counts, ps.stat("bookwarehouse").Counts
	fmt.Fprintf(&b, "  bookstores  v1 sold %d, v2 sold %d; bookwarehouse restocked %d\n", v1["sold"], v2["sold"], wh["restocked"])
	if proxyErr != nil {
		fmt.Fprintf(&b, "  proxies     debug API: %v\n", proxyErr)
	} else {
		fmt.Fprintf(&b, "  proxies     %d connected: %s\n", len(proxies), byFlavor(proxies))
	}
	fmt.Fprintf(&b, "  try         %s\n              and watch the last-5s split move (back: split-80-20.yaml)\n", v.splitCmd)
	fmt.Fprintf(&b, "  logs        %s/server.log, %s/<service>/{agent,app}.log   Ctrl-C stops everything\n", v.state, v.state)
	if v.envoy {
		fmt.Fprintf(&b, "              Envoy's log is in %s/<service>-envoy/agent.log\n", v.state)
	}

	if v.tty {
		fmt.Fprint(v.w, "\033[H\033[2J"+b.String())
		return
	}
	if time.Since(v.lastPrint) >= 5*time.Second {
		fmt.Fprint(v.w, b.String()+"\n")
		v.lastPrint = time.Now()
	}
}

// byFlavor shortens "<service> (<flavor>)" entries to one list of
// services per flavour: "bookbuyer, bookthief (grpc); bookbuyer (envoy)".
func byFlavor(proxies []string) string {
	var flavors []string
	services := map[string][]string{}
	for _, p := range proxies {
		svc, flavor, ok := strings.Cut(strings.TrimSuffix(p, ")"), " (")
		if !ok {
			svc, flavor = p, "?"
		}
		if _, seen := services[flavor]; !seen {
			flavors = append(flavors, flavor)
		}
		services[flavor] = append(services[flavor], svc)
	}
	parts := make([]string, len(flavors))
	for i, f := range flavors {
		parts[i] = strings.Join(services[f], ", ") + " (" + f + ")"
	}
	return strings.Join(parts, "; ")
}
