package render

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestConstantsValidAndUnchanged checks render's shared constants: each
// passes ValidateAll on its own (the Validator takes them from constants,
// see [validation.unpack]), and rendering every proxy of the meshes in both
// flavours, with and without a Memo, leaves them as they were built (they
// are shared by every resource that holds them, so a change to one would
// change them all).
func TestConstantsValidAndUnchanged(t *testing.T) {
	before := map[proto.Message][]byte{}
	shared := []proto.Message{adsSource, sdsServiceCert, sdsRootCA, routerHTTPFilter, faultHTTPFilter, downstreamSocket[Envoy], downstreamSocket[GRPC]}
	for a, m := range constants {
		if err := m.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
			t.Errorf("constant %s: %v", a.GetTypeUrl(), err)
		}
		shared = append(shared, a, m)
	}
	if len(constants) != 4 {
		t.Errorf("%d constants, want 4 (the router, the empty fault filter and both downstream TLS contexts)", len(constants))
	}
	for _, m := range shared {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		before[m] = b
	}
	for name, m := range memoMeshes(t) {
		for _, memo := range []*Memo{nil, NewMemo()} {
			mm := m
			mm.Memo = memo
			for i, info := range m.Spec().Services() {
				for _, f := range []Flavor{Envoy, GRPC} {
					p := Proxy{Service: info.Service, Flavor: f, Address: netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)})}
					got := renderAll(t, mm, p)
					if err := Validate(f, got.all()...); err != nil {
						t.Errorf("%s, proxy of %s (%s): %v", name, p.Service, f, err)
					}
				}
			}
		}
	}
	for m, b := range before {
		after, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if string(after) != string(b) {
			t.Errorf("the shared %T changed while rendering", m)
		}
	}
}
