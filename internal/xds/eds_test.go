package xds

import (
	"context"
	"net/netip"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// streamEvents records, in order, the responses delivered to and the
// wake-ups of every stream of a test (the cache calls both on the
// publisher's goroutine).
type streamEvents struct {
	log       []byte // 'D' for a delivery, 'W' for a wake-up
	delivered map[string]gcpcache.Response
	woken     map[string]int
}

type eventReceiver struct {
	ev   *streamEvents
	node string
}

func (r eventReceiver) Deliver(resp gcpcache.Response) bool {
	r.ev.log = append(r.ev.log, 'D')
	r.ev.delivered[r.node] = resp
	return true
}

func (r eventReceiver) Wake() {
	r.ev.log = append(r.ev.log, 'W')
	r.ev.woken[r.node]++
}

// An endpoint change's publishing wakes the streams it answered in waves
// of edsWakeEvery (so that they send while it answers the next ones), and
// every stream it answered once.
func TestEndpointChangeWakesStreamsInWaves(t *testing.T) {
	const services = 30 // service 0's callers: the 29 others
	for _, tc := range []struct {
		every     int
		wantWaves int
	}{{every: 4, wantWaves: 8}, {every: 1000, wantWaves: 1}} {
		p, cat, c := benchPublisher(t, services, 3)
		p.edsWakeEvery = tc.every
		ev := &streamEvents{delivered: map[string]gcpcache.Response{}, woken: map[string]int{}}
		// Each proxy watches its load assignments and ACKs the first
		// answer: its watch then waits for a change.
		for id := range p.nodes {
			set := c.View(id)[resource.EndpointType]
			if set == nil {
				continue
			}
			var names []string
			for _, r := range set.Resources() {
				names = append(names, r.Name())
			}
			rcv := eventReceiver{ev: ev, node: id}
			sub := gcpstream.NewSotwSubscription(names, true)
			req := &gcpcache.Request{Node: &corev3.Node{Id: id}, TypeUrl: resource.EndpointType, ResourceNames: names}
			w := c.WatchSotw(req, sub, nil, rcv, nil)
			first := ev.delivered[id]
			if first == nil {
				t.Fatalf("%s: no first answer", id)
			}
			sub.SetReturnedResources(first.GetReturnedResources())
			ack := &gcpcache.Request{Node: req.Node, TypeUrl: req.TypeUrl, ResourceNames: names, VersionInfo: "acked"}
			c.WatchSotw(ack, sub, first, rcv, w)
		}
		*ev = streamEvents{delivered: map[string]gcpcache.Response{}, woken: map[string]int{}}

		cat.SetEndpoints("bench", benchService(0), []mesh.Endpoint{{IP: netip.MustParseAddr("10.200.0.1"), Port: 9000}})
		p.step(context.Background())

		if len(ev.delivered) != services-1 {
			t.Fatalf("every %d: %d streams answered, want %d (service 0's callers)", tc.every, len(ev.delivered), services-1)
		}
		for id := range ev.delivered {
			if ev.woken[id] != 1 {
				t.Errorf("every %d: %s woken %d times, want once", tc.every, id, ev.woken[id])
			}
		}
		// The log is waves of deliveries each followed by their
		// wake-ups: DDDDWWWW DDDDWWWW ... D W.
		waves, i := 0, 0
		for i < len(ev.log) {
			d := 0
			for ; i < len(ev.log) && ev.log[i] == 'D'; i++ {
				d++
			}
			w := 0
			for ; i < len(ev.log) && ev.log[i] == 'W'; i++ {
				w++
			}
			if d != w || d == 0 || (d != tc.every && i < len(ev.log)) {
				t.Fatalf("every %d: wave %d has %d deliveries and %d wake-ups (log %s)", tc.every, waves+1, d, w, ev.log)
			}
			waves++
		}
		if waves != tc.wantWaves {
			t.Errorf("every %d: %d waves of wake-ups, want %d (log %s)", tc.every, waves, tc.wantWaves, ev.log)
		}
	}
}
