package xds

import (
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// publishEDS rebuilds the changed services' endpoints and publishes them
// to the proxies that depend on them in cache Batches of edsWakeEvery
// proxies: each batch's streams are woken when it ends, and send on the
// other cores while the publisher answers the next. Waking each stream as
// it is answered put the publisher behind thousands of runnable streams
// whenever it was preempted or waited for the cache's lock; waking them
// all at the end left the other cores idle while it answered 10,000
// proxies (docs/performance.md, the sixteenth and seventeenth rounds).
func (p *Publisher) publishEDS(changed []mesh.MeshService) {
	end := p.cache.Batch()
	defer func() { end() }()
	published := 0
	m := p.mesh()
	if p.dependents == nil {
		p.dependents = map[mesh.MeshService][]dependent{}
		for _, g := range p.groups {
			if g.err != nil || g.cds == nil {
				continue
			}
			for i, sl := range g.eds.Slots() {
				p.dependents[sl.Service()] = append(p.dependents[sl.Service()], dependent{g, i})
			}
		}
	}
	var done map[*group]bool // a group that depends on several changed services is published once
	if len(changed) > 1 {
		done = map[*group]bool{}
	}
	for _, svc := range changed {
		deps := p.dependents[svc]
		if len(deps) == 0 {
			continue
		}
		sl, _ := p.eds.Get(svc) // held by deps
		r, err := p.eds.Resource(m, sl)
		if err != nil {
			p.log.Error("render endpoints", "service", svc, "err", err)
			continue
		}
		for _, d := range deps {
			g := d.g
			var set *cache.Set
			switch {
			case done != nil:
				if done[g] {
					continue
				}
				done[g] = true
				set, err = g.eds.Set(p.eds, m)
			case g.eds.Built():
				// The one service changed: its slot's resource is replaced.
				set, err = g.eds.Replace(d.slot, r)
			default:
				set, err = g.eds.Set(p.eds, m)
			}
			if err != nil {
				p.log.Error("render endpoints", "service", g.key.service, "err", err)
				continue
			}
			for id, n := range g.nodes {
				if n.refused.Len() > 0 {
					p.publish(id, resource.EndpointType, p.refusals.WithEDS(set))
				} else {
					p.publish(id, resource.EndpointType, set)
				}
				if published++; published%p.edsWakeEvery == 0 {
					end()
					end = p.cache.Batch()
				}
			}
		}
	}
}
