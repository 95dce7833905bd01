package xds

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestParseGatewayCertDir: osm.gatewayCertDir is optional; when set it is
// an absolute, clean path, else the stream is refused naming the key.
func TestParseGatewayCertDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   map[string]any
		want string
		ok   bool
	}{
		{"absent", map[string]any{}, "", true},
		{"set", map[string]any{MetadataGatewayCertDir: "/srv/gateway-tls"}, "/srv/gateway-tls", true},
		{"relative", map[string]any{MetadataGatewayCertDir: "gateway-tls"}, "", false},
		{"unclean", map[string]any{MetadataGatewayCertDir: "/srv/../etc/"}, "", false},
		{"not a string", map[string]any{MetadataGatewayCertDir: 3.0}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md, err := structpb.NewStruct(tc.md)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseGatewayCertDir(&corev3.Node{Metadata: md})
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("parseGatewayCertDir = %q, %v; want %q, ok %v", got, err, tc.want, tc.ok)
			}
			if err != nil && status.Code(err) != codes.InvalidArgument {
				t.Errorf("error code %v, want InvalidArgument", status.Code(err))
			}
		})
	}
}
