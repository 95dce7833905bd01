package agenttest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/anypb"
)

// ListenerType is the xDS type URL of listeners.
const ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"

// Ack is one ACK the ADS server received.
type Ack struct {
	NodeID  string // from the stream's first request
	PeerCN  string // the client certificate's common name
	Resumed bool   // the connection's TLS handshake resumed a session
	TypeURL string
	Version string
	// Node is the stream's first node and Server the address of the
	// ADS server that received the ACK.
	Node   *corev3.Node
	Server string
}

// ADSServer is a minimal ADS server over mTLS on 127.0.0.1: it answers a
// listener request with one listener (version "1") and reports ACKs.
type ADSServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	Addr string
	Acks chan Ack
	stop func()
}

// Stop stops the server at once, ending its streams (as a server that
// dies would).
func (s *ADSServer) Stop() { s.stop() }

// StartADS starts an ADS server whose certificate ca signed and which
// requires client certificates ca signed. It stops when the test ends.
func StartADS(t testing.TB, ca *CA) *ADSServer {
	t.Helper()
	return StartADSWith(t, ca.ServerTLS(t))
}

// StartADSWith starts an ADS server with the TLS config cfg (an impostor's,
// say). It stops when the test ends.
func StartADSWith(t testing.TB, cfg *tls.Config) *ADSServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &ADSServer{Addr: lis.Addr().String(), Acks: make(chan Ack, 100)}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(lis)
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			gs.Stop()
			<-done
		})
	}
	t.Cleanup(s.Stop)
	return s
}

func peerCN(ctx context.Context) (cn string, resumed bool) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			return ti.State.PeerCertificates[0].Subject.CommonName, ti.State.DidResume
		}
	}
	return "", false
}

func fakeListener() (*anypb.Any, error) {
	return anypb.New(&listenerv3.Listener{
		Name: "fake",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 1},
		}}},
	})
}

// StreamAggregatedResources implements ADS.
func (s *ADSServer) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	listener, err := fakeListener()
	if err != nil {
		return err
	}
	return serveFake(s, stream.Context(), stream.Recv,
		func() error {
			return stream.Send(&discoveryv3.DiscoveryResponse{
				VersionInfo: "1", Nonce: "1", TypeUrl: ListenerType, Resources: []*anypb.Any{listener},
			})
		},
		func(req *discoveryv3.DiscoveryRequest) bool { return req.GetVersionInfo() == "1" })
}

// DeltaAggregatedResources implements Delta ADS: it answers a listener
// subscription with the one listener (version "1") and reports ACKs.
func (s *ADSServer) DeltaAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	listener, err := fakeListener()
	if err != nil {
		return err
	}
	return serveFake(s, stream.Context(), stream.Recv,
		func() error {
			return stream.Send(&discoveryv3.DeltaDiscoveryResponse{
				SystemVersionInfo: "1", Nonce: "1", TypeUrl: ListenerType,
				Resources: []*discoveryv3.Resource{{Name: "fake", Version: "1", Resource: listener}},
			})
		},
		func(*discoveryv3.DeltaDiscoveryRequest) bool { return true })
}

// fakeRequest is what serveFake reads of a SotW or Delta request.
type fakeRequest interface {
	GetNode() *corev3.Node
	GetTypeUrl() string
	GetResponseNonce() string
	GetErrorDetail() *status.Status
}

// serveFake is both ADS flavours: a listener subscription is answered
// with the one listener (sendListener), and an ACK of it (an answer
// without error that isVersion1 accepts) is reported on s.Acks.
func serveFake[R fakeRequest](s *ADSServer, ctx context.Context, recv func() (R, error), sendListener func() error, isVersion1 func(R) bool) error {
	peerCN, resumed := peerCN(ctx)
	var nodeID string
	var node *corev3.Node
	for {
		req, err := recv()
		if err != nil {
			return nil
		}
		if req.GetNode().GetId() != "" {
			nodeID = req.GetNode().GetId()
		}
		if node == nil {
			node = req.GetNode()
		}
		switch {
		case req.GetTypeUrl() != ListenerType:
		case req.GetResponseNonce() == "":
			if err := sendListener(); err != nil {
				return nil
			}
		case req.GetErrorDetail() == nil && isVersion1(req):
			select {
			case s.Acks <- Ack{NodeID: nodeID, PeerCN: peerCN, Resumed: resumed, TypeURL: req.GetTypeUrl(), Version: "1", Node: node, Server: s.Addr}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
