// Package wire is the xDS wire as the harness's fleet and floor server
// (F) speak it without decoding: a gRPC codec that passes bytes through,
// a DiscoveryResponse read as an envelope (version, type, nonce, the raw
// Anys) and a response built from marshalled Anys. It imports nothing of
// osm-vm or of the rest of the harness.
package wire

import (
	"errors"
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ADSMethod is the ADS SotW method, called with Codec so that neither the
// fleet nor the floor server decode more than they must.
const ADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// Codec sends []byte as is (or marshals a proto.Message) and receives
// into a *[]byte without decoding.
type Codec struct{}

func (Codec) Name() string { return "proto" }

func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case []byte:
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("wire.Codec: cannot marshal %T", v)
}

func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *[]byte:
		*m = data.Materialize()
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), m)
	}
	return fmt.Errorf("wire.Codec: cannot unmarshal into %T", v)
}

// Envelope is what the fleet reads from a DiscoveryResponse: everything but
// the resources, which it only counts (and keeps as raw Any bytes).
type Envelope struct {
	Version   string
	TypeURL   string
	Nonce     string
	Resources [][]byte // marshalled Any messages, aliasing the response
	Size      int
}

func ParseEnvelope(b []byte) (Envelope, error) {
	e := Envelope{Size: len(b)}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, fmt.Errorf("discovery response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return e, fmt.Errorf("discovery response: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return e, fmt.Errorf("discovery response: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			e.Version = string(v)
		case 2:
			e.Resources = append(e.Resources, v)
		case 4:
			e.TypeURL = string(v)
		case 5:
			e.Nonce = string(v)
		}
	}
	if e.TypeURL == "" {
		return e, errors.New("discovery response without type_url")
	}
	return e, nil
}

// AnyValue returns the value field (2) of a marshalled Any.
func AnyValue(b []byte) ([]byte, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 2 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			return v, nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil, errors.New("Any without a value")
}

// AppendResponse appends a DiscoveryResponse made of already marshalled Any
// messages: the floor server's only "marshalling" of a response.
func AppendResponse(b []byte, version, typeURL string, anys [][]byte) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, version)
	for _, a := range anys {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, version) // nonce = version: the same bytes for every stream
	return b
}

// TypeOrder is the order of the three types the fleet ACKs and F sends.
var TypeOrder = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType}

// TypeIndex is t's place in TypeOrder, -1 for another type.
func TypeIndex(t string) int {
	for i, x := range TypeOrder {
		if x == t {
			return i
		}
	}
	return -1
}
