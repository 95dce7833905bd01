package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Round is one round's measurement of one server.
type Round struct {
	Values    map[string]float64
	Latencies map[string][]float64 // the samples of PooledFigures
	Notes     []string
	Err       error
}

// MergeRounds makes one server's report from its rounds: each figure is
// the median of the rounds that measured it (the nearest-rank 50th
// percentile: the lower middle of an even count, so a figure is always one
// a round measured), except PooledFigures, each the percentile of every
// round's samples together; every round's figures are kept as samples
// when there was more than one, and notes say which round they come from.
// A server is available when one round measured it.
func MergeRounds(name, role string, rounds []Round) ServerReport {
	sr := ServerReport{Name: name, Role: role, Values: map[string]float64{}}
	by := map[string][]float64{}
	pooled := map[string][]float64{}
	var reasons []string
	for i, r := range rounds {
		if r.Err != nil {
			reasons = append(reasons, r.Err.Error())
			if len(rounds) > 1 {
				sr.Notes = append(sr.Notes, fmt.Sprintf("round %d: not measured: %v", i+1, r.Err))
			}
			continue
		}
		sr.Available = true
		for k, v := range r.Values {
			by[k] = append(by[k], v)
		}
		for k, v := range r.Latencies {
			pooled[k] = append(pooled[k], v...)
		}
		for _, n := range r.Notes {
			if len(rounds) > 1 {
				n = fmt.Sprintf("round %d: %s", i+1, n)
			}
			sr.Notes = append(sr.Notes, n)
		}
	}
	if !sr.Available {
		sr.Reason = strings.Join(slices.Compact(reasons), "; ")
		sr.Notes = nil
		return sr
	}
	if len(rounds) > 1 {
		sr.Samples = by
	}
	for k, vs := range by {
		sr.Values[k] = Percentile(vs, 50)
		if f, ok := PooledFigures[k]; ok && len(pooled[f.samples]) > 0 {
			sr.Values[k] = Percentile(pooled[f.samples], f.pct)
		}
	}
	return sr
}

// PooledFigures are the figures that are percentiles of a round's samples
// (the Latencies of a round): with --rounds, each is that percentile of every
// round's samples together, not the median of the rounds' percentiles.
// A join's tail on a shared 2-core machine moves with what the machine is
// doing in the minutes a round takes: six rounds of 1,000 joins had p99s
// from 0.54 to 1.38 times L-mux's, while the p99 of the 6,000 joins
// together moved by a few percent (docs/performance.md, thirteenth round).
var PooledFigures = map[string]struct {
	samples string
	pct     float64
}{
	"M5.p50": {"M5", 50},
	"M5.p99": {"M5", 99},
}

// Percentile is the nearest-rank percentile of xs (NaN when empty).
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
