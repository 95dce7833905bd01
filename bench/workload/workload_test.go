package workload

import (
	"bytes"
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestWorkloadScopes(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		w                    Workload
		wantHub, wantScoped  int
		wantMaxUpstreamCount int
	}{
		{"tiny", Workload{Services: 20, Endpoints: 10, Proxies: 20}, 19, 1, 5},
		{"quick", Workload{Services: 100, Endpoints: 10, Proxies: 500}, 495, 25, 5},
		{"W", Workload{Services: 1000, Endpoints: 10, Proxies: 10000}, 9990, 500, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(tc.w.AffectedProxies(0)); got != tc.wantHub {
				t.Errorf("proxies affected by the hub = %d, want %d", got, tc.wantHub)
			}
			if got := len(tc.w.AffectedProxies(1)); got != tc.wantScoped {
				t.Errorf("proxies affected by service 1 = %d, want %d", got, tc.wantScoped)
			}
			for s := range tc.w.Services {
				up := tc.w.Upstreams(s)
				if len(up) == 0 || len(up) > tc.wantMaxUpstreamCount {
					t.Fatalf("service %d calls %d services, want 1..%d", s, len(up), tc.wantMaxUpstreamCount)
				}
				if contains(up, s) {
					t.Fatalf("service %d calls itself: %v", s, up)
				}
			}
		})
	}
}

// The marker a proxy looks for is in the marshalled CLA of a change, and in
// no CLA of the workload itself.
func TestMarkerBytes(t *testing.T) {
	w := Workload{Services: 300, Endpoints: 10, Proxies: 1}
	marker := MarkerBytes(ChangedAddr(7))
	changed, err := proto.Marshal(w.CLA(5, ChangedAddr(7)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(changed, marker) {
		t.Errorf("changed CLA does not contain the marker %q", marker)
	}
	for i := range w.Services {
		b, err := proto.Marshal(w.CLA(i, netip.Addr{}))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, marker) {
			t.Fatalf("CLA of service %d contains the change marker", i)
		}
	}
	other, _ := proto.Marshal(w.CLA(5, ChangedAddr(70)))
	if bytes.Contains(other, marker) {
		t.Errorf("the CLA of change 70 contains change 7's marker")
	}
}
