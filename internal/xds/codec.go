package xds

import (
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	goproto "google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// wireCodec is gRPC's proto codec, except that it sends a *wireResponse
// as the bytes it holds. Serve's gRPC server uses it, and its SotW
// streams send each response as the encoding the cache made once for
// every stream sent the same (a group's proxies) and the stream's own
// nonce, rather than marshalling a DiscoveryResponse per proxy.
type wireCodec struct{ encoding.CodecV2 }

func newWireCodec() wireCodec { return wireCodec{encoding.GetCodecV2(proto.Name)} }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireResponse); ok {
		return mem.BufferSlice{mem.SliceBuffer(w.body.Bytes), mem.SliceBuffer(w.nonce)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*sotwRequests)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return r.unmarshal(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return r.unmarshal(buf.ReadOnlyData())
}

// wireResponse is an encoded DiscoveryResponse: body, shared and never
// modified, holds every field but the nonce, which follows it (a
// protobuf message's fields may come in any order).
type wireResponse struct {
	body  *cache.Wire
	nonce []byte
}

// discoveryResponseNonce is DiscoveryResponse's nonce field number.
const discoveryResponseNonce = 5

func newWireResponse(body *cache.Wire, nonce string) *wireResponse {
	b := make([]byte, 0, 2+len(nonce))
	b = protowire.AppendTag(b, discoveryResponseNonce, protowire.BytesType)
	b = protowire.AppendString(b, nonce)
	return &wireResponse{body: body, nonce: b}
}

// sotwRequests decodes the requests of one SotW stream, which receives
// into it (RecvMsg) through wireCodec. A request that names what the last
// request of its type named (every ACK but one after a subscription
// change) and carries nothing but its version, names, type URL and nonce
// shares the last one's type URL and names instead of allocating them
// again: 10,000 proxies ACK an endpoint change that reaches them all, and decoding
// their ACKs was a third of what the server allocated per change (M2,
// docs/performance.md). Any other request (the first of its type, a node,
// an error detail, other names, a field it does not know, an unexpected
// wire type or invalid UTF-8) is decoded by proto.Unmarshal, as wireCodec
// would. Every request is a new message: a stream tells its watches apart
// by their requests.
type sotwRequests struct {
	last [len(cache.TypeURLs)]*discovery.DiscoveryRequest // the last request of each type osm-server serves
	req  *discovery.DiscoveryRequest                      // what the last unmarshal decoded
}

// DiscoveryRequest's fields (envoy/service/discovery/v3/discovery.proto).
const (
	requestVersionInfo   = 1
	requestResourceNames = 3
	requestTypeURL       = 4
	requestResponseNonce = 5
)

// unmarshal decodes b into a new r.req.
func (r *sotwRequests) unmarshal(b []byte) error {
	req := r.decodeACK(b)
	if req == nil {
		req = &discovery.DiscoveryRequest{}
		if err := goproto.Unmarshal(b, req); err != nil {
			return err
		}
	}
	if i := cache.TypeIndex(req.GetTypeUrl()); i >= 0 {
		r.last[i] = req
	}
	r.req = req
	return nil
}

// decodeACK decodes b sharing the strings of the last request of its type,
// or returns nil when b is anything but such a request.
func (r *sotwRequests) decodeACK(b []byte) *discovery.DiscoveryRequest {
	var typeURL []byte
	for rest := b; len(rest) > 0; {
		num, v, n := requestField(rest)
		if n < 0 {
			return nil
		}
		if num == requestTypeURL {
			typeURL = v
		}
		rest = rest[n:]
	}
	i := cache.TypeIndex(typeURL)
	if i < 0 || r.last[i] == nil {
		return nil
	}
	last := r.last[i]
	req := &discovery.DiscoveryRequest{TypeUrl: cache.TypeURLs[i]}
	names := 0
	for len(b) > 0 {
		num, v, n := requestField(b)
		b = b[n:]
		switch num {
		case requestVersionInfo:
			if !utf8.Valid(v) {
				return nil // proto.Unmarshal refuses it
			}
			req.VersionInfo = string(v)
		case requestResourceNames:
			if names >= len(last.ResourceNames) || string(v) != last.ResourceNames[names] {
				return nil
			}
			names++
		case requestTypeURL:
		case requestResponseNonce:
			if !utf8.Valid(v) {
				return nil
			}
			req.ResponseNonce = string(v)
		default:
			return nil
		}
	}
	if names != len(last.ResourceNames) {
		return nil
	}
	req.ResourceNames = last.ResourceNames
	return req
}

// requestField reads the field at the start of b: its number and value,
// and how many bytes it took, or n < 0 when it is not a length-delimited
// field of DiscoveryRequest's that this decoder takes.
func requestField(b []byte) (num protowire.Number, v []byte, n int) {
	num, typ, tn := protowire.ConsumeTag(b)
	if tn < 0 || typ != protowire.BytesType {
		return 0, nil, -1
	}
	switch num {
	case requestVersionInfo, requestResourceNames, requestTypeURL, requestResponseNonce:
	default:
		return 0, nil, -1
	}
	v, vn := protowire.ConsumeBytes(b[tn:])
	if vn < 0 {
		return 0, nil, -1
	}
	return num, v, tn + vn
}
