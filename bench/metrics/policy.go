package metrics

// M11: the xDS cost of a failure-handling policy (issue 62). A
// BackendTrafficPolicy on one service, applied through the API, changes
// the clusters of that service's callers and nothing else: the harness
// times it until the last caller has ACKed, weighs what each got, takes
// the server's CPU per apply, and counts the responses the other proxies
// got (0: only the callers' configuration changed). O only: the peers
// have no policy to apply.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/peer"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/report"
	"github.com/osm-vm/osm-vm/bench/workload"
)

// policyService is the service M11 sets policies on: service 1, whose
// callers are 5% of the proxies (M3's).
const policyService = 1

// policyReps is how many policies M11 applies (each a new connect
// timeout).
const policyReps = 10

// policyTimeout is the connect timeout of M11's seq-th policy: a value
// no other cluster has (the rendered default, 5s, is left out).
func policyTimeout(seq int) time.Duration {
	return time.Second + time.Duration(seq)*time.Millisecond + 7*time.Microsecond
}

// policyMarker is how the cluster carrying the seq-th policy shows in a
// CDS response: its connect_timeout field (4), as protobuf encodes it.
func policyMarker(seq int) []byte {
	d, _ := proto.Marshal(durationpb.New(policyTimeout(seq)))
	return append([]byte{4<<3 | 2, byte(len(d))}, d...)
}

// policyDoc is the seq-th BackendTrafficPolicy of M11.
func policyDoc(w workload.Workload, seq int) string {
	return fmt.Sprintf(`apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: osm-bench-m11, namespace: %s}
spec:
  targetRefs: [{group: "", kind: Service, name: %s}]
  timeouts: {connect: %s}
  circuitBreaker: {maxConnections: 1000, maxRequests: 2000}
  outlierDetection: {consecutiveGatewayErrors: 3, interval: 5s}
`, workload.Namespace, w.ServiceName(policyService), policyTimeout(seq))
}

// measurePolicy is M11 on the connected fleet pcs (pcs[i] is proxy i).
func (m *Measurer) measurePolicy(ctx context.Context, f *fleet.Fleet, srv *peer.Server, pcs []*fleet.ProxyClient, res *Result) error {
	w := m.plan.Workload
	pid := srv.Proc.PID()
	callers := w.AffectedProxies(policyService)
	isCaller := make([]bool, len(pcs))
	for _, p := range callers {
		if p < len(pcs) {
			isCaller[p] = true
		}
	}
	// responses counts the responses the callers (or the others) got.
	responses := func(ofCallers bool) int64 {
		var n int64
		for i, pc := range pcs {
			if isCaller[i] == ofCallers {
				n += pc.Responses.Load()
			}
		}
		return n
	}
	var lasts []float64
	var bytes, clusterBytes int
	var cpu float64
	var stray, toCallers int64
	for rep := range policyReps {
		m.waitQuiet(ctx, pid, res, "M11")
		m.seq++
		seq := m.seq
		pr := &fleet.Probe{Seq: seq, Marker: policyMarker(seq), Acks: make(chan fleet.AckEvent, len(callers))}
		f.Probe.Store(pr)
		others0, callers0 := responses(false), responses(true)
		cpu0, err := process.CPUSeconds(pid)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := srv.Apply(ctx, policyDoc(w, seq)); err != nil {
			f.Probe.Store(nil)
			return fmt.Errorf("M11: apply policy %d: %w", rep, err)
		}
		r, err := m.collect(ctx, pr, t0, len(callers))
		f.Probe.Store(nil)
		if err != nil {
			return fmt.Errorf("M11: %w", err)
		}
		if r.got < len(callers) {
			res.Note("M11: policy %d: %d of %d callers ACKed within %s", rep, r.got, len(callers), m.plan.Settle)
		}
		m.waitQuiet(ctx, pid, res, "M11") // the apply's work counts in its CPU
		cpu1, err := process.CPUSeconds(pid)
		if err != nil {
			return err
		}
		cpu += cpu1 - cpu0
		stray += responses(false) - others0
		toCallers += responses(true) - callers0
		lasts = append(lasts, r.last)
		if r.claBytes > 0 {
			bytes, clusterBytes = r.bytes, r.claBytes
		}
	}
	res.Set("M11.p50", report.Percentile(lasts, 50))
	res.Set("M11.p99", report.Percentile(lasts, 99))
	res.Set("M11.server_cpu_ms", 1000*cpu/float64(len(lasts)))
	res.Set("M11.bytes", float64(bytes))
	res.Set("M11.cluster_bytes", float64(clusterBytes))
	res.Set("M11.affected", float64(len(callers)))
	res.Set("M11.other_responses", float64(stray))
	res.Set("M11.responses_per_caller", float64(toCallers)/float64(len(callers)*len(lasts)))
	return nil
}

// collect waits for the ACKs of pr's change, made at t0, from the
// affected proxies (at most the plan's settle time).
func (m *Measurer) collect(ctx context.Context, pr *fleet.Probe, t0 time.Time, affected int) (changeResult, error) {
	r := changeResult{start: t0}
	timeout := time.NewTimer(m.plan.Settle)
	defer timeout.Stop()
	for r.got < affected {
		select {
		case ev := <-pr.Acks:
			r.got++
			d := ms(ev.At.Sub(t0))
			r.each = append(r.each, d)
			r.last = max(r.last, d)
			if ev.CLABytes > 0 {
				r.bytes, r.claBytes = ev.Bytes, ev.CLABytes
			}
		case <-timeout.C:
			return r, nil
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	return r, nil
}
