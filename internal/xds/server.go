// Package xds serves Envoy xDS v3 to the mesh's proxies: ADS state of the
// world and Delta over gRPC with mutual TLS, on go-control-plane's server
// and the marshal-once cache in internal/xds/cache.
//
// Every stream is bound to the proxy certificate it was opened with: the
// certificate must verify against the mesh CA (the TLS config does that),
// the proxy must be known and not revoked (Identities), and every request
// that carries a node must name that certificate's common name as node.id.
// Anything else ends the stream with PermissionDenied. Disconnect ends a
// proxy's live streams, which is how a revocation takes effect at once.
//
// No stream waits in silence: a node without a usable osm.advertiseAddress
// or osm.flavor, or a request for a type this proxy is never served, ends
// the stream with InvalidArgument naming the fix; a proxy whose
// configuration cannot be rendered and that has none yet is ended with
// FailedPrecondition naming the cause.
//
// What one proxy may cost the server is bounded: one proxy identity (a
// certificate's CN) may have at most xdsMaxStreamsPerProxy streams open at
// once (DefaultMaxStreamsPerProxy); the next is refused with
// ResourceExhausted naming the bound. A NACK's message is cut to 2 KiB as
// it arrives, and a proxy's NACKs are logged at most once a minute
// (nacks.go).
//
// What a proxy is sent is decided by the Publisher in this package: it
// reads the mesh model's views (catalog.View: the specification, each
// service's participant endpoints, the trust domain and what changed),
// groups proxies, renders with internal/xds/render, validates, and
// publishes into the cache. The server only tells who is connected: the
// Publisher (Watcher), which configures each proxy that joins, and the
// mesh model (Presence), whose participant rule counts connected proxies.
// The package does not decide who participates in the mesh.
//
// The server side, by job: server.go holds a stream's life (open,
// registration of its node, close) over the parts it is built from;
// listen.go the xDS listener and its gRPC settings; handshake.go the
// handshake bounds; identity.go who may hold a stream; admission.go the
// per-identity stream bound; table.go the live streams and connected
// proxies; notices.go who is told of connects and leaves, in order;
// ads.go the ADS service and each stream's requests; stream.go one
// stream's state; node.go the node metadata; revoke.go revocations;
// causes.go why streams end; nacks.go NACKs; servermetrics.go metrics.
package xds

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Server is the ADS server.
type Server struct {
	log   *slog.Logger
	cache *cache.Cache
	ident *identityCheck
	// handshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface.
	handshakeTimeout time.Duration
	// conns counts the connections Serve accepts (see Load).
	conns   handshakeCounts
	nacks   *nackLog
	notices *notices
	table   *streamTable
	metrics *serverMetrics
	// listening is the address Serve listens on, once it does (Ready).
	listening atomic.Pointer[string]
}

// Options configure a Server. An option left zero takes its default.
type Options struct {
	// Watcher is told when the set of connected proxies changes: the
	// Publisher, which configures each proxy that joins. A Publisher is
	// also given the means to end the streams of a proxy it cannot
	// configure (see Server.refuse). Nil: no one is told.
	Watcher Watcher
	// Presence is told from which address each connected proxy is (see
	// Presence). Nil: no one is told.
	Presence Presence
	// HandshakeTimeout is how long a new connection's peer may stay
	// silent in its handshake (DefaultHandshakeTimeout when zero).
	HandshakeTimeout time.Duration
	// MaxStreamsPerProxy is how many xDS streams one proxy identity may
	// have open at once (DefaultMaxStreamsPerProxy when zero; at least 1).
	MaxStreamsPerProxy int
}

// NewServer returns a server over c that checks proxies with ids.
//
// The Watcher, o.Watcher, is built first and needs no server: when it is
// a Publisher, the server gives it its means of refusing a proxy (see
// refuse) here, before any stream can arrive.
func NewServer(log *slog.Logger, c *cache.Cache, ids Identities, o Options) *Server {
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxStreamsPerProxy == 0 {
		o.MaxStreamsPerProxy = DefaultMaxStreamsPerProxy
	}
	s := &Server{log: log, cache: c, handshakeTimeout: o.HandshakeTimeout,
		nacks:   newNACKLog(log),
		notices: newNotices(log, o.Watcher, o.Presence),
		table:   newStreamTable(newStreamLimit(log, max(1, o.MaxStreamsPerProxy))),
	}
	s.metrics = newServerMetrics(s.table.eachProxy)
	s.ident = &identityCheck{ids: ids, log: log, metrics: s.metrics}
	if r, ok := o.Watcher.(interface {
		setRefuse(func(nodeID string, err error))
	}); ok {
		r.setRefuse(s.refuse)
	}
	return s
}

// Instrument registers the server's metrics with reg:
//
//   - osm_xds_connected_proxies{flavor,service}: proxies connected now;
//   - osm_xds_streams_opened_total and osm_xds_streams_closed_total{reason}:
//     authenticated ADS streams, and why they ended (client, revoked,
//     expired, refused, stopping);
//   - osm_xds_tls_handshakes_total{resumed}: TLS handshakes whose client
//     certificate was accepted, resumed ("true": the proxy's session
//     ticket was accepted) or full ("false"). After a restart or a
//     failover nearly all should be resumed (see internal/sessionticket).
//
// The counters count from NewServer; call it before Serve.
func (s *Server) Instrument(reg prometheus.Registerer) error { return s.metrics.register(reg) }

// refuse ends the live streams of the proxy with this node ID with
// FailedPrecondition naming err: no configuration can be rendered for it,
// and it has none, so it would otherwise wait for an answer in silence.
func (s *Server) refuse(nodeID string, err error) {
	st := status.Errorf(codes.FailedPrecondition, "no configuration can be rendered for proxy %s: %v", nodeID, err)
	s.table.cancel(func(str *stream) bool { return str.proxy != nil && str.proxy.NodeID == nodeID }, st)
}

// stopStreams ends every live stream and refuses new ones.
func (s *Server) stopStreams() { s.table.stop() }

// Proxies returns the connected proxies, sorted by node ID.
func (s *Server) Proxies() []Proxy { return s.table.connected() }

// open authenticates a new stream from its TLS peer and admits it.
func (s *Server) open(ctx context.Context) (*stream, context.Context, error) {
	pp, err := s.ident.authenticate(ctx)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	st := &stream{ctx: sctx, cn: pp.cn, peer: pp.chain, rec: pp.rec, cancel: cancel}
	// close, deferred by every handler as soon as open returns a stream,
	// removes it from the table.
	if err := s.table.add(st, pp.addr); err != nil {
		cancel(nil)
		return nil, nil, err
	}
	s.metrics.opened.Inc()
	cert, cn := pp.chain[0], pp.cn
	st.expiry = time.AfterFunc(time.Until(cert.NotAfter), func() {
		s.log.Info("proxy certificate expired; closing its stream", "cn", cn, "not_after", cert.NotAfter)
		cancel(fmt.Errorf("%w at %s: reconnect with the renewed certificate", ErrExpired, cert.NotAfter.UTC().Format(time.RFC3339)))
	})
	return st, sctx, nil
}

// StreamsOpened returns how many streams have been authenticated and
// opened since the server started.
func (s *Server) StreamsOpened() uint64 { return s.table.opened() }

// Load is how busy the server is with new connections (see Server.Load).
type Load struct {
	// Accepted counts the connections accepted since the server started,
	// Opened the streams authenticated and opened.
	Accepted, Opened uint64
	// Handshaking is how many accepted connections are in their TLS
	// handshake or HTTP/2 preface now.
	Handshaking int
}

// Load returns how busy the server is with new connections: osm-server's
// collector follows it (internal/gctune's burst governor). A reconnect
// storm shows first as connections accepted and handshaking: 10,000
// handshakes at once on 2 cores finish seconds later, and in waves.
func (s *Server) Load() Load {
	return Load{Accepted: s.conns.accepted.Load(), Opened: s.StreamsOpened(), Handshaking: int(s.conns.handshaking.Load())}
}

// checkNode validates a request's node against the stream's certificate,
// and its type against what the proxy's flavour is served; the first node
// also claims the proxy and registers the stream as its.
func (s *Server) checkNode(ctx context.Context, st *stream, node *corev3.Node, typeURL string) error {
	if node == nil {
		if st.proxy == nil {
			return status.Error(codes.InvalidArgument, "the first request on a stream must carry the node")
		}
		return checkType(st.proxy.Flavor, typeURL)
	}
	if node.GetId() != st.cn {
		return status.Errorf(codes.PermissionDenied, "node.id %q does not match the client certificate's common name %q: set the bootstrap's node id to the proxy identity", node.GetId(), st.cn)
	}
	if st.proxy != nil {
		return checkType(st.proxy.Flavor, typeURL)
	}
	id, _ := mesh.ParseProxyIdentity(st.cn)
	flavor, addr, err := parseNode(node)
	if err != nil {
		return err
	}
	certDir, err := parseGatewayCertDir(node)
	if err != nil {
		return err
	}
	if err := checkType(flavor, typeURL); err != nil {
		return err
	}
	nodeID := st.cn
	if flavor == render.GRPC {
		nodeID += "~grpc"
	}
	err = s.ident.claim(ctx, st.cn, st.rec)
	// The record is not needed after the claim: held by every stream, the
	// decoded records were 8% of the heap's objects at 3,000 proxies.
	st.rec = certificate.ProxyRecord{}
	if err != nil {
		return err
	}
	arrival := s.notices.arrival(nodeID)
	arrival.Lock()
	defer arrival.Unlock()
	p, first := s.table.join(st, Proxy{NodeID: nodeID, CN: st.cn, Identity: id, Service: id.Service, Flavor: flavor, Address: addr, GatewayCertDir: certDir, Connected: time.Now()})
	if first {
		s.notices.connected(p)
	}
	return nil
}

// close unregisters a finished stream.
func (s *Server) close(st *stream) {
	st.expiry.Stop()
	if nodeID := s.table.nodeOf(st); nodeID != "" {
		arrival := s.notices.arrival(nodeID)
		arrival.Lock()
		defer arrival.Unlock()
	}
	gone, stopped := s.table.remove(st)
	s.metrics.streamClosed(closeReason(st.ctx, stopped))
	st.cancel(nil)
	st.endListeners(s.notices.listeners)
	if gone != nil {
		s.notices.disconnected(*gone)
	}
}
