package render

import (
	"net/netip"
	"testing"
)

// TestPolicyChangesInputs: a failure-handling policy on an upstream
// changes its callers' Inputs (so the publisher renders them again), and
// not those of a proxy that does not call it.
func TestPolicyChangesInputs(t *testing.T) {
	eps := bookstoreEndpoints(t)
	before := meshOf(bookstoreSpec(t, false).Snapshot(), eps)
	after := meshOf(resilienceSpec(t).Snapshot(), eps)
	for _, tc := range []struct {
		service string
		changed bool
	}{
		{"bookbuyer", true},    // calls bookstore-v1 and -v2
		{"bookstore-v1", true}, // calls bookwarehouse
		{"bookthief", false},   // calls nothing with a policy in SMI mode
	} {
		for _, f := range []Flavor{Envoy, GRPC} {
			p := Proxy{Service: svc(tc.service), Flavor: f, Address: netip.MustParseAddr("10.0.0.2")}
			a, err := InputsOf(before, p)
			if err != nil {
				t.Fatal(err)
			}
			b, err := InputsOf(after, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := !a.Equal(b); got != tc.changed {
				t.Errorf("%s %s: inputs changed = %v, want %v", f, tc.service, got, tc.changed)
			}
		}
	}
}
