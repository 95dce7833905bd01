package xds

// One authenticated stream: the proxy certificate it is bound to, the
// proxy its first node registered it as, and, for a proxyless gRPC
// stream, the listener names it asks for.

import (
	"context"
	"crypto/x509"
	"slices"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/osm-vm/osm-vm/internal/certificate"
)

type stream struct {
	id     uint64
	ctx    context.Context
	cn     string
	peer   []*x509.Certificate     // the verified chain, the proxy's certificate first
	rec    certificate.ProxyRecord // the proxy's record when the stream opened, until its claim
	cancel context.CancelCauseFunc
	proxy  *Proxy      // set by the first request's node
	expiry *time.Timer // ends the stream when peer expires

	// The listener names a gRPC stream asks for, as last reported to the
	// listener watcher; done once the stream reported its end.
	ldsMu sync.Mutex
	lds   map[string]struct{}
	done  bool
}

// noteListeners tells lw (when not nil) when the listener names the
// stream asks for change (a SotW request names them all; a Delta request
// subscribes and unsubscribes some).
func (st *stream) noteListeners(lw listenerWatcher, req any) {
	if lw == nil {
		return
	}
	st.ldsMu.Lock()
	defer st.ldsMu.Unlock()
	if st.done {
		return
	}
	var next map[string]struct{}
	switch r := req.(type) {
	case *discovery.DiscoveryRequest:
		names := r.GetResourceNames()
		if len(names) == len(st.lds) && !slices.ContainsFunc(names, func(n string) bool { _, ok := st.lds[n]; return !ok }) {
			return // unchanged (as in most requests: ACKs)
		}
		next = make(map[string]struct{}, len(names))
		for _, n := range names {
			next[n] = struct{}{}
		}
	case *discovery.DeltaDiscoveryRequest:
		if len(r.GetResourceNamesSubscribe()) == 0 && len(r.GetResourceNamesUnsubscribe()) == 0 {
			return
		}
		next = make(map[string]struct{}, len(st.lds)+len(r.GetResourceNamesSubscribe()))
		for n := range st.lds {
			next[n] = struct{}{}
		}
		for _, n := range r.GetResourceNamesSubscribe() {
			next[n] = struct{}{}
		}
		for _, n := range r.GetResourceNamesUnsubscribe() {
			delete(next, n)
		}
	default:
		return
	}
	delete(next, "*") // the wildcard is no name
	if len(next) == 0 && len(st.lds) == 0 {
		return
	}
	st.lds = next
	names := make([]string, 0, len(next))
	for n := range next {
		names = append(names, n)
	}
	lw.ListenersRequested(st.proxy.NodeID, st.id, names)
}

// endListeners tells lw (when not nil) that the ended stream asks for no
// listener names, if it asked for any; noteListeners tells nothing more.
func (st *stream) endListeners(lw listenerWatcher) {
	st.ldsMu.Lock()
	defer st.ldsMu.Unlock()
	if len(st.lds) > 0 && lw != nil {
		lw.ListenersRequested(st.proxy.NodeID, st.id, nil)
	}
	st.lds, st.done = nil, true
}
