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
// upstream is one of a list of server addresses: a stream tries the
// address that last worked first and the others after it, and when the
// upstream stream ends (the server died, restarted or closed it) the local
// stream ends with the server's status; gRPC clients keep their resources
// and reconnect at once (their backoff restarts after a stream that
// received a response), and the new stream reaches a server that is up.
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
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// Credentials returns the proxy certificate to present upstream and the
// mesh CA the server's certificate must chain to, read when a stream opens.
type Credentials func() (tls.Certificate, *x509.CertPool, error)

// Options configure a Proxy. Credentials is required, and at least one of
// TCPAddress and SocketPath.
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
	// Metadata returns the node metadata the agent asserts for this
	// machine; its keys replace the application's.
	Metadata func() map[string]any
	// Observer, when set, is told of streams opening and ending (observer.go).
	Observer Observer
}

// Proxy is the local xDS endpoint. Build it with Listen, run it with Serve.
type Proxy struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	log   *slog.Logger
	opts  Options
	tcp   net.Listener
	unix  net.Listener
	relay sync.WaitGroup // relay goroutines of streams, waited for by Serve

	mu        sync.Mutex
	upstreams []string
	lastGood  string
}

// Listen binds the local endpoint's listeners.
func Listen(log *slog.Logger, opts Options) (*Proxy, error) {
	if opts.Credentials == nil {
		return nil, errors.New("local xDS endpoint: no credentials for the upstream")
	}
	if opts.TCPAddress == "" && opts.SocketPath == "" {
		return nil, errors.New("local xDS endpoint: neither a TCP address nor a socket path to listen on")
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
	})
	cc, err := grpc.NewClient("osm-xds:///osm-server",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
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
func (p *Proxy) StreamAggregatedResources(down discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	defer p.localStream()()
	return relay(p, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse], error) {
		up, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
		return observed[*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse](p, ctx, up, err)
	}, func(m *discoveryv3.DiscoveryRequest, cn string, first bool) {
		m.Node = p.fixNode(m.Node, cn, first)
	})
}

// DeltaAggregatedResources carries a local Delta ADS stream upstream.
func (p *Proxy) DeltaAggregatedResources(down discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	defer p.localStream()()
	return relay(p, down, func(ctx context.Context, cc *grpc.ClientConn) (upstream[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse], error) {
		up, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		return observed[*discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse](p, ctx, up, err)
	}, func(m *discoveryv3.DeltaDiscoveryRequest, cn string, first bool) {
		m.Node = p.fixNode(m.Node, cn, first)
	})
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

// relay carries one local stream to a new upstream stream and back until
// either ends; the local stream then ends with the upstream's status (or
// the local client's end). The goroutine reading the local stream ends
// when gRPC cancels it as the handler returns; Serve waits for it.
func relay[Req, Resp any](p *Proxy, down downstream[Req, Resp],
	open func(context.Context, *grpc.ClientConn) (upstream[Req, Resp], error),
	fix func(m Req, cn string, first bool)) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	cc, cn, err := p.dial()
	if err != nil {
		return err
	}
	defer cc.Close()
	up, err := open(ctx, cc)
	if err != nil {
		return upstreamStatus(err)
	}
	errc := make(chan error, 2)
	p.relay.Go(func() {
		first := true
		for {
			m, err := down.Recv()
			if err != nil {
				errc <- nil // the application ended its stream
				return
			}
			fix(m, cn, first)
			first = false
			if err := up.Send(m); err != nil {
				return // the upstream ended: its Recv reports why
			}
		}
	})
	p.relay.Go(func() {
		for {
			m, err := up.Recv()
			if err != nil {
				errc <- upstreamStatus(err)
				return
			}
			if err := down.Send(m); err != nil {
				errc <- nil
				return
			}
		}
	})
	err = <-errc
	if err != nil && ctx.Err() == nil {
		p.log.Info("upstream xDS stream ended; the application reconnects", "err", err)
	}
	return err
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
