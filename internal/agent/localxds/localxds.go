// Package localxds is osm-agent's local xDS endpoint for the machine's
// proxyless gRPC applications, as Istio's agent runs one for its proxyless
// clients. It listens on loopback TCP and on a Unix socket without
// credentials (only local processes reach it) and carries each
// application's ADS stream, state of the world or Delta, to osm-server
// over mutual TLS with the agent's proxy certificate. So an application's
// bootstrap needs only the "insecure" channel credentials every gRPC
// implementation knows (gRPC-Go, C-core, grpc-js), and never reads the
// proxy key.
//
// Each local stream gets its own upstream stream, on a connection made
// with the credentials current when the stream opens (a renewed
// certificate is used from the next stream on; the server closes a
// stream whose certificate expired, and the application reconnects). The
// upstream is one of a list of server addresses (every osm-server
// replica): a stream tries the address that last worked first and the
// others after it. When the upstream stream of a state-of-the-world
// stream dies (Unavailable: the server died or restarted), the local
// stream stays up: the endpoint opens a stream to a server that is up and
// asks it again for each type's last subscription (without version or
// nonce, so it sends everything); the application only sees new answers.
// Any other end of an upstream stream (a revoked or expired certificate),
// and any end of a Delta upstream stream, ends the local stream with the
// server's status; gRPC clients keep their resources and reconnect at
// once (their backoff restarts after a stream that received a response).
//
// Any local process may open streams, and each costs an upstream stream
// counted against the machine's identity at the server: the endpoint
// carries at most Options.MaxStreams at once (DefaultMaxStreams) and
// refuses more with ResourceExhausted naming the bound and its key.
//
// Node identity: the server scopes every stream by the certificate it
// presents (node.id must equal its common name), so this endpoint sets
// node.id to the common name of the proxy certificate it connects with,
// and overlays the agent's own node metadata (osm.flavor "grpc", the
// advertise address, labels, ...) on what the application sent. An
// application can choose neither its identity nor its flavour; its
// node.locality, cluster, user agent and client features pass through.
//
// Of osm-vm it imports nothing: the agent gives it credentials, metadata
// and the upstream list through Options.
package localxds

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Credentials returns the proxy certificate to present upstream and the
// mesh CA the server's certificate must chain to, read when a stream opens.
type Credentials func() (tls.Certificate, *x509.CertPool, error)

// Options configure a Proxy. Credentials and VerifyServer are required,
// and at least one of TCPAddress and SocketPath.
type Options struct {
	// TCPAddress is the loopback host:port to listen on ("": none; port 0
	// picks a free port, see Proxy.TCPAddr).
	TCPAddress string
	// SocketPath is the Unix socket to listen on ("": none). A stale
	// socket file from an earlier run is replaced.
	SocketPath string
	// Upstreams are the osm-server xDS addresses, host:port, in order of
	// preference; SetUpstreams replaces them.
	Upstreams   []string
	Credentials Credentials
	// VerifyServer checks the upstream's certificate, already verified
	// against the mesh CA for the upstream's address, against the proxy
	// certificate presented: it must be the control plane's (the agent
	// passes meshclient.VerifyControlPlane), not another of the mesh's.
	VerifyServer func(server, client *x509.Certificate) error
	// Metadata returns the node metadata the agent asserts for this
	// machine; its keys replace the application's.
	Metadata func() map[string]any
	// Observer, when set, is told of streams opening and ending (observer.go).
	Observer Observer
	// MaxStreams bounds the local streams carried at once (0:
	// DefaultMaxStreams); one beyond is refused with ResourceExhausted.
	MaxStreams int
}

// DefaultMaxStreams bounds the local streams the endpoint carries at once
// (localXDSMaxStreams in the agent config). A gRPC process opens one ADS
// stream per xds:/// target it dials and one if it serves with xDS, so a
// machine with a few proxyless applications needs tens; each is an
// upstream stream the server counts against the machine's identity (at
// most 64 by default, its xdsMaxStreamsPerProxy), beside Envoy's one. 30
// leaves room for all of them, and Envoy's, to overlap once with the
// streams they replace while reconnecting.
const DefaultMaxStreams = 30

// Proxy is the local xDS endpoint. Build it with Listen, run it with Serve.
type Proxy struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	log   *slog.Logger
	opts  Options
	tcp   net.Listener
	unix  net.Listener
	relay sync.WaitGroup // relay goroutines of streams, waited for by Serve
	// streams counts the local streams being carried (see admit).
	streams atomic.Int64

	mu        sync.Mutex
	upstreams []string
	lastGood  string
	// sessions keeps the TLS sessions of the upstream connections made
	// with the certificate whose DER is sessionsOf: each local stream
	// dials its own connection, and one that resumes a session (after the
	// first, and after a server restart or failover: the servers share
	// their ticket keys) makes no signature or certificate check on either
	// side. A new certificate starts a new cache, so that a renewed
	// certificate is what the server sees, not the one a session carries.
	sessions   tls.ClientSessionCache
	sessionsOf []byte
}

// sessionCache returns the TLS session cache for connections made with
// the certificate leaf.
func (p *Proxy) sessionCache(leaf *x509.Certificate) tls.ClientSessionCache {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions == nil || !bytes.Equal(p.sessionsOf, leaf.Raw) {
		p.sessions, p.sessionsOf = tls.NewLRUClientSessionCache(8), leaf.Raw
	}
	return p.sessions
}

// Listen binds the local endpoint's listeners.
func Listen(log *slog.Logger, opts Options) (*Proxy, error) {
	if opts.Credentials == nil {
		return nil, errors.New("local xDS endpoint: no credentials for the upstream")
	}
	if opts.VerifyServer == nil {
		return nil, errors.New("local xDS endpoint: no check of the upstream's identity")
	}
	if opts.TCPAddress == "" && opts.SocketPath == "" {
		return nil, errors.New("local xDS endpoint: neither a TCP address nor a socket path to listen on")
	}
	if opts.MaxStreams < 0 {
		return nil, fmt.Errorf("local xDS endpoint: MaxStreams %d is negative (localXDSMaxStreams in the agent config)", opts.MaxStreams)
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	p := &Proxy{log: log, opts: opts, upstreams: slices.Clone(opts.Upstreams)}
	if opts.TCPAddress != "" {
		host, _, err := net.SplitHostPort(opts.TCPAddress)
		if err != nil {
			return nil, fmt.Errorf("local xDS address %q: %w", opts.TCPAddress, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("local xDS address %q: it serves without credentials, so it must be a loopback address (127.0.0.1:PORT or [::1]:PORT)", opts.TCPAddress)
		}
		if p.tcp, err = net.Listen("tcp", opts.TCPAddress); err != nil {
			return nil, fmt.Errorf("local xDS endpoint: %w (set localXDSAddress in the agent config to a free port)", err)
		}
	}
	if opts.SocketPath != "" {
		if err := os.Remove(opts.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.close()
			return nil, fmt.Errorf("local xDS socket: remove the stale %s: %w", opts.SocketPath, err)
		}
		l, err := net.Listen("unix", opts.SocketPath)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("local xDS socket: %w", err)
		}
		p.unix = l
		// Local applications of other users reach it too, as they reach
		// the loopback port.
		if err := os.Chmod(opts.SocketPath, 0o666); err != nil {
			p.close()
			return nil, fmt.Errorf("local xDS socket: %w", err)
		}
	}
	return p, nil
}

func (p *Proxy) close() {
	for _, l := range []net.Listener{p.tcp, p.unix} {
		if l != nil {
			l.Close()
		}
	}
}

// TCPAddr returns the bound loopback address, or "" without one.
func (p *Proxy) TCPAddr() string {
	if p.tcp == nil {
		return ""
	}
	return p.tcp.Addr().String()
}

// SocketPath returns the Unix socket path, or "" without one.
func (p *Proxy) SocketPath() string {
	if p.unix == nil {
		return ""
	}
	return p.opts.SocketPath
}

// SetUpstreams replaces the server addresses new streams use.
func (p *Proxy) SetUpstreams(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstreams = slices.Clone(addrs)
}

// order returns the upstreams with the one that last worked first.
func (p *Proxy) order() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.upstreams)
	if i := slices.Index(out, p.lastGood); i > 0 {
		out = append(append([]string{p.lastGood}, out[:i]...), out[i+1:]...)
	}
	return out
}

func (p *Proxy) connected(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastGood = addr
}

// Serve serves both listeners until ctx is done, then stops every stream.
func (p *Proxy) Serve(ctx context.Context) error {
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, p)
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for _, l := range []net.Listener{p.tcp, p.unix} {
		if l != nil {
			wg.Go(func() { errc <- gs.Serve(l) })
		}
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("local xDS endpoint: %w", err)
	}
	gs.Stop()
	wg.Wait()
	p.relay.Wait()
	if p.unix != nil {
		os.Remove(p.opts.SocketPath)
	}
	return err
}

// dial returns a connection to the upstreams with the current credentials
// and the common name it authenticates as.
func (p *Proxy) dial() (*grpc.ClientConn, string, error) {
	cert, pool, err := p.opts.Credentials()
	if err != nil {
		return nil, "", status.Errorf(codes.Unavailable, "local xDS endpoint: no usable proxy certificate: %v", err)
	}
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, "", status.Errorf(codes.Unavailable, "local xDS endpoint: proxy certificate: %v", err)
		}
	}
	if leaf == nil {
		return nil, "", status.Error(codes.Unavailable, "local xDS endpoint: no proxy certificate")
	}
	addrs := p.order()
	if len(addrs) == 0 {
		return nil, "", status.Error(codes.Unavailable, "local xDS endpoint: the xDS server address is not known yet (the agent learns it from the server)")
	}
	r := manual.NewBuilderWithScheme("osm-xds")
	state := resolver.State{}
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: a})
	}
	r.InitialState(state)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12,
		ClientSessionCache: p.sessionCache(leaf),
		// Resumed sessions carry the certificate checked when they were
		// made, and VerifyConnection runs for them too.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("local xDS endpoint: the upstream sent no certificate")
			}
			return p.opts.VerifyServer(cs.PeerCertificates[0], leaf)
		},
	})
	cc, err := grpc.NewClient("osm-xds:///osm-server",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// A server whose host died without closing the connection is found
		// within 40 s (osm-server allows a ping every 10 s).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err == nil {
				p.connected(addr)
			}
			return c, err
		}),
	)
	if err != nil {
		return nil, "", status.Errorf(codes.Internal, "local xDS endpoint: %v", err)
	}
	return cc, leaf.Subject.CommonName, nil
}

// fixNode makes node carry the agent's identity and metadata; first
// requests without a node get one.
func (p *Proxy) fixNode(node *corev3.Node, cn string, first bool) *corev3.Node {
	if node == nil && !first {
		return nil
	}
	if node == nil {
		node = &corev3.Node{}
	}
	node.Id = cn
	if p.opts.Metadata == nil {
		return node
	}
	if node.Metadata == nil {
		node.Metadata = &structpb.Struct{}
	}
	if node.Metadata.Fields == nil {
		node.Metadata.Fields = map[string]*structpb.Value{}
	}
	for k, v := range p.opts.Metadata() {
		sv, err := structpb.NewValue(v)
		if err != nil {
			p.log.Error("local xDS endpoint: node metadata value not representable", "key", k, "err", err)
			continue
		}
		node.Metadata.Fields[k] = sv
	}
	return node
}

// StreamAggregatedResources carries a local SotW ADS stream upstream.
// When the upstream dies the local stream stays up: the endpoint opens a
// stream to another server and asks it again for everything the
// application subscribed to (sotwSubscriptions).
func (p *Proxy) StreamAggregatedResources(down discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	release, err := p.admit()
	if err != nil {
		return err
	}
	defer release()
	defer p.localStream()()
	return relay(p, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse], error) {
		up, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
		return observed[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse](p, ctx, up, err)
	}, func(m *discoveryv3.DiscoveryRequest, cn string, first bool) {
		m.Node = p.fixNode(m.Node, cn, first)
	}, &sotwSubscriptions{last: map[string]*discoveryv3.DiscoveryRequest{}})
}

// DeltaAggregatedResources carries a local Delta ADS stream upstream.
// When the upstream dies the local stream ends with its status and the
// application reconnects (a Delta stream's state, the versions it holds,
// is the client's to send again).
func (p *Proxy) DeltaAggregatedResources(down discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	release, err := p.admit()
	if err != nil {
		return err
	}
	defer release()
	defer p.localStream()()
	return relay(p, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse], error) {
		up, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		return observed[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse](p, ctx, up, err)
	}, func(m *discoveryv3.DeltaDiscoveryRequest, cn string, first bool) {
		m.Node = p.fixNode(m.Node, cn, first)
	}, nil)
}

// admit takes a place for a new local stream, and returns the call that
// gives it back, or the refusal when MaxStreams are being carried.
func (p *Proxy) admit() (release func(), err error) {
	if p.streams.Add(1) > int64(p.opts.MaxStreams) {
		p.streams.Add(-1)
		return nil, status.Errorf(codes.ResourceExhausted, "local xDS endpoint: it carries at most %d streams at once and has that many open (localXDSMaxStreams in the osm-agent config): close the streams this machine's applications do not use, or raise localXDSMaxStreams", p.opts.MaxStreams)
	}
	return func() { p.streams.Add(-1) }, nil
}

// subscriptions remembers what a local stream asked for, so a new
// upstream stream can be asked for it again.
type subscriptions[Req any] interface {
	// record notes a request as sent upstream (node already fixed).
	record(m Req)
	// replay returns the requests that open a new upstream stream.
	replay() []Req
}

// sotwSubscriptions keeps each type's last SotW request: its resource
// names are the type's whole subscription.
type sotwSubscriptions struct {
	order []string
	last  map[string]*discoveryv3.DiscoveryRequest
	node  *corev3.Node
}

func (s *sotwSubscriptions) record(m *discoveryv3.DiscoveryRequest) {
	if m.GetNode() != nil {
		s.node = proto.Clone(m.GetNode()).(*corev3.Node)
	}
	if _, ok := s.last[m.GetTypeUrl()]; !ok {
		s.order = append(s.order, m.GetTypeUrl())
	}
	s.last[m.GetTypeUrl()] = &discoveryv3.DiscoveryRequest{TypeUrl: m.GetTypeUrl(), ResourceNames: slices.Clone(m.GetResourceNames())}
}

// replay returns each type's subscription as a first request (no version,
// no nonce: the new server sends everything), the node on the first.
func (s *sotwSubscriptions) replay() []*discoveryv3.DiscoveryRequest {
	out := make([]*discoveryv3.DiscoveryRequest, 0, len(s.order))
	for i, t := range s.order {
		m := proto.Clone(s.last[t]).(*discoveryv3.DiscoveryRequest)
		if i == 0 && s.node != nil {
			m.Node = proto.Clone(s.node).(*corev3.Node)
		}
		out = append(out, m)
	}
	return out
}

type downstream[Req, Resp any] interface {
	Context() context.Context
	Recv() (Req, error)
	Send(Resp) error
}

type upstream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

// errLocalEnded: the application ended its stream.
var errLocalEnded = errors.New("the application ended its stream")

// relay carries one local stream to upstream streams and back until the
// application ends it. When an upstream stream ends and subs is not nil
// (SotW), an upstream that died (Unavailable) is replaced by a new stream
// to a server that is up, which is asked again for subs' subscriptions;
// otherwise the local stream ends with the upstream's status. One
// goroutine reads the local stream for its whole life; it ends when gRPC
// cancels the stream as the handler returns. Serve waits for it.
func relay[Req, Resp any](p *Proxy, down downstream[Req, Resp],
	open func(context.Context, *grpc.ClientConn) (upstream[Req, Resp], error),
	fix func(m Req, cn string, first bool), subs subscriptions[Req]) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	reqs := make(chan Req)
	localEnded := make(chan struct{})
	p.relay.Go(func() {
		defer close(localEnded)
		for {
			m, err := down.Recv()
			if err != nil {
				return
			}
			select {
			case reqs <- m:
			case <-ctx.Done():
				return
			}
		}
	})
	backoff := carryBackoffMin
	for carried := false; ; carried = true {
		res := relayOnce(ctx, p, down, open, fix, subs, reqs, localEnded, carried)
		switch {
		case errors.Is(res.err, errLocalEnded) || ctx.Err() != nil:
			return nil
		case subs == nil || !res.opened || status.Code(res.err) != codes.Unavailable:
			p.log.Info("upstream xDS stream ended; the application reconnects", "err", res.err)
			return res.err
		}
		if res.answered {
			backoff = carryBackoffMin
		}
		p.log.Info("upstream xDS stream ended; carrying the application's stream to another server", "err", res.err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		backoff = min(2*backoff, carryBackoffMax)
	}
}

// A local stream whose new upstream streams end before they answer is
// carried again after a backoff between these.
const (
	carryBackoffMin = 50 * time.Millisecond
	carryBackoffMax = 5 * time.Second
)

// relayResult is how one upstream stream ended: err, whether it was
// opened and whether it answered at least once.
type relayResult struct {
	err              error
	opened, answered bool
}

// relayOnce carries the local stream over one upstream stream until it
// ends; carried says the local stream was carried before, so the new
// upstream is asked again for subs' subscriptions first.
func relayOnce[Req, Resp any](ctx context.Context, p *Proxy, down downstream[Req, Resp],
	open func(context.Context, *grpc.ClientConn) (upstream[Req, Resp], error),
	fix func(m Req, cn string, first bool), subs subscriptions[Req],
	reqs <-chan Req, localEnded <-chan struct{}, carried bool) relayResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cc, cn, err := p.dial()
	if err != nil {
		return relayResult{err: err}
	}
	defer cc.Close()
	up, err := open(ctx, cc)
	if err != nil {
		return relayResult{err: upstreamStatus(err)}
	}
	var answered atomic.Bool
	upErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: ends the upstream stream's Recv
	wg.Go(func() {
		for {
			m, err := up.Recv()
			if err != nil {
				upErr <- upstreamStatus(err)
				return
			}
			answered.Store(true)
			if err := down.Send(m); err != nil {
				upErr <- errLocalEnded
				return
			}
		}
	})
	first := true
	send := func(m Req) bool {
		fix(m, cn, first)
		first = false
		if subs != nil {
			subs.record(m)
		}
		return up.Send(m) == nil // on failure the upstream's Recv reports why
	}
	if carried && subs != nil {
		for _, m := range subs.replay() {
			if !send(m) {
				break
			}
		}
	}
	for {
		select {
		case m := <-reqs:
			send(m)
		case err := <-upErr:
			return relayResult{err: err, opened: true, answered: answered.Load()}
		case <-localEnded:
			return relayResult{err: errLocalEnded}
		}
	}
}

// upstreamStatus is the status the local stream ends with when its
// upstream ended with err.
func upstreamStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return status.Error(codes.Unavailable, "the xDS server closed the stream")
	}
	if s, ok := status.FromError(err); ok {
		return status.Errorf(s.Code(), "xDS server: %s", s.Message())
	}
	return status.Errorf(codes.Unavailable, "xDS server: %v", err)
}
