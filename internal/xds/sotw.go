package xds

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcpstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// sotwStream serves one state-of-the-world ADS stream, as
// go-control-plane's sotw server does (the same nonce, subscription and
// wildcard rules), with less per stream and per request: no reflect.Select
// over a channel per watch, no channel and watch allocated per request,
// and the subscription rebuilt only when the names asked for change. A
// stream costs two goroutines besides gRPC's: the handler, which sends,
// and a reader, which receives and handles each request itself (so that
// cancelling the stream's context, a revocation or Disconnect, ends the
// handler and with it the RPC while a Recv is pending). The reader handed
// each request to the handler until the twenty-seventh round of issue 26:
// a wake-up of another goroutine per ACK, 10,000 of them per endpoint
// change (in the history of docs/performance.md).
//
// The cache answers a watch by calling Deliver, with the cache locked,
// which queues the response, and Wake, which wakes the handler. Responses to a
// watch that a later request of the same type replaced are dropped, as
// go-control-plane drops them with the replaced watch's channel.
type sotwStream struct {
	gs    discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	cache sotwCache

	// state guards what follows: the reader's requests and the handler's
	// sends both read and write it.
	state sync.Mutex
	// closed: the handler has returned and closed the watches; a request
	// still being handled opens none.
	closed bool
	node   *corev3.Node
	nonce  int64
	// types is the stream's state of each type URL the cache knows
	// (cache.TypeURLs' order), other of any other type URL: looking a
	// response's type up by its 67-byte URL in a map was a sixth of a
	// send's CPU in an endpoint change (issue 26's twenty-seventh round in
	// the history of docs/performance.md).
	types [len(cache.TypeURLs)]*sotwType
	other map[string]*sotwType

	// wire: the gRPC server's codec is wireCodec, so responses are sent
	// as the cache encoded them.
	wire bool

	mu      sync.Mutex
	pending []gcpcache.Response
	wake    chan struct{} // capacity 1: responses are pending
}

// sotwCache is what a SotW stream needs of the cache.
type sotwCache interface {
	WatchSotw(req *gcpcache.Request, sub gcpcache.Subscription, held gcpcache.Response, rcv cache.Receiver, replace *cache.Watch) *cache.Watch
}

// wireAnswer is a response the cache encoded (see wireCodec).
type wireAnswer interface {
	Wire() (*cache.Wire, error)
}

// sotwType is a stream's state for one type URL.
type sotwType struct {
	sub   gcpstream.Subscription
	names []string          // the resource names sub was last set from
	watch *gcpcache.Request // the request of the open watch
	open  *cache.Watch      // the open watch (closed by its Cancel)
	nonce string            // of the last response sent
	// held is the last response sent, while the names asked for are
	// those it answered: sub holds its returned resources, a map shared
	// with other streams (cloned before a subscription change edits it).
	held gcpcache.Response
}

func newSotwStream(gs discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer, c sotwCache) *sotwStream {
	return &sotwStream{gs: gs, cache: c, wake: make(chan struct{}, 1)}
}

// typeState returns the stream's state of typeURL, nil before its first
// request.
func (h *sotwStream) typeState(typeURL string) *sotwType {
	if i := cache.TypeIndex(typeURL); i >= 0 {
		return h.types[i]
	}
	return h.other[typeURL]
}

// closeWatches closes the stream's open watches, and any a request
// still being handled would open.
func (h *sotwStream) closeWatches() {
	h.state.Lock()
	defer h.state.Unlock()
	h.closed = true
	for _, t := range h.types {
		if t != nil {
			t.open.Cancel()
		}
	}
	for _, t := range h.other {
		t.open.Cancel()
	}
}

// setTypeState sets the stream's state of typeURL.
func (h *sotwStream) setTypeState(typeURL string, t *sotwType) {
	if i := cache.TypeIndex(typeURL); i >= 0 {
		h.types[i] = t
		return
	}
	if h.other == nil {
		h.other = map[string]*sotwType{}
	}
	h.other[typeURL] = t
}

// serve handles requests from recv and sends responses until ctx is done
// or recv fails; it returns an error only for a request it refuses or a
// failed send.
func (h *sotwStream) serve(ctx context.Context, recv func() (*discovery.DiscoveryRequest, error)) error {
	defer h.closeWatches()
	// done carries the reader's end: nil when recv failed, or the error
	// of a request refused.
	done := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				done <- nil
				return
			}
			// A request answering a response (an ACK, mostly) is
			// bookkeeping the proxy does not wait for: it yields to the
			// goroutines already runnable, which after an endpoint
			// change are the other streams' sends. Its watch opens a
			// moment later; a response it would get waits no longer
			// than that. (M2, osm-server alone, three pairs taking
			// turns: p99 713 / 636 / 707 ms against 891 / 754 / 892;
			// issue 26's seventeenth round in the history of docs/performance.md.)
			if req.GetResponseNonce() != "" {
				runtime.Gosched()
			}
			if err := h.request(req); err != nil {
				done <- err
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			return err
		case <-h.wake:
			if err := h.flush(); err != nil {
				return err
			}
		}
	}
}

// Deliver takes a watch's response (called by the cache, locked).
func (h *sotwStream) Deliver(r gcpcache.Response) bool {
	h.mu.Lock()
	h.pending = append(h.pending, r)
	h.mu.Unlock()
	return true
}

// Wake has the handler send what was delivered (called by the cache,
// unlocked).
func (h *sotwStream) Wake() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// request opens the watch a request asks for, after go-control-plane's
// rules: the first request carries the node; a request whose nonce is not
// the last one sent for its type is stale and ignored.
func (h *sotwStream) request(req *discovery.DiscoveryRequest) error {
	if req == nil {
		return status.Errorf(codes.Unavailable, "empty request")
	}
	h.state.Lock()
	defer h.state.Unlock()
	if h.closed {
		return nil
	}
	if req.GetNode() != nil {
		h.node = req.GetNode()
	} else {
		req.Node = h.node
	}
	typeURL := req.GetTypeUrl()
	if typeURL == "" {
		return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
	}
	t := h.typeState(typeURL)
	switch {
	case t == nil:
		t = &sotwType{sub: gcpstream.NewSotwSubscription(req.GetResourceNames(), true), names: slices.Clone(req.GetResourceNames())}
		h.setTypeState(typeURL, t)
	case t.nonce != "" && req.GetResponseNonce() != t.nonce:
		return nil // stale: an answer to an earlier response
	case !slices.Equal(req.GetResourceNames(), t.names):
		// The open watch reads sub: it is closed before sub changes.
		t.open.Cancel()
		t.open = nil
		t.sub.SetReturnedResources(maps.Clone(t.sub.ReturnedResources()))
		t.held = nil
		t.sub.SetResourceSubscription(req.GetResourceNames())
		t.names = slices.Clone(req.GetResourceNames())
	}
	t.watch = req
	// An ACK closes the open watch and opens the next in one call.
	t.open = h.cache.WatchSotw(req, t.sub, t.held, h, t.open)
	return nil
}

// flush sends the pending responses of the open watches, in the order
// they were answered.
func (h *sotwStream) flush() error {
	h.mu.Lock()
	pending := h.pending
	h.pending = nil
	h.mu.Unlock()
	for _, r := range pending {
		nonce, ok := h.sending(r)
		if !ok {
			continue // its watch was replaced
		}
		var (
			body *cache.Wire
			out  *discovery.DiscoveryResponse
			err  error
		)
		if w, ok := r.(wireAnswer); ok && h.wire {
			body, err = w.Wire()
		} else if out, err = r.GetDiscoveryResponse(); err == nil {
			out.Nonce = nonce
		}
		if err != nil {
			return err
		}
		if body != nil {
			err = h.gs.SendMsg(newWireResponse(body, nonce))
		} else {
			err = h.gs.Send(out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sending records that r, a response to its type's open watch, is sent
// next, and returns its nonce; not ok when a later request of its type
// replaced the watch it answers.
func (h *sotwStream) sending(r gcpcache.Response) (nonce string, ok bool) {
	h.state.Lock()
	defer h.state.Unlock()
	t := h.typeState(r.GetRequest().GetTypeUrl())
	if t == nil || r.GetRequest() != t.watch {
		return "", false
	}
	h.nonce++
	t.nonce = strconv.FormatInt(h.nonce, 10)
	t.sub.SetReturnedResources(r.GetReturnedResources())
	t.held = r
	return t.nonce, true
}
