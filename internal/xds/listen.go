package xds

// The xDS listener: TCP with kernel keepalive, the handshake bounds, and
// the gRPC settings that make thousands of mostly idle streams cheap.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// keepaliveTimeout bounds an unanswered keepalive ping and, as
// TCP_USER_TIMEOUT, unacknowledged data on every connection.
const keepaliveTimeout = 10 * time.Second

// http2DefaultWindow is HTTP/2's initial flow-control window (RFC 9113
// section 6.9.2), 64 KiB - 1.
const http2DefaultWindow = 65535

// Ready reports whether a client may dial xDS now: nil once Serve's
// listener is open, until Serve returns; an error that says why not
// before (for a readiness probe).
func (s *Server) Ready() error {
	if s.listening.Load() == nil {
		return errors.New("the xDS listener is not open yet (it opens once every provider has listed)")
	}
	return nil
}

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
	tlsCfg = s.ident.clientTLS(tlsCfg)
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
	a := ln.Addr().String()
	s.listening.Store(&a)
	defer s.listening.Store(nil)
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
