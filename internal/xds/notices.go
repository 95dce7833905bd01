package xds

// Who is told that proxies connect and leave, and in what order: the
// watcher (the Publisher), the presence (the mesh model), each told once
// per node as its first stream registers and its last one ends.

import (
	"hash/fnv"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Proxy is one connected proxy (all of its streams with one flavor).
type Proxy struct {
	// NodeID is the cache key: the CN for Envoy, CN+"~grpc" for proxyless gRPC.
	NodeID   string             `json:"nodeId"`
	CN       string             `json:"cn"`
	Identity mesh.ProxyIdentity `json:"-"`
	Service  mesh.MeshService   `json:"service"`
	Flavor   render.Flavor      `json:"flavor"`
	Address  netip.Addr         `json:"address"`
	// GatewayCertDir is a gateway proxy's certificate directory (empty:
	// the default).
	GatewayCertDir string    `json:"gatewayCertDir,omitempty"`
	Connected      time.Time `json:"connected"`
	Streams        int       `json:"streams"`
}

// Watcher is told when the set of connected proxies changes (the
// publisher, which configures each proxy that joins).
type Watcher interface {
	ProxyConnected(p Proxy)
	ProxyDisconnected(p Proxy)
}

// Presence is told from which address a proxy of which service is
// connected, once when it connects and once when it leaves (the mesh
// model, whose participant rule counts connected proxies).
type Presence interface {
	ProxyConnected(svc mesh.MeshService, addr netip.Addr)
	ProxyDisconnected(svc mesh.MeshService, addr netip.Addr)
}

// listenerWatcher, when the Watcher implements it, is told which listener
// names each proxyless gRPC stream asks for, whenever they change, and
// names nil when the stream ends (after which the stream reports nothing
// more). The Publisher answers a name the proxy may not have with a
// refusal listener: gRPC clients take a name left out of an answer as
// "not known yet" and wait 15 s for their own does-not-exist timer.
//
// It is the server that tells, not the cache: subscriptions belong to
// streams, and only the server sees one stream's names apart from
// another's of the same node and knows when a stream ends.
type listenerWatcher interface {
	ListenersRequested(nodeID string, stream uint64, names []string)
}

// notices tells the watcher and the presence of each node that connects
// or leaves, in the order of the changes it reports.
type notices struct {
	log       *slog.Logger
	watcher   Watcher         // may be nil
	listeners listenerWatcher // the watcher, if it implements it
	presence  Presence        // may be nil
	// arrivals orders the connect and disconnect notices of one node: a
	// proxy that reconnects at once may open its new stream while its old
	// one is still closing, and the old stream's "disconnected" told after
	// the new one's "connected" would leave the publisher and the model
	// holding the node as gone. Taken before streamTable.mu, held while
	// the notices of a change under it are told; striped by node ID.
	arrivals [64]sync.Mutex
}

func newNotices(log *slog.Logger, w Watcher, p Presence) *notices {
	lw, _ := w.(listenerWatcher)
	return &notices{log: log, watcher: w, listeners: lw, presence: p}
}

// arrival returns the lock that orders nodeID's connect and disconnect
// notices (see notices.arrivals).
func (n *notices) arrival(nodeID string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return &n.arrivals[h.Sum32()%uint32(len(n.arrivals))]
}

// connected tells that p connected (its first stream registered); the
// caller holds p's arrival lock.
func (n *notices) connected(p Proxy) {
	n.log.Info("proxy connected", "cn", p.CN, "flavor", p.Flavor, "address", p.Address)
	if n.presence != nil {
		n.presence.ProxyConnected(p.Service, p.Address)
	}
	if n.watcher != nil {
		n.watcher.ProxyConnected(p)
	}
}

// disconnected tells that p left (its last stream ended); the caller
// holds p's arrival lock.
func (n *notices) disconnected(p Proxy) {
	n.log.Info("proxy disconnected", "cn", p.CN, "flavor", p.Flavor)
	if n.presence != nil {
		n.presence.ProxyDisconnected(p.Service, p.Address)
	}
	if n.watcher != nil {
		n.watcher.ProxyDisconnected(p)
	}
}
