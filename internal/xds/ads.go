package xds

// The ADS service: registering it on a gRPC server, and serving each
// authenticated stream, SotW and Delta, every request checked against the
// stream's certificate before it is handled.

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpdelta "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Register registers the ADS service (SotW and Delta) on g. ctx bounds
// every stream: when it ends, the live streams end and new ones are refused.
func (s *Server) Register(ctx context.Context, g *grpc.Server) {
	s.register(ctx, g, false)
}

// register is Register; wire says g's codec is wireCodec.
func (s *Server) register(ctx context.Context, g *grpc.Server, wire bool) {
	context.AfterFunc(ctx, s.stopStreams)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, &ads{s: s, wire: wire})
}

// ads serves each authenticated stream, SotW with sotwStream and Delta
// with go-control-plane's delta handler, bound to the stream's own
// context: cancelling that context (a revocation, Disconnect, a refused
// request, or the end of Register's ctx) ends the handler, and with it
// the RPC, whose end unblocks the pending Recv.
type ads struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	s    *Server
	wire bool // the server's codec is wireCodec
}

// nodeRequest is a SotW or Delta discovery request.
type nodeRequest interface {
	comparable
	GetNode() *corev3.Node
	GetTypeUrl() string
	GetResponseNonce() string
	GetErrorDetail() *rpcstatus.Status
}

// authRecv is Recv of an authenticated stream: it returns the next request
// after checking its node against the stream's certificate (and rewriting
// node.id to the cache key), or an error when the stream was cancelled or
// the request refused (which cancels the stream with it as the cause). A
// NACK's message is cut to a bound and logged here (see nackLog), before
// the cache records it.
func authRecv[R nodeRequest](ctx context.Context, s *Server, st *stream, recv func() (R, error)) (R, error) {
	var zero R
	m, err := recv()
	if err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := s.checkNode(ctx, st, m.GetNode(), m.GetTypeUrl()); err != nil {
		st.cancel(err)
		return zero, err
	}
	if n := m.GetNode(); n != nil && st.proxy != nil {
		n.Id = st.proxy.NodeID
	}
	if d := m.GetErrorDetail(); d != nil {
		s.nacks.nacked(st.cn, m.GetTypeUrl(), m.GetResponseNonce(), d)
	}
	if st.proxy.Flavor == render.GRPC && m.GetTypeUrl() == resource.ListenerType {
		st.noteListeners(s.notices.listeners, any(m))
	}
	return m, nil
}

func (a *ads) StreamAggregatedResources(inner discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	st, ctx, err := a.s.open(inner.Context())
	if err != nil {
		return err
	}
	defer a.s.close(st)
	next := inner.Recv
	if a.wire {
		// wireCodec decodes into sotwRequests, sharing an ACK's strings
		// with the request before it.
		var reqs sotwRequests
		next = func() (*discovery.DiscoveryRequest, error) {
			if err := inner.RecvMsg(&reqs); err != nil {
				return nil, err
			}
			return reqs.req, nil
		}
	}
	recv := func() (*discovery.DiscoveryRequest, error) { return authRecv(ctx, a.s, st, next) }
	h := newSotwStream(inner, a.s.cache)
	h.wire = a.wire
	if err := h.serve(ctx, recv); err != nil {
		return err
	}
	return streamErr(ctx)
}

type deltaStream struct {
	discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	ctx context.Context
	s   *Server
	st  *stream
}

func (w *deltaStream) Context() context.Context { return w.ctx }

func (w *deltaStream) Recv() (*discovery.DeltaDiscoveryRequest, error) {
	return authRecv(w.ctx, w.s, w.st, w.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Recv)
}

func (a *ads) DeltaAggregatedResources(inner discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	st, ctx, err := a.s.open(inner.Context())
	if err != nil {
		return err
	}
	defer a.s.close(st)
	w := &deltaStream{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: inner, ctx: ctx, s: a.s, st: st}
	if err := gcpdelta.NewServer(ctx, a.s.cache, nil).DeltaStreamHandler(w, resource.AnyType); err != nil {
		return err
	}
	return streamErr(ctx)
}
