package main

import (
	"slices"
	"time"
)

// summary is what -json prints when the demo ends.
type summary struct {
	Proxy           string  `json:"proxy"`
	DurationSeconds float64 `json:"durationSeconds"`
	// StoppedBy says what ended the demo: "purchases" (-until-purchases
	// reached), "duration" (-duration) or "interrupt" (Ctrl-C).
	StoppedBy string `json:"stoppedBy,omitempty"`
	Bookbuyer struct {
		V1        int64  `json:"v1"`
		V2        int64  `json:"v2"`
		Errors    int64  `json:"errors"`
		LastError string `json:"lastError,omitempty"`
	} `json:"bookbuyer"`
	Bookthief struct {
		Refused       int64  `json:"refused"`
		RefusedMesh   int64  `json:"refusedMesh"`
		RefusedDirect int64  `json:"refusedDirect"`
		DeniedMesh    int64  `json:"deniedMesh"` // of RefusedMesh, PermissionDenied by the refusal listener
		DeniedDirect  int64  `json:"deniedDirect"`
		Stolen        int64  `json:"stolen"`
		LastError     string `json:"lastError,omitempty"`
	} `json:"bookthief"`
	Sold      map[string]int64 `json:"sold"`
	Restocked int64            `json:"restocked"`
	// Polyglot are the counts of the Python and Node bookbuyers that ran,
	// by their directory name (bookbuyer-python, bookbuyer-node).
	Polyglot map[string]map[string]int64 `json:"polyglot,omitempty"`
	// Proxies is the largest set of connected proxies seen at once, as
	// "<service> (<flavor>)".
	Proxies []string `json:"proxies"`
	// AgentMetrics are the agents whose metrics endpoint answered, the
	// most seen at once.
	AgentMetrics []string `json:"agentMetrics"`
	// Processes are the pids of every process the demo started.
	Processes []int `json:"processes"`
}

func (s *summary) observeProxies(p []string) {
	if len(p) >= len(s.Proxies) {
		s.Proxies = slices.Clone(p)
	}
}

func (s *summary) observeAgentMetrics(names []string) {
	if len(names) >= len(s.AgentMetrics) {
		s.AgentMetrics = names
	}
}

func (s *summary) snapshot(ps *procs) {
	buyer := ps.stat("bookbuyer")
	b := buyer.Counts
	s.Bookbuyer.V1, s.Bookbuyer.V2, s.Bookbuyer.Errors = b["v1"], b["v2"], b["errors"]
	s.Bookbuyer.LastError = buyer.LastError
	thief := ps.stat("bookthief")
	t := thief.Counts
	s.Bookthief.RefusedMesh = t["deniedMesh"] + t["failedMesh"]
	s.Bookthief.RefusedDirect = t["deniedDirect"] + t["failedDirect"]
	s.Bookthief.DeniedDirect = t["deniedDirect"]
	s.Bookthief.DeniedMesh = t["deniedMesh"]
	s.Bookthief.Refused = s.Bookthief.RefusedMesh + s.Bookthief.RefusedDirect
	s.Bookthief.Stolen = t["stolenMesh"] + t["stolenDirect"]
	s.Bookthief.LastError = thief.LastError
	s.Sold = map[string]int64{
		"bookstore-v1": ps.stat("bookstore-v1").Counts["sold"],
		"bookstore-v2": ps.stat("bookstore-v2").Counts["sold"],
	}
	s.Restocked = ps.stat("bookwarehouse").Counts["restocked"]
	for _, m := range polyglotMachines {
		if c := ps.stat(m.name()).Counts; c != nil {
			if s.Polyglot == nil {
				s.Polyglot = map[string]map[string]int64{}
			}
			s.Polyglot[m.name()] = c
		}
	}
}

// enough reports whether the traffic the demo shows has all happened at
// least n times over: the Go bookbuyer and each of the polyglot ones
// bought n books, some from v2; bookthief was refused n/2 times through
// the mesh and n/2 directly; bookwarehouse restocked.
func (s *summary) enough(n int64, polyglot []machine) bool {
	bought := func(v1, v2 int64) bool { return v1+v2 >= n && v2 > 0 }
	if !bought(s.Bookbuyer.V1, s.Bookbuyer.V2) {
		return false
	}
	for _, m := range polyglot {
		c := s.Polyglot[m.name()]
		if !bought(c["v1"], c["v2"]) {
			return false
		}
	}
	return s.Bookthief.RefusedMesh >= n/2 && s.Bookthief.RefusedDirect >= n/2 && s.Restocked > 0
}

// finish records the final counts (the apps print them as they exit),
// the duration and the processes.
func (s *summary) finish(ps *procs, d time.Duration) {
	s.snapshot(ps)
	s.DurationSeconds = d.Seconds()
	s.Processes = ps.pids()
}
