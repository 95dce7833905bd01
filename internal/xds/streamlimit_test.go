package xds

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// openStream opens an ADS stream as node cn on conn, asks for clusters
// and returns the call that ends the stream and the answer's error.
func (e *env) openStream(t testing.TB, conn *grpc.ClientConn, cn string) (context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	t.Cleanup(cancel)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return cancel, err
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType}); err != nil {
		_, err = s.Recv()
		return cancel, err
	}
	_, err = s.Recv()
	return cancel, err
}

func (e *env) conn(t testing.TB, cert tls.Certificate) *grpc.ClientConn {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// liveStreams returns how many streams of cn the server counts.
func (e *env) liveStreams(cn string) int {
	n := 0
	for _, st := range e.srv.table.live() {
		if st.cn == cn {
			n++
		}
	}
	return n
}

// One proxy identity may have at most xdsMaxStreamsPerProxy streams open
// at once, over one connection or many: the next is refused with
// ResourceExhausted naming the bound, the identity and the config key; a
// stream that ends frees its place; another proxy is not affected.
func TestStreamsPerProxyAreBounded(t *testing.T) {
	const bound = 3
	outer := t
	e := startEnvWith(t, envOptions{server: Options{MaxStreamsPerProxy: bound}})
	cert, other := e.enroll(t, "bookbuyer"), e.enroll(t, "bookthief")
	cn := cnOf(t, cert)
	// Two connections, as an agent's local endpoint (one per stream) and
	// Envoy (its own) would have.
	conns := []*grpc.ClientConn{e.conn(t, cert), e.conn(t, cert)}
	var cancels []context.CancelFunc
	for i := range bound {
		cancel, err := e.openStream(t, conns[i%2], cn)
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, bound, err)
		}
		cancels = append(cancels, cancel)
	}
	_, err := e.openStream(t, conns[1], cn)
	wantCode(t, err, codes.ResourceExhausted, fmt.Sprintf("proxy %s has %d xDS streams open", cn, bound))
	wantCode(t, err, codes.ResourceExhausted, "xdsMaxStreamsPerProxy 3")
	if n := e.liveStreams(cn); n != bound {
		t.Errorf("after a refusal the server counts %d streams of %s, want %d", n, cn, bound)
	}

	t.Run("another proxy is not affected", func(t *testing.T) {
		if _, err := e.openStream(t, e.conn(t, other), cnOf(t, other)); err != nil {
			t.Fatalf("a stream of another proxy while %s has %d: %v", cn, bound, err)
		}
	})

	t.Run("a stream that ends frees its place", func(t *testing.T) {
		cancels[0]()
		testwait.For(t, "the ended stream to be counted out", func() bool { return e.liveStreams(cn) < bound })
		cancel, err := e.openStream(outer, conns[0], cn) // outlives this subtest
		if err != nil {
			t.Fatalf("a stream after one of %d ended: %v", bound, err)
		}
		cancels[0] = cancel
	})

	t.Run("streams ended by the server are counted out", func(t *testing.T) {
		// A refused request ends the stream on the server's side.
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
		defer cancel()
		cancels[1]()
		testwait.For(t, "the ended stream to be counted out", func() bool { return e.liveStreams(cn) < bound })
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conns[1]).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, other), "10.0.0.10"), TypeUrl: resource.ClusterType})
		_, err = s.Recv()
		wantCode(t, err, codes.PermissionDenied, "does not match")
		testwait.For(t, "the refused stream to be counted out", func() bool { return e.liveStreams(cn) == bound-1 })
		if n := e.srv.Disconnect(cn, ErrRevoked); n != bound-1 {
			t.Errorf("Disconnect ended %d streams, want %d", n, bound-1)
		}
		testwait.For(t, "every stream to be counted out", func() bool { return e.liveStreams(cn) == 0 })
		e.srv.table.mu.Lock()
		defer e.srv.table.mu.Unlock()
		if _, ok := e.srv.table.limit.perCN[cn]; ok {
			t.Errorf("the server still holds a count for %s after its last stream ended", cn)
		}
	})
}
