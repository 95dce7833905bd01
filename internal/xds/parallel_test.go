package xds

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"
)

// TestParallelRenderingIsDeterministic renders W's whole configuration
// (1,000 services x 10 endpoints, one proxy each) from scratch with one
// worker and with several, as a full re-render and as every proxy joining
// in one pass, and compares every resource every proxy is given, byte for
// byte: rendering groups in parallel must not change the output. Run under -race it also checks that what the workers share is
// safe for concurrent use (with 200 services, unless OSM_FULL_W is set:
// W takes about 30 s under the race detector).
func TestParallelRenderingIsDeterministic(t *testing.T) {
	services := 1000
	if raceEnabled && os.Getenv("OSM_FULL_W") == "" || testing.Short() {
		services = 200
	}
	p, _, c := benchPublisher(t, services, 10)
	ctx := context.Background()
	type resource struct {
		name, version string
		bytes         []byte
	}
	// render returns, per node and type URL, the set's version and its
	// resources (snapshot), rendered from scratch with n workers.
	var snapshot func() map[string]map[string][]resource
	render := func(n int) map[string]map[string][]resource {
		p.workers = n
		p.forgetContent()
		p.renderAll(ctx)
		return snapshot()
	}
	snapshot = func() map[string]map[string][]resource {
		out := map[string]map[string][]resource{}
		for id := range p.nodes {
			if err := p.RenderError(id); err != "" {
				t.Fatalf("node %s: %s", id, err)
			}
			out[id] = map[string][]resource{}
			for typeURL, set := range c.View(id) {
				rs := []resource{{name: "", version: set.Version()}}
				for _, r := range set.Resources() {
					rs = append(rs, resource{r.Name(), r.Version(), slices.Clone(r.Bytes())})
				}
				out[id][typeURL] = rs
			}
		}
		return out
	}
	// rejoin renders the same from scratch as proxies joining, all in one
	// pass (a fleet reconnecting after a restart), with n workers.
	rejoin := func(n int) map[string]map[string][]resource {
		var proxies []Proxy
		for _, nd := range p.nodes {
			proxies = append(proxies, nd.proxy)
		}
		for _, px := range proxies {
			p.disconnect(px)
		}
		p.step(ctx)
		p.dropIdle()
		p.forgetContent()
		p.workers = n
		for _, px := range proxies {
			p.connect(px)
		}
		p.step(ctx)
		return snapshot()
	}
	one := render(1)
	for _, workers := range []int{2, 4, -2, -4} {
		var got map[string]map[string][]resource
		if workers > 0 {
			got = render(workers)
		} else {
			workers = -workers
			got = rejoin(workers)
		}
		if len(got) != len(one) {
			t.Fatalf("%d workers: %d nodes, one worker %d", workers, len(got), len(one))
		}
		compared := 0
		for id, types := range one {
			if len(got[id]) != len(types) {
				t.Errorf("%d workers: node %s has %d types, with one worker %d", workers, id, len(got[id]), len(types))
				continue
			}
			for typeURL, want := range types {
				have := got[id][typeURL]
				if len(have) != len(want) {
					t.Errorf("%d workers: node %s %s: %d resources, with one worker %d", workers, id, typeURL, len(have)-1, len(want)-1)
					continue
				}
				for i := range want {
					if have[i].name != want[i].name || have[i].version != want[i].version || !bytes.Equal(have[i].bytes, want[i].bytes) {
						t.Errorf("%d workers: node %s %s: resource %d is %q %s, with one worker %q %s (or other bytes)", workers, id, typeURL, i, have[i].name, have[i].version, want[i].name, want[i].version)
					}
					compared++
				}
			}
		}
		if compared < services*20 {
			t.Errorf("%d workers: compared %d resources, want at least %d", workers, compared, services*20)
		}
	}
}
