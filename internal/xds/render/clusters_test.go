package render

import (
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestLoadAssignmentEndpointsInOneAllocation: the endpoints a load
// assignment builds in one allocation equal those lbEndpoint builds.
func TestLoadAssignmentEndpointsInOneAllocation(t *testing.T) {
	for _, ap := range []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:8080"),
		netip.MustParseAddrPort("[2001:db8::1]:443"),
		netip.MustParseAddrPort("127.0.0.1:1"),
	} {
		var x lbEndpointMessages
		if got, want := x.of(ap), lbEndpoint(ap); !proto.Equal(got, want) {
			t.Errorf("%s: %v, want %v", ap, got, want)
		}
	}
}
