package metrics

// MeasureM4 is the hook for M4 (config generation for W: full ≤ 50 ms,
// incremental ≤ 1 ms, one marshal per resource version). It is an
// in-process figure: time internal/xds's render-and-publish function for
// W's snapshot (full), then for W with one endpoint changed (incremental),
// and read the cache's Stats().Marshals for the marshal count. It returns
// the values under "M4.full" and "M4.incremental" (ms), or a note saying
// why they were not measured.
//
// M4 is measured by the Go micro-benchmarks BenchmarkFullGeneration and
// BenchmarkIncrementalEndpointChange in internal/xds (W, one proxy per
// service, with marshals/op), which `make bench` runs after the harness.
func MeasureM4() (map[string]float64, string) {
	return nil, "M4 is measured in-process by internal/xds BenchmarkFullGeneration and BenchmarkIncrementalEndpointChange (see bench/results/micro.txt)"
}
