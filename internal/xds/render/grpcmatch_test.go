package render

import (
	"testing"

	"github.com/osm-vm/osm-vm/internal/spec"
)

// TestGRPCMatchesHaveNoPseudoHeaders: gRPC clients match no pseudo-header
// and every gRPC call is a POST, so for them :method is decided at render
// time; Envoy keeps the matcher.
func TestGRPCMatchesHaveNoPseudoHeaders(t *testing.T) {
	for _, tc := range []struct {
		name           string
		hm             spec.HTTPRouteMatch
		flavor         Flavor
		wantOK         bool
		wantMethodHdrs int
	}{
		{"POST allowed: no matcher for gRPC", spec.HTTPRouteMatch{PathRegex: "/a/.*", Methods: []string{"GET", "POST"}}, GRPC, true, 0},
		{"GET only: no gRPC call matches", spec.HTTPRouteMatch{PathRegex: "/a/.*", Methods: []string{"GET"}}, GRPC, false, 0},
		{"a pseudo-header: no gRPC call matches", spec.HTTPRouteMatch{Headers: map[string]string{":authority": "x"}}, GRPC, false, 0},
		{"any method", spec.HTTPRouteMatch{Methods: []string{"*"}}, GRPC, true, 0},
		{"Envoy keeps :method", spec.HTTPRouteMatch{Methods: []string{"GET"}}, Envoy, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rm, ok := httpRouteMatch(tc.hm, tc.flavor)
			_, permOK := httpPermission(tc.hm, tc.flavor)
			if ok != tc.wantOK || permOK != tc.wantOK {
				t.Fatalf("route match ok %v, permission ok %v, want %v", ok, permOK, tc.wantOK)
			}
			if !ok {
				return
			}
			n := 0
			for _, h := range rm.GetHeaders() {
				if h.GetName() == ":method" {
					n++
				}
				if h.GetStringMatch() != nil {
					t.Errorf("header %q uses string_match, which C-core 1.51 NACKs", h.GetName())
				}
			}
			if n != tc.wantMethodHdrs {
				t.Errorf("%d :method matchers, want %d", n, tc.wantMethodHdrs)
			}
		})
	}
}
