package xds

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

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
