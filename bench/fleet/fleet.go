// Package fleet is the simulated fleet: N proxies, each with its own
// client certificate, TCP+TLS connection (resuming its TLS session when
// it reconnects, as Envoy does) and ADS stream that reads response
// envelopes only and ACKs at once; a probe that times a change's arrival
// at the proxies it reaches; and the harness's own collector and CPU,
// kept out of the windows measured. The fleet is the same whichever
// server it fills. It imports nothing of osm-vm; its wire is bench/wire.
package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/osm-vm/osm-vm/bench/pki"
	"github.com/osm-vm/osm-vm/bench/wire"
	"github.com/osm-vm/osm-vm/bench/workload"
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

// Identity is one simulated proxy's certificate; its CN is its node ID.
type Identity struct {
	CN      string
	Cert    tls.Certificate
	Address string // the VM's address the proxy advertises (node metadata)
}

// Endpoint is where and how the fleet reaches a server.
type Endpoint struct {
	Addr       string
	ServerName string
	Roots      *x509.CertPool
}

// Probe is one measured change: the bytes that identify the response
// carrying it and where affected proxies report their ACK.
type Probe struct {
	Seq    int
	Marker []byte
	Acks   chan AckEvent
	sized  atomic.Bool // one proxy measures the changed CLA
}

type AckEvent struct {
	At       time.Time
	Bytes    int // size of the response that carried the change
	CLABytes int // size of the changed ClusterLoadAssignment, from one proxy only (else 0)
}

// Fleet holds the simulated proxies' shared state.
type Fleet struct {
	Endpoint Endpoint
	Probe    atomic.Pointer[Probe]
	Retries  atomic.Int64 // connections tried again after failing before configured
	// sessions holds each proxy's TLS session cache (by CN), as an Envoy
	// keeps one per cluster: a proxy that reconnects offers the server its
	// session ticket. One per proxy, never shared: a resumed session
	// carries the client certificate of the handshake that made it.
	sessions sync.Map
	// NoResume makes every connection a full handshake.
	NoResume bool
	Resumed  atomic.Int64 // connections whose TLS handshake resumed a session
}

// sessionCache returns the TLS session cache of the proxy cn.
func (f *Fleet) sessionCache(cn string) tls.ClientSessionCache {
	if f.NoResume {
		return nil
	}
	if c, ok := f.sessions.Load(cn); ok {
		return c.(tls.ClientSessionCache)
	}
	c, _ := f.sessions.LoadOrStore(cn, tls.NewLRUClientSessionCache(1))
	return c.(tls.ClientSessionCache)
}

// ProxyClient is one simulated proxy: its own TCP+TLS connection and one
// ADS stream. It decodes response envelopes only, plus the clusters of a
// CDS response (to name its EDS subscription), and ACKs at once.
type ProxyClient struct {
	f          *Fleet
	ID         Identity
	conn       *grpc.ClientConn
	cancel     context.CancelFunc
	done       chan struct{}
	configured chan struct{}
	Started    time.Time
	ReadyAt    time.Time // when all three types had been ACKed once
	err        error     // why the stream ended, read after done
	Responses  atomic.Int64
	MaxMsg     atomic.Int64
	lastProbe  int
}

// Connect dials (TLS handshake included), opens the ADS stream and
// subscribes to CDS and LDS; EDS follows from the clusters. The stream runs
// until ctx ends or close is called.
func (f *Fleet) Connect(ctx context.Context, id Identity) (*ProxyClient, error) {
	pc := &ProxyClient{f: f, ID: id, done: make(chan struct{}), configured: make(chan struct{}), Started: time.Now()}
	creds := credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13,
		// Sent as it is, as Envoy sends its own: with Certificates, Go
		// would parse each proxy's certificate in every handshake to
		// check it against the CAs the server accepts (or keep it
		// parsed, 3.9 KB of pointers per proxy in the fleet's heap).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &id.Cert, nil },
		RootCAs:              f.Endpoint.Roots,
		ServerName:           f.Endpoint.ServerName,
		ClientSessionCache:   f.sessionCache(id.CN),
	})
	conn, err := grpc.NewClient(f.Endpoint.Addr,
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

// Done is closed when the proxy's stream has ended.
func (pc *ProxyClient) Done() <-chan struct{} { return pc.done }

// Close ends the stream and the connection and waits for the stream's goroutine.
func (pc *ProxyClient) Close() {
	pc.cancel()
	pc.conn.Close()
	<-pc.done
}

func (pc *ProxyClient) run(stream grpc.ClientStream) error {
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
		if pc.Responses.Add(1) == 1 {
			if p, ok := peer.FromContext(stream.Context()); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && ti.State.DidResume {
					pc.f.Resumed.Add(1)
				}
			}
		}
		if n := int64(len(b)); n > pc.MaxMsg.Load() {
			pc.MaxMsg.Store(n)
		}
		env, err := wire.ParseEnvelope(b)
		if err != nil {
			return err
		}
		ti := wire.TypeIndex(env.TypeURL)
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
				pc.ReadyAt = now
				close(pc.configured)
			}
		}
	}
}

// checkProbe reports the ACK of the response carrying the current change.
func (pc *ProxyClient) checkProbe(b []byte, env wire.Envelope, ackAt time.Time) {
	p := pc.f.Probe.Load()
	if p == nil || p.Seq == pc.lastProbe || !bytes.Contains(b, p.Marker) {
		return
	}
	pc.lastProbe = p.Seq
	ev := AckEvent{At: ackAt, Bytes: len(b)}
	if p.sized.CompareAndSwap(false, true) {
		for _, r := range env.Resources {
			if bytes.Contains(r, p.Marker) {
				if v, err := wire.AnyValue(r); err == nil {
					ev.CLABytes = len(v)
				}
			}
		}
	}
	select {
	case p.Acks <- ev:
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

// ConnectAll connects ids with at most parallel handshakes in flight and
// waits until every proxy is configured, for at most timeout. The streams
// live until ctx ends or they are closed. It returns the clients connected
// so far either way.
func (f *Fleet) ConnectAll(ctx context.Context, ids []Identity, parallel int, timeout time.Duration) ([]*ProxyClient, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]*ProxyClient, len(ids))
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
				pc  *ProxyClient
				err error
			)
			for attempt := 0; ; attempt++ {
				if pc, err = f.Connect(ctx, id); err == nil {
					err = pc.WaitConfigured(wctx)
				}
				if err == nil || wctx.Err() != nil {
					break
				}
				if pc != nil {
					pc.Close()
					pc = nil
				}
				f.Retries.Add(1)
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
	out = slices.DeleteFunc(out, func(pc *ProxyClient) bool { return pc == nil })
	if first == nil {
		first = wctx.Err()
	}
	return out, first
}

func (pc *ProxyClient) WaitConfigured(ctx context.Context) error {
	select {
	case <-pc.configured:
		return nil
	case <-pc.done:
		return fmt.Errorf("proxy %s: stream ended before it was configured: %w", pc.ID.CN, pc.err)
	case <-ctx.Done():
		return fmt.Errorf("proxy %s: not configured: %w", pc.ID.CN, ctx.Err())
	}
}

func CloseAll(pcs []*ProxyClient) {
	var wg sync.WaitGroup
	for _, pc := range pcs {
		wg.Add(1)
		go func() { defer wg.Done(); pc.Close() }()
	}
	wg.Wait()
}

// identities mints n client certificates from ca for w's proxies, in
// parallel, once per harness run.
func MintIdentities(ca *pki.CA, w workload.Workload, n int) ([]Identity, error) {
	ids := make([]Identity, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const workers = 8
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := k; p < n; p += workers {
				cn := w.ProxyCN(p)
				cert, err := ca.Issue(cn, int64(1000+p), false)
				ids[p], errs[p] = Identity{CN: cn, Cert: cert, Address: w.ProxyAddr(p).String()}, err
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}
