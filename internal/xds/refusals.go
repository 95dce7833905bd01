package xds

import (
	"slices"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// refusal is a refusal listener a node holds and the gRPC code it
// fails RPCs with.
type refusal struct {
	res  *cache.Resource
	code uint32
}

// Refusal bounds: a node is given at most maxRefusals refusal listeners
// (the first by name), so a client asking for many names cannot make the
// server render without bound; the names beyond wait for gRPC's own
// does-not-exist timer. A name longer than maxRefusalName (no
// <svc>.<ns>.mesh:<port> is) is not answered with one either.
const (
	maxRefusals    = 256
	maxRefusalName = 300
)

// refusalNames returns the listener names n's gRPC streams ask for that
// real (the listeners it is given) does not hold, sorted, at most
// maxRefusals: a caller dialling an upstream it may not call, or a name
// that is no service, is given a refusal listener under that name, which
// fails its RPCs at once (gRPC clients otherwise wait 15 s for their
// does-not-exist timer). Server listener names (bound to an address) and
// over-long names get none.
func (p *Publisher) refusalNames(n *node, real func(string) bool) []string {
	streams := p.wants[n.proxy.NodeID]
	if len(streams) == 0 || n.proxy.Flavor != render.GRPC {
		n.capped = false
		return nil
	}
	var names []string
	for _, ns := range streams {
		for _, name := range ns {
			if len(name) <= maxRefusalName && !render.PerProxy(name) && !real(name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	if len(streams) > 1 {
		names = slices.Compact(names)
	}
	if capped := len(names) > maxRefusals; capped != n.capped {
		n.capped = capped
		if capped {
			p.log.Warn("a gRPC client asks for more listeners it may not have than are answered with refusals; the rest wait for its does-not-exist timer",
				"node", n.proxy.NodeID, "names", len(names), "answered", maxRefusals, "first_unanswered", names[maxRefusals])
		}
	}
	if len(names) > maxRefusals {
		names = names[:maxRefusals]
	}
	return names
}

// refusals returns the refusal listeners n is to hold (see refusalNames),
// interned, reusing those it holds where the code is the same.
func (p *Publisher) refusals(n *node, real func(string) bool) (map[string]refusal, error) {
	names := p.refusalNames(n, real)
	if len(names) == 0 {
		return nil, nil
	}
	p.refusalOnce.Do(func() {
		c, err := p.cache.NewResource(render.RefusalClusterName, render.RefusalCluster())
		if err != nil {
			p.refusalErr = err
			return
		}
		cla := render.RefusalLoadAssignment()
		e, err := p.cache.NewResource(cla.GetClusterName(), cla)
		if err != nil {
			p.refusalErr = err
			return
		}
		p.refusalCluster, p.refusalCLA = c, e
	})
	if p.refusalErr != nil {
		return nil, p.refusalErr
	}
	m := p.mesh()
	out := make(map[string]refusal, len(names))
	for _, name := range names {
		code := render.RefusalCode(m, name)
		if r, ok := n.refused[name]; ok && r.code == code {
			out[name] = r
			continue
		}
		l, err := render.RefusalListener(m, name)
		if err != nil {
			return nil, err
		}
		res, err := p.cache.NewResource(name, l)
		if err != nil {
			return nil, err
		}
		out[name] = refusal{res: p.interned.Intern(res), code: code}
	}
	p.retainRefusals(out)
	return out, nil
}

// refusalsChanged reports whether n's refusal listeners differ from those
// it would be given now (without rendering them).
func (p *Publisher) refusalsChanged(n *node) bool {
	real := func(name string) bool { _, refused := n.refused[name]; return !refused && n.lds.Get(name) != nil }
	names := p.refusalNames(n, real)
	if len(names) != len(n.refused) {
		return true
	}
	m := p.mesh()
	for _, name := range names {
		if r, ok := n.refused[name]; !ok || r.code != render.RefusalCode(m, name) {
			return true
		}
	}
	return false
}

func (p *Publisher) retainRefusals(rs map[string]refusal) {
	for _, r := range rs {
		p.interned.Retain(r.res)
	}
}

// releaseRefusals counts one holder less of each refusal listener of rs
// (refusals counted one more of each it returned).
func (p *Publisher) releaseRefusals(rs map[string]refusal) {
	if len(rs) == 0 {
		return
	}
	out := make([]*cache.Resource, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.res)
	}
	p.interned.Release(out...)
}

// withRefusalEDS returns the EDS set to publish to n from its group's
// set: with the refusal cluster's (empty) load assignment when n holds
// refusal listeners.
func (p *Publisher) withRefusalEDS(n *node, set *cache.Set) *cache.Set {
	if len(n.refused) == 0 {
		return set
	}
	return p.withRefusalEDSSet(set)
}

func (p *Publisher) withRefusalEDSSet(set *cache.Set) *cache.Set {
	out, err := set.With(p.refusalCLA)
	if err != nil { // cannot fail: the resource is not nil
		return set
	}
	return out
}
