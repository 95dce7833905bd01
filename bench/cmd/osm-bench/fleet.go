package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/osm-vm/osm-vm/bench/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Node metadata keys osm-server reads (internal/xds MetadataFlavor and
// MetadataAddress; kept here so that L and F build without internal/xds).
const (
	metadataFlavor  = "osm.flavor"
	metadataAddress = "osm.advertiseAddress"
)

// identity is one simulated proxy's certificate; its CN is its node ID.
type identity struct {
	CN      string
	Cert    tls.Certificate
	Address string // the VM's address the proxy advertises (node metadata)
}

// endpoint is where and how the fleet reaches a server.
type endpoint struct {
	Addr       string
	ServerName string
	Roots      *x509.CertPool
}

// probe is one measured change: the bytes that identify the response
// carrying it and where affected proxies report their ACK.
type probe struct {
	seq    int
	marker []byte
	acks   chan ackEvent
	sized  atomic.Bool // one proxy measures the changed CLA
}

type ackEvent struct {
	at       time.Time
	bytes    int // size of the response that carried the change
	claBytes int // size of the changed ClusterLoadAssignment, from one proxy only (else 0)
}

// fleet holds the simulated proxies' shared state.
type fleet struct {
	ep      endpoint
	probe   atomic.Pointer[probe]
	retries atomic.Int64 // connections tried again after failing before configured
	// sessions holds each proxy's TLS session cache (by CN), as an Envoy
	// keeps one per cluster: a proxy that reconnects offers the server its
	// session ticket. One per proxy, never shared: a resumed session
	// carries the client certificate of the handshake that made it.
	sessions sync.Map
	// noResume makes every connection a full handshake.
	noResume bool
	resumed  atomic.Int64 // connections whose TLS handshake resumed a session
}

// sessionCache returns the TLS session cache of the proxy cn.
func (f *fleet) sessionCache(cn string) tls.ClientSessionCache {
	if f.noResume {
		return nil
	}
	if c, ok := f.sessions.Load(cn); ok {
		return c.(tls.ClientSessionCache)
	}
	c, _ := f.sessions.LoadOrStore(cn, tls.NewLRUClientSessionCache(1))
	return c.(tls.ClientSessionCache)
}

// proxyClient is one simulated proxy: its own TCP+TLS connection and one
// ADS stream. It decodes response envelopes only, plus the clusters of a
// CDS response (to name its EDS subscription), and ACKs at once.
type proxyClient struct {
	f          *fleet
	id         identity
	conn       *grpc.ClientConn
	cancel     context.CancelFunc
	done       chan struct{}
	configured chan struct{}
	started    time.Time
	readyAt    time.Time // when all three types had been ACKed once
	err        error     // why the stream ended, read after done
	responses  atomic.Int64
	maxMsg     atomic.Int64
	lastProbe  int
}

// connect dials (TLS handshake included), opens the ADS stream and
// subscribes to CDS and LDS; EDS follows from the clusters. The stream runs
// until ctx ends or close is called.
func (f *fleet) connect(ctx context.Context, id identity) (*proxyClient, error) {
	pc := &proxyClient{f: f, id: id, done: make(chan struct{}), configured: make(chan struct{}), started: time.Now()}
	creds := credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13,
		// Sent as it is, as Envoy sends its own: with Certificates, Go
		// would parse each proxy's certificate in every handshake to
		// check it against the CAs the server accepts (or keep it
		// parsed, 3.9 KB of pointers per proxy in the fleet's heap).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &id.Cert, nil },
		RootCAs:              f.ep.Roots,
		ServerName:           f.ep.ServerName,
		ClientSessionCache:   f.sessionCache(id.CN),
	})
	conn, err := grpc.NewClient(f.ep.Addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithReadBufferSize(16<<10),
		grpc.WithWriteBufferSize(4<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		// Fixed HTTP/2 windows, as Envoy's xDS client has: gRPC's dynamic
		// flow control would PING with every response, which no Envoy does
		// and every server under test would have to answer.
		grpc.WithInitialWindowSize(16<<20),
		grpc.WithInitialConnWindowSize(16<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", id.CN, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, wire.ADSMethod,
		grpc.ForceCodecV2(wire.Codec{}), grpc.WaitForReady(true))
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("proxy %s: ADS stream: %w", id.CN, err)
	}
	pc.conn, pc.cancel = conn, cancel
	// osm-server renders inbound listeners on the VM's address, which an
	// agent writes into the node metadata; every server gets the same node.
	node := &corev3.Node{Id: id.CN, Cluster: "osm-bench", Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		metadataFlavor:  structpb.NewStringValue("envoy"),
		metadataAddress: structpb.NewStringValue(id.Address),
	}}}
	for i, t := range []string{resource.ClusterType, resource.ListenerType} {
		req := &discovery.DiscoveryRequest{TypeUrl: t}
		if i == 0 {
			req.Node = node
		}
		if err := stream.SendMsg(req); err != nil {
			cancel()
			conn.Close()
			return nil, fmt.Errorf("proxy %s: subscribe: %w", id.CN, err)
		}
	}
	go func() {
		defer close(pc.done)
		pc.err = pc.run(stream)
	}()
	return pc, nil
}

// close ends the stream and the connection and waits for the stream's goroutine.
func (pc *proxyClient) close() {
	pc.cancel()
	pc.conn.Close()
	<-pc.done
}

func (pc *proxyClient) run(stream grpc.ClientStream) error {
	var (
		acked    [3]bool
		edsNames []string
		edsVer   string
		edsNonce string
	)
	for {
		var b []byte
		if err := stream.RecvMsg(&b); err != nil {
			return err
		}
		if pc.responses.Add(1) == 1 {
			if p, ok := peer.FromContext(stream.Context()); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && ti.State.DidResume {
					pc.f.resumed.Add(1)
				}
			}
		}
		if n := int64(len(b)); n > pc.maxMsg.Load() {
			pc.maxMsg.Store(n)
		}
		env, err := wire.ParseEnvelope(b)
		if err != nil {
			return err
		}
		ti := typeIndex(env.TypeURL)
		if ti < 0 {
			continue
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: env.TypeURL, VersionInfo: env.Version, ResponseNonce: env.Nonce}
		var subscribeEDS []string
		switch env.TypeURL {
		case resource.ClusterType:
			names, err := edsClusterNames(env.Resources)
			if err != nil {
				return fmt.Errorf("CDS response: %w", err)
			}
			if !slices.Equal(names, edsNames) {
				edsNames, subscribeEDS = names, names
			}
		case resource.EndpointType:
			ack.ResourceNames = edsNames
			edsVer, edsNonce = env.Version, env.Nonce
		}
		if err := stream.SendMsg(ack); err != nil {
			return err
		}
		if subscribeEDS != nil {
			req := &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: subscribeEDS, VersionInfo: edsVer, ResponseNonce: edsNonce}
			if err := stream.SendMsg(req); err != nil {
				return err
			}
		}
		now := time.Now()
		if env.TypeURL == resource.EndpointType || env.TypeURL == resource.ClusterType {
			// An endpoint change shows in EDS; the HA section's applies add
			// a Service, which shows in CDS.
			pc.checkProbe(b, env, now)
		}
		if !acked[ti] {
			acked[ti] = true
			if acked[0] && acked[1] && acked[2] {
				pc.readyAt = now
				close(pc.configured)
			}
		}
	}
}

// checkProbe reports the ACK of the response carrying the current change.
func (pc *proxyClient) checkProbe(b []byte, env wire.Envelope, ackAt time.Time) {
	p := pc.f.probe.Load()
	if p == nil || p.seq == pc.lastProbe || !bytes.Contains(b, p.marker) {
		return
	}
	pc.lastProbe = p.seq
	ev := ackEvent{at: ackAt, bytes: len(b)}
	if p.sized.CompareAndSwap(false, true) {
		for _, r := range env.Resources {
			if bytes.Contains(r, p.marker) {
				if v, err := wire.AnyValue(r); err == nil {
					ev.claBytes = len(v)
				}
			}
		}
	}
	select {
	case p.acks <- ev:
	default: // the channel holds one slot per affected proxy; more means a duplicate push
	}
}

// edsClusterNames decodes the clusters of a CDS response for the names
// an EDS subscription needs.
func edsClusterNames(anys [][]byte) ([]string, error) {
	var names []string
	var c clusterv3.Cluster
	for _, a := range anys {
		v, err := wire.AnyValue(a)
		if err != nil {
			return nil, err
		}
		c.Reset()
		if err := proto.Unmarshal(v, &c); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if c.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		n := c.GetEdsClusterConfig().GetServiceName()
		if n == "" {
			n = c.GetName()
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// connectAll connects ids with at most parallel handshakes in flight and
// waits until every proxy is configured, for at most timeout. The streams
// live until ctx ends or they are closed. It returns the clients connected
// so far either way.
func (f *fleet) connectAll(ctx context.Context, ids []identity, parallel int, timeout time.Duration) ([]*proxyClient, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]*proxyClient, len(ids))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, parallel)
	for i, id := range ids {
		select {
		case sem <- struct{}{}:
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// Like an agent, a proxy whose connection fails before it is
			// configured tries again, with a growing, jittered backoff.
			var (
				pc  *proxyClient
				err error
			)
			for attempt := 0; ; attempt++ {
				if pc, err = f.connect(ctx, id); err == nil {
					err = pc.waitConfigured(wctx)
				}
				if err == nil || wctx.Err() != nil {
					break
				}
				if pc != nil {
					pc.close()
					pc = nil
				}
				f.retries.Add(1)
				backoff := min(100*time.Millisecond<<attempt, 2*time.Second)
				select {
				case <-time.After(backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)))):
				case <-wctx.Done():
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if pc != nil {
				out[i] = pc
			}
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	out = slices.DeleteFunc(out, func(pc *proxyClient) bool { return pc == nil })
	if first == nil {
		first = wctx.Err()
	}
	return out, first
}

func (pc *proxyClient) waitConfigured(ctx context.Context) error {
	select {
	case <-pc.configured:
		return nil
	case <-pc.done:
		return fmt.Errorf("proxy %s: stream ended before it was configured: %w", pc.id.CN, pc.err)
	case <-ctx.Done():
		return fmt.Errorf("proxy %s: not configured: %w", pc.id.CN, ctx.Err())
	}
}

func closeAll(pcs []*proxyClient) {
	var wg sync.WaitGroup
	for _, pc := range pcs {
		wg.Add(1)
		go func() { defer wg.Done(); pc.close() }()
	}
	wg.Wait()
}

var errNotAvailable = errors.New("not available")
