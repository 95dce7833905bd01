package xds

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// FuzzRequest drives what a client controls in a discovery request (node
// id and metadata, type URL, resource names, version, nonce, error_detail)
// through the server's request handling: parseNode and checkType, which
// decide whether a stream is served, then for an accepted request the SotW
// stream's subscription handling over a cache holding a view (request,
// its ACK or NACK, then the request as sent again), or the cache's Delta
// watch. Beyond not panicking: a refusal is InvalidArgument, an accepted
// first SotW request is answered at once, and neither its ACK nor its NACK
// is answered again.
func FuzzRequest(f *testing.F) {
	md := func(fields map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	envoy := md(map[string]any{MetadataFlavor: "envoy", MetadataAddress: "10.0.0.10"})
	grpcMD := md(map[string]any{MetadataFlavor: "grpc", MetadataAddress: "10.0.0.10"})
	for _, m := range []proto.Message{
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: envoy}, TypeUrl: resource.ClusterType},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: grpcMD}, TypeUrl: resource.ListenerType, ResourceNames: []string{"a", "missing"}},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: grpcMD}, TypeUrl: resource.RouteType, ResourceNames: []string{"*", "a"}, VersionInfo: "1", ResponseNonce: "1"},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: envoy}, TypeUrl: resource.EndpointType, ResourceNames: []string{"b"}, ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad"}},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: md(map[string]any{MetadataFlavor: 1.0, MetadataAddress: true})}, TypeUrl: resource.SecretType},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: md(map[string]any{MetadataAddress: "::ffff:10.0.0.1"})}, TypeUrl: "type.googleapis.com/unknown"},
		&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: md(map[string]any{MetadataAddress: map[string]any{"x": nil}})}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
	}
	for _, m := range []proto.Message{
		&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: envoy}, TypeUrl: resource.ClusterType},
		&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: grpcMD}, TypeUrl: resource.ListenerType, ResourceNamesSubscribe: []string{"a", "missing"}, ResourceNamesUnsubscribe: []string{"*"}},
		&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Metadata: envoy}, TypeUrl: resource.EndpointType, InitialResourceVersions: map[string]string{"a": "x", "": ""}, ResponseNonce: "3", ErrorDetail: &rpcstatus.Status{Message: "bad"}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, delta bool) {
		var node *corev3.Node
		var typeURL string
		var sotw *discovery.DiscoveryRequest
		var dreq *discovery.DeltaDiscoveryRequest
		if delta {
			dreq = &discovery.DeltaDiscoveryRequest{}
			if proto.Unmarshal(data, dreq) != nil {
				return
			}
			node, typeURL = dreq.GetNode(), dreq.GetTypeUrl()
		} else {
			sotw = &discovery.DiscoveryRequest{}
			if proto.Unmarshal(data, sotw) != nil {
				return
			}
			node, typeURL = sotw.GetNode(), sotw.GetTypeUrl()
		}
		if node == nil {
			return // refused before this point: the first request must carry the node
		}
		flavor, addr, err := parseNode(node)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("parseNode refused with %v, want InvalidArgument", err)
			}
			return
		}
		if !addr.IsValid() || addr.IsUnspecified() || addr.Zone() != "" || (flavor != render.Envoy && flavor != render.GRPC) {
			t.Fatalf("parseNode accepted flavor %v address %v", flavor, addr)
		}
		if err := checkType(flavor, typeURL); err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("checkType refused with %v, want InvalidArgument", err)
			}
			return
		}
		nodeID := "n"
		if flavor == render.GRPC {
			nodeID += "~grpc"
		}
		node.Id = nodeID // as authRecv does
		c := fuzzCache(t, nodeID)
		if delta {
			sub := gcpstream.NewDeltaSubscription(dreq.GetResourceNamesSubscribe(), dreq.GetResourceNamesUnsubscribe(), dreq.GetInitialResourceVersions(), true)
			ch := make(chan gcpcache.DeltaResponse, 1)
			cancel, err := c.CreateDeltaWatch(dreq, &sub, ch)
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			select {
			case r := <-ch:
				if _, err := r.GetDeltaDiscoveryResponse(); err != nil {
					t.Fatal(err)
				}
			default:
			}
			return
		}
		gs := &sentStream{}
		h := newSotwStream(gs, c)
		// As the first request on its stream, with the client's names.
		first := proto.Clone(sotw).(*discovery.DiscoveryRequest)
		first.ResponseNonce, first.VersionInfo, first.ErrorDetail = "", "", nil
		if err := h.request(first); err != nil {
			t.Fatalf("first request refused: %v", err)
		}
		if err := h.flush(); err != nil {
			t.Fatal(err)
		}
		if len(gs.sent) != 1 {
			t.Fatalf("first %s request for %q answered %d times, want once (at once)", typeURL, first.GetResourceNames(), len(gs.sent))
		}
		resp := gs.sent[0]
		// Its ACK, or its NACK when the client sent an error_detail: not answered again.
		again := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: first.GetResourceNames(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ErrorDetail: sotw.GetErrorDetail()}
		if err := h.request(again); err != nil {
			t.Fatalf("ACK refused: %v", err)
		}
		if err := h.flush(); err != nil {
			t.Fatal(err)
		}
		if len(gs.sent) != 1 {
			t.Fatalf("ACK/NACK (error_detail %v) of a %s response answered again: %d responses", sotw.GetErrorDetail(), typeURL, len(gs.sent))
		}
		// The client's request as it sent it (its own nonce and version).
		if err := h.request(sotw); err != nil {
			t.Fatalf("request refused: %v", err)
		}
		if err := h.flush(); err != nil {
			t.Fatal(err)
		}
		h.closeWatches()
	})
}

// fuzzCache returns a cache holding a small view of every type for nodeID.
func fuzzCache(t *testing.T, nodeID string) *cache.Cache {
	c := cache.New(discard())
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType, resource.SecretType} {
		var rs []*cache.Resource
		if typeURL == resource.ClusterType {
			for _, n := range []string{"a", "b"} {
				r, err := c.NewResource(n, &clusterv3.Cluster{Name: n})
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
		}
		set, err := cache.NewSet(rs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Publish(nodeID, typeURL, set); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
