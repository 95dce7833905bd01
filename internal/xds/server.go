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
package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpdelta "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Node metadata keys the agent writes into its bootstraps.
const (
	MetadataFlavor  = "osm.flavor"           // "envoy" (default), "grpc" or "gateway"
	MetadataAddress = "osm.advertiseAddress" // the VM's address; inbound listeners bind it
	// MetadataGatewayCertDir is a gateway machine's certificate directory
	// (osm-agent's gatewayCertDir), optional: its HTTPS listeners read
	// their certificates from files under it.
	MetadataGatewayCertDir = "osm.gatewayCertDir"
)

// Identities is what the server needs from the certificate manager.
type Identities interface {
	// VerifyClient checks a TLS client's certificates (the leaf first)
	// against the mesh CA as crypto/tls's RequireAndVerifyClientCert would,
	// and returns the verified chain, the leaf first.
	VerifyClient(certs []*x509.Certificate) ([]*x509.Certificate, error)
	// VerifyResumedClient is VerifyClient for the certificates a resumed
	// TLS session carries, which a full handshake verified when it made
	// the session: it checks what may have changed since (validity, the
	// CA), not the CA's signature.
	VerifyResumedClient(certs []*x509.Certificate) ([]*x509.Certificate, error)
	// VerifyProxy fails for an unknown or revoked proxy, or a certificate
	// that is no longer its current one.
	// chain is the TLS layer's verified chain, the proxy's certificate first.
	VerifyProxyChain(ctx context.Context, chain []*x509.Certificate) (certificate.ProxyRecord, error)
	// ClaimVerifiedProxy records a connection (unclaimed -> claimed, last
	// seen) from the record VerifyProxyChain returned when it opened.
	ClaimVerifiedProxy(ctx context.Context, rec certificate.ProxyRecord) error
}

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

// Server is the ADS server.
type Server struct {
	log   *slog.Logger
	cache *cache.Cache
	ids   Identities

	// handshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (DefaultHandshakeTimeout unless set).
	handshakeTimeout time.Duration
	// conns counts the connections Serve accepts (see Load).
	conns handshakeCounts
	// nackLog limits the logging of each proxy's NACKs (see nacked), and
	// refusedLog that of its streams refused for maxStreams.
	nackLog, refusedLog *logLimiter
	// arrivals orders the connect and disconnect notices of one node: a
	// proxy that reconnects at once may open its new stream while its old
	// one is still closing, and the old stream's "disconnected" told after
	// the new one's "connected" would leave the publisher and the model
	// holding the node as gone. Taken before mu, held while the notices of
	// a change under mu are told; striped by node ID.
	arrivals [64]sync.Mutex
	// maxStreams bounds each proxy identity's concurrent streams
	// (DefaultMaxStreamsPerProxy unless set).
	maxStreams int

	mu        sync.Mutex
	watcher   Watcher
	listeners listenerWatcher // the watcher, if it implements it
	presence  Presence
	lastID    uint64
	streams   map[*stream]struct{}
	perCN     map[string]int    // live streams by certificate CN, those of streams
	proxies   map[string]*Proxy // by node ID
	stopped   bool              // Register's ctx has ended
	metrics   *serverMetrics    // nil unless Instrument was called
}

type stream struct {
	id     uint64
	ctx    context.Context
	cn     string
	peer   []*x509.Certificate     // the verified chain, the proxy's certificate first
	rec    certificate.ProxyRecord // the proxy's record when the stream opened, until its claim
	cancel context.CancelCauseFunc
	proxy  *Proxy      // set by the first request's node
	expiry *time.Timer // ends the stream when peer expires

	// The listener names a gRPC stream asks for, as last reported to
	// Server.listeners; done once the stream reported its end.
	ldsMu sync.Mutex
	lds   map[string]struct{}
	done  bool
}

// NewServer returns a server over c. SetWatcher must be called before
// Register's streams arrive.
func NewServer(log *slog.Logger, c *cache.Cache, ids Identities) *Server {
	return &Server{log: log, cache: c, ids: ids, handshakeTimeout: DefaultHandshakeTimeout, maxStreams: DefaultMaxStreamsPerProxy,
		streams: map[*stream]struct{}{}, perCN: map[string]int{}, proxies: map[string]*Proxy{},
		nackLog: newLogLimiter(nackLogEvery, maxLogLimits, time.Now), refusedLog: newLogLimiter(nackLogEvery, maxLogLimits, time.Now)}
}

// keepaliveTimeout bounds an unanswered keepalive ping and, as
// TCP_USER_TIMEOUT, unacknowledged data on every connection.
const keepaliveTimeout = 10 * time.Second

// DefaultHandshakeTimeout bounds how long the peer of a new connection to
// the xDS port may stay silent during its TLS handshake and before its
// HTTP/2 preface (and, times six, the whole handshake: see
// handshakeListener); gRPC's own default, 120 s for the whole handshake,
// let a peer that sends nothing hold a connection (and a file descriptor)
// for two minutes. A proxy on a slow link answers in well under a second.
const DefaultHandshakeTimeout = 10 * time.Second

// SetHandshakeTimeout sets how long a new connection's peer may stay
// silent in its handshake (DefaultHandshakeTimeout by default). Call it
// before Serve.
func (s *Server) SetHandshakeTimeout(d time.Duration) { s.handshakeTimeout = d }

// DefaultMaxStreamsPerProxy bounds the xDS streams one proxy identity
// (certificate CN) may have open at once; a stream beyond is refused
// with ResourceExhausted. A machine's identity is shared by its Envoy
// (one ADS stream) and its proxyless gRPC applications, whose streams
// osm-agent's local endpoint carries upstream one for one: gRPC opens one
// per xds:/// target a process dials, and one if it serves with xDS. A
// machine with a few such applications needs tens; a reconnecting
// stream briefly overlaps the one it replaces until the server sees that
// end; and the agent's endpoint carries at most 30 by default (its
// localXDSMaxStreams), so its streams and Envoy's fit twice over. Each
// stream costs the server about 60 KB; 1,000 from one machine cost
// 62 MB.
const DefaultMaxStreamsPerProxy = 64

// SetMaxStreamsPerProxy sets how many xDS streams one proxy identity may
// have open at once (DefaultMaxStreamsPerProxy by default; at least 1).
// Call it before Serve.
func (s *Server) SetMaxStreamsPerProxy(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxStreams = max(1, n)
}

// SetWatcher sets who is told about connects and disconnects. A Publisher
// is also given the means to end the streams of a proxy it cannot
// configure (see refuse).
func (s *Server) SetWatcher(w Watcher) {
	if r, ok := w.(interface {
		setRefuse(func(nodeID string, err error))
	}); ok {
		r.setRefuse(s.refuse)
	}
	lw, _ := w.(listenerWatcher)
	s.mu.Lock()
	s.watcher = w
	s.listeners = lw
	s.mu.Unlock()
}

// SetPresence sets who is told from which address each connected proxy
// is (see Presence). Call it before Serve.
func (s *Server) SetPresence(p Presence) {
	s.mu.Lock()
	s.presence = p
	s.mu.Unlock()
}

// refuse ends the live streams of the proxy with this node ID with
// FailedPrecondition naming err: no configuration can be rendered for it,
// and it has none, so it would otherwise wait for an answer in silence.
func (s *Server) refuse(nodeID string, err error) {
	st := status.Errorf(codes.FailedPrecondition, "no configuration can be rendered for proxy %s: %v", nodeID, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for str := range s.streams {
		if str.proxy != nil && str.proxy.NodeID == nodeID {
			str.cancel(st)
		}
	}
}

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

// stopStreams ends every live stream and refuses new ones.
func (s *Server) stopStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for st := range s.streams {
		st.cancel(nil)
	}
}

// Proxies returns the connected proxies, sorted by node ID.
func (s *Server) Proxies() []Proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Proxy, 0, len(s.proxies))
	for _, p := range s.proxies {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// ErrRevoked is the cause given to streams ended by Disconnect.
var ErrRevoked = errors.New("proxy certificate revoked")

// ErrExpired is the cause given to a stream whose client certificate
// expired: TLS checks expiry only at the handshake, so a stream would
// otherwise outlive its certificate. The proxy reconnects with its
// renewed certificate.
var ErrExpired = errors.New("proxy certificate expired")

// Disconnect ends every live stream of the proxy with this CN.
func (s *Server) Disconnect(cn string, cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for st := range s.streams {
		if st.cn == cn {
			st.cancel(cause)
			n++
		}
	}
	return n
}

// WatchRevocations ends the streams of every proxy revoked from now on,
// until ctx is done. subscribe is the certificate manager's Subscribe.
func (s *Server) WatchRevocations(ctx context.Context, subscribe func() (<-chan certificate.Announcement, func())) error {
	ch, cancel := subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-ch:
			switch a.Kind {
			case certificate.ProxyRevoked:
				if n := s.Disconnect(a.ProxyCN, ErrRevoked); n > 0 {
					s.log.Info("revoked proxy disconnected", "cn", a.ProxyCN, "streams", n)
				}
			case certificate.Resync:
				// Announcements were dropped: a revocation may be among them.
				s.recheck(ctx)
			}
		}
	}
}

// recheck verifies every live stream's proxy again and ends the streams of
// those no longer allowed.
func (s *Server) recheck(ctx context.Context) {
	s.mu.Lock()
	var live []*stream
	for st := range s.streams {
		live = append(live, st)
	}
	s.mu.Unlock()
	for _, st := range live {
		if _, err := s.ids.VerifyProxyChain(ctx, st.peer); err != nil {
			s.log.Info("proxy no longer allowed; closing its stream", "cn", st.cn, "err", err)
			st.cancel(fmt.Errorf("%w: %v", ErrRevoked, err))
		}
	}
}

// open authenticates a new stream from its TLS peer.
func (s *Server) open(ctx context.Context) (*stream, context.Context, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil, status.Error(codes.Unauthenticated, "no peer information")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil, nil, status.Error(codes.Unauthenticated, "no client certificate: connect with the proxy certificate from enrollment")
	}
	// Serve's TLS layer checked the certificate with VerifyClient, which
	// remembers it: asking again costs a hash. A connection whose TLS
	// layer verified it (another gRPC server's) has the chain already.
	var chain []*x509.Certificate
	if len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		chain = ti.State.VerifiedChains[0]
	} else {
		var err error
		if chain, err = s.ids.VerifyClient(ti.State.PeerCertificates); err != nil {
			return nil, nil, status.Errorf(codes.Unauthenticated, "%v", err)
		}
	}
	cert := chain[0]
	cn := cert.Subject.CommonName
	if _, err := mesh.ParseProxyIdentity(cn); err != nil {
		return nil, nil, status.Errorf(codes.PermissionDenied, "client certificate is not a proxy certificate: %v", err)
	}
	rec, err := s.ids.VerifyProxyChain(ctx, chain)
	if err != nil {
		s.log.Warn("xDS stream refused", "cn", cn, "peer", p.Addr.String(), "err", err)
		return nil, nil, status.Errorf(codes.PermissionDenied, "proxy %s: %v", cn, err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	st := &stream{cn: cn, peer: chain, rec: rec, cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		cancel(nil)
		return nil, nil, status.Error(codes.Unavailable, "xDS server is stopping")
	}
	// The count goes up and down with s.streams, under the same lock: a
	// stream in s.streams is counted, and close, deferred by every
	// handler as soon as open returns a stream, removes both.
	if n := s.perCN[cn]; n >= s.maxStreams {
		cancel(nil)
		if ok, suppressed, _ := s.refusedLog.allow(cn); ok {
			s.log.Warn("xDS stream refused: the proxy has the most streams allowed open", "cn", cn, "peer", p.Addr.String(), "streams", n, "xdsMaxStreamsPerProxy", s.maxStreams, "suppressed", suppressed)
		}
		return nil, nil, status.Errorf(codes.ResourceExhausted, "proxy %s has %d xDS streams open, the most osm-server allows one proxy identity (xdsMaxStreamsPerProxy %d): close the streams it does not use, or raise xdsMaxStreamsPerProxy in the osm-server config", cn, n, s.maxStreams)
	}
	s.perCN[cn]++
	s.lastID++
	st.id = s.lastID
	st.ctx = sctx
	s.streams[st] = struct{}{}
	if s.metrics != nil {
		s.metrics.opened.Inc()
	}
	st.expiry = time.AfterFunc(time.Until(cert.NotAfter), func() {
		s.log.Info("proxy certificate expired; closing its stream", "cn", cn, "not_after", cert.NotAfter)
		cancel(fmt.Errorf("%w at %s: reconnect with the renewed certificate", ErrExpired, cert.NotAfter.UTC().Format(time.RFC3339)))
	})
	return st, sctx, nil
}

// StreamsOpened returns how many streams have been authenticated and
// opened since the server started.
func (s *Server) StreamsOpened() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastID
}

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
// collector follows it (see gcGovernor in cmd/osm-server). A reconnect
// storm shows first as connections accepted and handshaking: 10,000
// handshakes at once on 2 cores finish seconds later, and in waves.
func (s *Server) Load() Load {
	return Load{Accepted: s.conns.accepted.Load(), Opened: s.StreamsOpened(), Handshaking: int(s.conns.handshaking.Load())}
}

// checkNode validates a request's node against the stream's certificate,
// and its type against what the proxy's flavour is served; the first node
// also registers the proxy.
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
	err = s.ids.ClaimVerifiedProxy(ctx, st.rec)
	// The record is not needed after the claim: held by every stream, the
	// decoded records were 8% of the heap's objects at 3,000 proxies.
	st.rec = certificate.ProxyRecord{}
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "proxy %s: %v", st.cn, err)
	}
	arrival := s.arrival(nodeID)
	arrival.Lock()
	defer arrival.Unlock()
	s.mu.Lock()
	p, ok := s.proxies[nodeID]
	first := !ok
	if !ok {
		p = &Proxy{NodeID: nodeID, CN: st.cn, Identity: id, Service: id.Service, Flavor: flavor, Address: addr, GatewayCertDir: certDir, Connected: time.Now()}
		s.proxies[nodeID] = p
	}
	p.Streams++
	st.proxy = p
	w, pr := s.watcher, s.presence
	snapshot := *p
	s.mu.Unlock()
	if first {
		s.log.Info("proxy connected", "cn", st.cn, "flavor", flavor, "address", addr)
		if pr != nil {
			pr.ProxyConnected(snapshot.Service, snapshot.Address)
		}
		if w != nil {
			w.ProxyConnected(snapshot)
		}
	}
	return nil
}

// parseNode reads the proxy's flavour and advertise address from the node
// metadata the agent writes. A proxy without an advertise address is
// refused rather than given the connection's peer address: behind NAT, a
// load balancer or on a machine with several addresses the peer address is
// not the one others reach it on, so its inbound listeners would bind an
// address the machine does not have and its endpoints would never count as
// connected; an error the proxy logs at once names the fix instead.
func parseNode(node *corev3.Node) (render.Flavor, netip.Addr, error) {
	md := node.GetMetadata().GetFields()
	flavor := render.Envoy
	if v, ok := md[MetadataFlavor]; ok {
		f, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want the string envoy, grpc or gateway", MetadataFlavor, kindOf(v))
		}
		switch f.StringValue {
		case "", "envoy":
		case "grpc":
			flavor = render.GRPC
		case "gateway":
			flavor = render.Gateway
		default:
			return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q: want envoy, grpc or gateway", MetadataFlavor, f.StringValue)
		}
	}
	v, ok := md[MetadataAddress]
	if !ok || v.GetStringValue() == "" && kindOf(v) == "a string" {
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is missing: set advertiseAddress in the osm-agent config (or %s in a hand-written bootstrap) to the IP address other machines reach this one on", MetadataAddress, MetadataAddress)
	}
	a, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want an IP address as a string", MetadataAddress, kindOf(v))
	}
	ip, err := netip.ParseAddr(a.StringValue)
	switch {
	case err != nil:
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q is not an IP address: set advertiseAddress in the osm-agent config to this machine's address", MetadataAddress, a.StringValue)
	case ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast():
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q is not an address other machines can reach this one on: set advertiseAddress in the osm-agent config to this machine's unicast address", MetadataAddress, a.StringValue)
	}
	return flavor, ip.Unmap(), nil
}

// parseGatewayCertDir reads the optional osm.gatewayCertDir: an absolute,
// clean path.
func parseGatewayCertDir(node *corev3.Node) (string, error) {
	v, ok := node.GetMetadata().GetFields()[MetadataGatewayCertDir]
	if !ok {
		return "", nil
	}
	d, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want an absolute directory as a string", MetadataGatewayCertDir, kindOf(v))
	}
	if d.StringValue != "" && (!path.IsAbs(d.StringValue) || path.Clean(d.StringValue) != d.StringValue) {
		return "", status.Errorf(codes.InvalidArgument, "node metadata %s %q: want an absolute, clean directory path (gatewayCertDir in the osm-agent config)", MetadataGatewayCertDir, d.StringValue)
	}
	return d.StringValue, nil
}

// kindOf names the kind of a metadata value for an error message.
func kindOf(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "a string"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_BoolValue:
		return "a bool"
	case *structpb.Value_StructValue:
		return "an object"
	case *structpb.Value_ListValue:
		return "a list"
	}
	return "null"
}

// checkType refuses a request for a type the server never publishes for a
// proxy of this flavour: it would otherwise wait for an answer forever.
func checkType(f render.Flavor, typeURL string) error {
	switch typeURL {
	case resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType:
		return nil
	case resource.SecretType:
		if f != render.GRPC {
			return nil
		}
		return status.Errorf(codes.InvalidArgument, "type %s is served to Envoy proxies only; a proxyless gRPC client (node metadata %s grpc) reads its certificates from files", typeURL, MetadataFlavor)
	case "":
		return status.Error(codes.InvalidArgument, "type_url is required on every ADS request")
	}
	served := "CDS, EDS, LDS and RDS"
	if f != render.GRPC {
		served += " (and SDS)"
	}
	return status.Errorf(codes.InvalidArgument, "type %q is not served: osm-server serves %s over ADS", typeURL, served)
}

// arrival returns the lock that orders nodeID's connect and disconnect
// notices (see Server.arrivals).
func (s *Server) arrival(nodeID string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return &s.arrivals[h.Sum32()%uint32(len(s.arrivals))]
}

// close unregisters a finished stream.
func (s *Server) close(st *stream) {
	st.expiry.Stop()
	s.mu.Lock()
	registered := st.proxy
	s.mu.Unlock()
	if registered != nil {
		arrival := s.arrival(registered.NodeID)
		arrival.Lock()
		defer arrival.Unlock()
	}
	s.mu.Lock()
	delete(s.streams, st)
	if s.perCN[st.cn]--; s.perCN[st.cn] <= 0 {
		delete(s.perCN, st.cn)
	}
	var gone *Proxy
	if p := st.proxy; p != nil {
		p.Streams--
		if p.Streams == 0 {
			delete(s.proxies, p.NodeID)
			gone = p
		}
	}
	w, pr := s.watcher, s.presence
	lw := s.listeners
	if s.metrics != nil {
		s.metrics.closed.WithLabelValues(closeReason(st.ctx, s.stopped)).Inc()
	}
	s.mu.Unlock()
	st.cancel(nil)
	st.ldsMu.Lock()
	if len(st.lds) > 0 && lw != nil {
		lw.ListenersRequested(st.proxy.NodeID, st.id, nil)
	}
	st.lds, st.done = nil, true
	st.ldsMu.Unlock()
	if gone != nil {
		s.log.Info("proxy disconnected", "cn", gone.CN, "flavor", gone.Flavor)
		if pr != nil {
			pr.ProxyDisconnected(gone.Service, gone.Address)
		}
		if w != nil {
			w.ProxyDisconnected(*gone)
		}
	}
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

// streamErr is what a stream ends with, from the cause its context was
// cancelled with: a request refused by authRecv (a gRPC status) as is, a
// revocation or Disconnect as PermissionDenied naming the cause.
func streamErr(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return nil
	}
	if _, ok := status.FromError(cause); ok {
		return cause
	}
	return status.Errorf(codes.PermissionDenied, "stream closed by the control plane: %v", cause)
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
// NACK's message is cut to a bound and logged here (see nacked), before
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
		s.nacked(st, m.GetTypeUrl(), m.GetResponseNonce(), d)
	}
	if st.proxy.Flavor == render.GRPC && m.GetTypeUrl() == resource.ListenerType {
		s.noteListeners(st, any(m))
	}
	return m, nil
}

// noteListeners tells the listener watcher when the listener names a gRPC
// stream asks for change (a SotW request names them all; a Delta request
// subscribes and unsubscribes some).
func (s *Server) noteListeners(st *stream, req any) {
	s.mu.Lock()
	lw := s.listeners
	s.mu.Unlock()
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

// clientTLS returns a copy of tlsCfg that leaves the client's certificate
// chain to Identities.VerifyClient instead of crypto/tls. Both check the
// same things (the chain to the mesh root, validity periods, client
// authentication), but crypto/tls verifies the CA's signature on every
// handshake, which was a tenth of the server's CPU when a fleet
// reconnected at once; VerifyClient does so once per certificate.
// crypto/tls still checks that the client holds the certificate's key,
// and still sends ClientCAs to clients as the acceptable issuers. A
// certificate refused here ends the handshake with a bad_certificate
// alert (crypto/tls's own check would say unknown_ca or
// certificate_expired); the reason is in the error.
func (s *Server) clientTLS(tlsCfg *tls.Config) *tls.Config {
	cfg := tlsCfg.Clone()
	cfg.ClientAuth = tls.RequireAnyClientCert
	next := cfg.VerifyConnection
	s.mu.Lock()
	m := s.metrics // set by Instrument, before Serve
	s.mu.Unlock()
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		verify := s.ids.VerifyClient
		if cs.DidResume {
			// The session's certificates were verified in the handshake
			// that made it (this function, on this server or a replica
			// sharing its ticket keys); only a server with those keys
			// could have made the ticket that carries them.
			verify = s.ids.VerifyResumedClient
		}
		if _, err := verify(cs.PeerCertificates); err != nil {
			return err
		}
		if next != nil {
			if err := next(cs); err != nil {
				return err
			}
		}
		if m != nil {
			if cs.DidResume {
				m.resumed.Inc()
			} else {
				m.full.Inc()
			}
		}
		return nil
	}
	return cfg
}

// http2DefaultWindow is HTTP/2's initial flow-control window (RFC 9113
// section 6.9.2), 64 KiB - 1.
const http2DefaultWindow = 65535

// Serve listens on addr and serves ADS with tlsCfg until ctx is done.
// tlsCfg must require and verify client certificates against the mesh CA
// (RequireAndVerifyClientCert, ClientCAs the CA's pool); the server does
// the verifying itself, with Identities.VerifyClient, which checks a
// certificate against the CA once and not again when its proxy reconnects
// (see clientTLS). ready, when not nil, receives the bound address.
func (s *Server) Serve(ctx context.Context, addr string, tlsCfg *tls.Config, ready chan<- net.Addr) error {
	if tlsCfg.ClientAuth != tls.RequireAndVerifyClientCert || tlsCfg.ClientCAs == nil {
		return errors.New("xDS TLS config must require and verify client certificates against the mesh CA")
	}
	tlsCfg = s.clientTLS(tlsCfg)
	// Dead peers are found by the kernel: TCP keepalive probes an idle
	// connection after 15 s, and gRPC sets TCP_USER_TIMEOUT to the
	// keepalive timeout (10 s) on every connection, so an unanswered probe
	// or unacknowledged push ends it about 30 s after the peer went away
	// (29 s measured with the peer's network taken down), at no cost to
	// this process.
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 3}}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("xDS listener on %s: %w (set xdsAddress / --xds-address to a free address)", addr, err)
	}
	if ready != nil {
		ready <- ln.Addr()
	}
	// A connection whose peer stays silent for handshakeTimeout during its
	// TLS handshake or before its HTTP/2 preface is closed, as is one
	// whose handshake has not ended after wholeHandshake of it (see
	// handshakeListener).
	ln = handshakeListener{Listener: ln, idle: s.handshakeTimeout, userTimeout: keepaliveTimeout, counts: &s.conns}
	g := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.ConnectionTimeout(wholeHandshake(s.handshakeTimeout)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// An HTTP/2 ping costs both ends a TLS record each way and
		// goroutine wake-ups: about 0.3 ms of server CPU on a 2-core VM
		// (every 10 s at 10,000 idle proxies: 28% of a core), so the 30 s
		// this was cost about 9% of a core with nothing changing. The
		// kernel finds dead peers (see the listener); the ping is left to
		// find a peer whose TCP stack answers but whose HTTP/2 stack hangs.
		// Timeout also sets TCP_USER_TIMEOUT (gRPC does so whenever Time
		// is set).
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 5 * time.Minute, Timeout: keepaliveTimeout}),
		grpc.MaxConcurrentStreams(64),
		// Thousands of mostly idle streams: small per-connection buffers,
		// and the write buffer returned to a pool after each flush.
		grpc.ReadBufferSize(0), // no bufio reader per connection: TLS already buffers records
		grpc.WriteBufferSize(16<<10),
		grpc.SharedWriteBuffer(true),
		// Fixed flow-control windows: a proxy sends only small requests
		// and ACKs, and with gRPC's dynamic window (BDP estimation) each
		// one made the server send a window update and a PING and read
		// the PING's ACK.
		grpc.StaticStreamWindowSize(http2DefaultWindow),
		grpc.StaticConnWindowSize(http2DefaultWindow),
		// No HPACK dynamic table: a proxy opens its long-lived ADS stream
		// once per connection, so an indexed copy of its request headers
		// would only be kept, never used, for as long as the connection
		// lives.
		grpc.HeaderTableSize(0),
		// SotW responses are sent as the cache encoded them, once for
		// every proxy sent the same (see wireCodec).
		grpc.ForceServerCodecV2(newWireCodec()),
	)
	s.register(ctx, g, true)
	s.log.Info("xDS listening", "address", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("xDS server: %w", err)
	case <-ctx.Done():
	}
	// ADS streams never end by themselves: stop at once; proxies reconnect
	// to another server or to this one after a restart.
	g.Stop()
	<-errc
	return nil
}
