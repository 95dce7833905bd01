package agenttest

import (
	"net"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
	TypeURL string
	Version string
}

// ADSServer is a minimal ADS server over mTLS on 127.0.0.1: it answers a
// listener request with one listener (version "1") and reports ACKs.
type ADSServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	Addr string
	Acks chan Ack
}

// StartADS starts an ADS server whose certificate ca signed and which
// requires client certificates ca signed. It stops when the test ends.
func StartADS(t testing.TB, ca *CA) *ADSServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &ADSServer{Addr: lis.Addr().String(), Acks: make(chan Ack, 100)}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(ca.ServerTLS(t))))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return s
}

// StreamAggregatedResources implements ADS.
func (s *ADSServer) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	var peerCN string
	if p, ok := peer.FromContext(stream.Context()); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			peerCN = ti.State.PeerCertificates[0].Subject.CommonName
		}
	}
	listener, err := anypb.New(&listenerv3.Listener{
		Name: "fake",
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 1},
		}}},
	})
	if err != nil {
		return err
	}
	var nodeID string
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if req.GetNode().GetId() != "" {
			nodeID = req.GetNode().GetId()
		}
		switch {
		case req.GetTypeUrl() != ListenerType:
		case req.GetResponseNonce() == "":
			if err := stream.Send(&discoveryv3.DiscoveryResponse{
				VersionInfo: "1", Nonce: "1", TypeUrl: ListenerType, Resources: []*anypb.Any{listener},
			}); err != nil {
				return nil
			}
		case req.GetErrorDetail() == nil && req.GetVersionInfo() == "1":
			select {
			case s.Acks <- Ack{NodeID: nodeID, PeerCN: peerCN, TypeURL: req.GetTypeUrl(), Version: req.GetVersionInfo()}:
			case <-stream.Context().Done():
				return nil
			}
		}
	}
}
