package localxds

// Observing the endpoint's streams, for osm-agent's metrics.

import (
	"context"
	"sync/atomic"
)

// Observer is told what the local endpoint's streams do, so that osm-agent
// can export the proxyless xDS connection state beside Envoy's. Its
// methods are called on the streams' goroutines and must not block.
type Observer interface {
	// LocalStream is told +1 when an application opens a stream to the
	// local endpoint and -1 when that stream ends.
	LocalStream(delta int)
	// UpstreamUp is told that an upstream stream to osm-server answered
	// for the first time.
	UpstreamUp()
	// UpstreamDown is told that an upstream stream that had answered
	// ended. lost is true when it ended on the server's or the network's
	// side, not because its application left: the application's stream
	// then reconnects.
	UpstreamDown(lost bool)
}

type nopObserver struct{}

func (nopObserver) LocalStream(int)   {}
func (nopObserver) UpstreamUp()       {}
func (nopObserver) UpstreamDown(bool) {}

func (p *Proxy) observer() Observer {
	if p.opts.Observer == nil {
		return nopObserver{}
	}
	return p.opts.Observer
}

// localStream tells the observer of a local stream opening and returns
// the call that tells it of its end.
func (p *Proxy) localStream() func() {
	o := p.observer()
	o.LocalStream(1)
	return func() { o.LocalStream(-1) }
}

// observed wraps an upstream stream opened with ctx (and its error) so
// that the observer learns when it is up (its first answer) and when it
// ends: at a Recv error, or when ctx ends while nobody reads it.
func observed[Req, Resp any](p *Proxy, ctx context.Context, up upstream[Req, Resp], err error) (upstream[Req, Resp], error) {
	if err != nil {
		return nil, err
	}
	u := &observedUpstream[Req, Resp]{upstream: up, ctx: ctx, o: p.observer()}
	context.AfterFunc(ctx, func() { u.down(false) })
	return u, nil
}

type observedUpstream[Req, Resp any] struct {
	upstream[Req, Resp]
	ctx context.Context
	o   Observer
	// state: 0 not answered yet, 1 up, 2 ended (told once).
	state atomic.Int32
}

func (u *observedUpstream[Req, Resp]) Recv() (Resp, error) {
	m, err := u.upstream.Recv()
	if err != nil {
		u.down(u.ctx.Err() == nil)
		return m, err
	}
	if u.state.CompareAndSwap(0, 1) {
		u.o.UpstreamUp()
		if u.ctx.Err() != nil { // ended while this answer arrived
			u.down(false)
		}
	}
	return m, nil
}

func (u *observedUpstream[Req, Resp]) down(lost bool) {
	if u.state.CompareAndSwap(1, 2) {
		u.o.UpstreamDown(lost)
	}
}
