package xds

// The server's record of its live streams and of the proxies they belong
// to: admission (stopping, the per-identity bound), registration of a
// stream's proxy, removal, and ending streams by CN, node or all at once.

import (
	"net"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// streamTable holds the live streams and the connected proxies under one
// lock, so that a stream, its identity's count and its proxy's stream
// count change together. A node's arrival lock (notices.arrival) is taken
// before mu, never after.
type streamTable struct {
	mu      sync.Mutex
	streams map[*stream]struct{}
	proxies map[string]*Proxy // by node ID
	limit   streamLimit       // live streams by certificate CN, those of streams
	lastID  uint64
	stopped bool // Register's ctx has ended
}

func newStreamTable(limit streamLimit) *streamTable {
	return &streamTable{streams: map[*stream]struct{}{}, proxies: map[string]*Proxy{}, limit: limit}
}

// add admits st (and gives it its ID), or refuses it: Unavailable while
// the server stops, ResourceExhausted beyond its identity's bound (see
// streamLimit). peer is the connection's address, for the log.
func (t *streamTable) add(st *stream, peer net.Addr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return status.Error(codes.Unavailable, "xDS server is stopping")
	}
	if err := t.limit.take(st.cn, peer); err != nil {
		return err
	}
	t.lastID++
	st.id = t.lastID
	t.streams[st] = struct{}{}
	return nil
}

// join registers st as a stream of the proxy p describes (by its node ID),
// adding p when it is the node's first stream (first), and returns the
// proxy as it is now.
func (t *streamTable) join(st *stream, p Proxy) (now Proxy, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	px, ok := t.proxies[p.NodeID]
	if !ok {
		added := p
		px = &added
		t.proxies[p.NodeID] = px
	}
	px.Streams++
	st.proxy = px
	return *px, !ok
}

// nodeOf returns the node ID st registered as, "" before its first node.
func (t *streamTable) nodeOf(st *stream) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st.proxy == nil {
		return ""
	}
	return st.proxy.NodeID
}

// remove removes a finished stream, and its proxy when it was the last
// stream (gone); stopped says the server was stopping.
func (t *streamTable) remove(st *stream) (gone *Proxy, stopped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.streams, st)
	t.limit.release(st.cn)
	if p := st.proxy; p != nil {
		p.Streams--
		if p.Streams == 0 {
			delete(t.proxies, p.NodeID)
			gone = p
		}
	}
	return gone, t.stopped
}

// cancel ends, with cause, the live streams match selects, and returns
// how many; match runs under the table's lock.
func (t *streamTable) cancel(match func(*stream) bool, cause error) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for st := range t.streams {
		if match(st) {
			st.cancel(cause)
			n++
		}
	}
	return n
}

// stop ends every live stream and refuses new ones.
func (t *streamTable) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for st := range t.streams {
		st.cancel(nil)
	}
}

// live returns the live streams.
func (t *streamTable) live() []*stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*stream, 0, len(t.streams))
	for st := range t.streams {
		out = append(out, st)
	}
	return out
}

// connected returns the connected proxies, sorted by node ID.
func (t *streamTable) connected() []Proxy {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Proxy, 0, len(t.proxies))
	for _, p := range t.proxies {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// eachProxy calls f, under the table's lock, with the flavour and service
// of every connected proxy.
func (t *streamTable) eachProxy(f func(render.Flavor, mesh.MeshService)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.proxies {
		f(p.Flavor, p.Service)
	}
}

// opened returns how many streams were admitted since the server started.
func (t *streamTable) opened() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastID
}
