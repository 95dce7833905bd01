package xds

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func marshalRequest(t testing.TB, req *discovery.DiscoveryRequest) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkDecodesAsProto decodes b with r and with proto.Unmarshal and fails
// unless both refuse it or both decode the same message.
func checkDecodesAsProto(t testing.TB, r *sotwRequests, b []byte) *discovery.DiscoveryRequest {
	t.Helper()
	want := &discovery.DiscoveryRequest{}
	wantErr := proto.Unmarshal(b, want)
	gotErr := newWireCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("decoding %x: error %v, proto.Unmarshal's %v", b, gotErr, wantErr)
	}
	if gotErr != nil {
		return nil
	}
	if !proto.Equal(r.req, want) {
		t.Fatalf("decoding %x:\n got %v\nwant %v", b, r.req, want)
	}
	return r.req
}

func TestSotwRequestsDecodeAsProtoUnmarshal(t *testing.T) {
	var r sotwRequests
	node := &corev3.Node{Id: "proxy"}
	eds := func(version, nonce string, names ...string) *discovery.DiscoveryRequest {
		return &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: version, ResponseNonce: nonce, ResourceNames: names}
	}
	appendField := func(b []byte, num protowire.Number, v string) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendString(b, v)
	}

	checkDecodesAsProto(t, &r, marshalRequest(t, &discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}))
	checkDecodesAsProto(t, &r, marshalRequest(t, &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "1", ResponseNonce: "1"}))
	first := checkDecodesAsProto(t, &r, marshalRequest(t, eds("", "", "a", "b")))
	ack := checkDecodesAsProto(t, &r, marshalRequest(t, eds("2", "2", "a", "b")))
	if &ack.ResourceNames[0] != &first.ResourceNames[0] || ack.TypeUrl != first.TypeUrl {
		t.Error("an ACK naming what the request before it named does not share its names")
	}
	if ack == first {
		t.Error("an ACK decoded into the message of the request before it: a stream tells its watches apart by their requests")
	}
	again := checkDecodesAsProto(t, &r, marshalRequest(t, eds("2", "2", "a", "b")))
	if again == ack {
		t.Error("a request repeating the last one's bytes is not a new message")
	}

	// Other names, fewer, more: decoded whole, and the next ACK shares them.
	for _, names := range [][]string{{"a", "c"}, {"a"}, {"a", "c", "d"}, nil, {"a", "b"}} {
		checkDecodesAsProto(t, &r, marshalRequest(t, eds("3", "3", names...)))
		checkDecodesAsProto(t, &r, marshalRequest(t, eds("4", "4", names...)))
	}

	// A type URL it does not decode itself, then its ACK.
	other := &discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/other", ResourceNames: []string{"x"}}
	checkDecodesAsProto(t, &r, marshalRequest(t, other))
	other.VersionInfo, other.ResponseNonce = "1", "1"
	checkDecodesAsProto(t, &r, marshalRequest(t, other))

	// A NACK, a node on a later request, fields in another order, repeated
	// scalars (the last one counts), a field it does not know, a known
	// field with another wire type, invalid UTF-8, a truncated request.
	nack := eds("4", "5", "a", "b")
	nack.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "bad"}
	checkDecodesAsProto(t, &r, marshalRequest(t, nack))
	withNode := eds("4", "6", "a", "b")
	withNode.Node = node
	checkDecodesAsProto(t, &r, marshalRequest(t, withNode))
	var reordered []byte
	reordered = appendField(reordered, requestResponseNonce, "7")
	reordered = appendField(reordered, requestResourceNames, "a")
	reordered = appendField(reordered, requestTypeURL, resource.EndpointType)
	reordered = appendField(reordered, requestVersionInfo, "5")
	reordered = appendField(reordered, requestResourceNames, "b")
	checkDecodesAsProto(t, &r, reordered)
	repeated := appendField(reordered, requestVersionInfo, "6")
	repeated = appendField(repeated, requestTypeURL, resource.ClusterType)
	checkDecodesAsProto(t, &r, repeated)
	unknown := protowire.AppendTag(marshalRequest(t, eds("6", "8", "a", "b")), 99, protowire.VarintType)
	checkDecodesAsProto(t, &r, protowire.AppendVarint(unknown, 1))
	wrongType := protowire.AppendTag(marshalRequest(t, eds("6", "9", "a", "b")), requestVersionInfo, protowire.VarintType)
	checkDecodesAsProto(t, &r, protowire.AppendVarint(wrongType, 1))
	checkDecodesAsProto(t, &r, appendField(marshalRequest(t, eds("6", "", "a", "b")), requestResponseNonce, "\xff"))
	checkDecodesAsProto(t, &r, appendField(marshalRequest(t, eds("", "10", "a", "b")), requestVersionInfo, "\xc3"))
	whole := marshalRequest(t, eds("7", "11", "a", "b"))
	checkDecodesAsProto(t, &r, whole[:len(whole)-1])
	checkDecodesAsProto(t, &r, whole)
}

// An ACK costs its message, version and nonce, nothing for the names it
// repeats (proto.Unmarshal allocated each name, the slice as
// it grew and the type URL too: 10 allocations for five names).
func TestSotwRequestsACKAllocations(t *testing.T) {
	var r sotwRequests
	names := []string{"svc-00000.bench", "svc-00007.bench", "svc-00134.bench", "svc-00265.bench", "svc-00396.bench"}
	first := marshalRequest(t, &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names})
	ack := marshalRequest(t, &discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: "v2", ResponseNonce: "2"})
	codec := newWireCodec()
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(first)}, &r); err != nil {
		t.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(ack)}
	allocs := testing.AllocsPerRun(100, func() {
		if err := codec.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
	})
	// The message, its version and its nonce.
	if allocs > 3 {
		t.Errorf("decoding an ACK allocated %.0f times, want at most 3", allocs)
	}
}

// FuzzSotwRequests decodes two requests in a row, as one stream receives
// them, and checks that each decodes as proto.Unmarshal decodes it.
func FuzzSotwRequests(f *testing.F) {
	names := []string{"a", "b"}
	for _, pair := range [][2]*discovery.DiscoveryRequest{
		{{TypeUrl: resource.EndpointType, ResourceNames: names}, {TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: "1", ResponseNonce: "1"}},
		{{TypeUrl: resource.EndpointType, ResourceNames: names}, {TypeUrl: resource.EndpointType, ResourceNames: []string{"a"}, VersionInfo: "1", ResponseNonce: "1"}},
		{{TypeUrl: resource.ClusterType, Node: &corev3.Node{Id: "n"}}, {TypeUrl: resource.ClusterType, VersionInfo: "1", ResponseNonce: "1", ErrorDetail: &rpcstatus.Status{Message: "bad"}}},
	} {
		f.Add(marshalRequest(f, pair[0]), marshalRequest(f, pair[1]))
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var r sotwRequests
		checkDecodesAsProto(t, &r, first)
		checkDecodesAsProto(t, &r, second)
		checkDecodesAsProto(t, &r, first)
	})
}
