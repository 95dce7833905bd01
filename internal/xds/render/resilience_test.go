package render

import (
	"net/netip"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// inputsChanged reports whether the Inputs of a proxy of service (of
// flavour f) differ between the meshes before and after.
func inputsChanged(t *testing.T, before, after Mesh, service string, f Flavor) bool {
	t.Helper()
	p := Proxy{Service: svc(service), Flavor: f, Address: netip.MustParseAddr("10.0.0.2")}
	a, err := InputsOf(before, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := InputsOf(after, p)
	if err != nil {
		t.Fatal(err)
	}
	return !a.Equal(b)
}

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
			if got := inputsChanged(t, before, after, tc.service, f); got != tc.changed {
				t.Errorf("%s %s: inputs changed = %v, want %v", f, tc.service, got, tc.changed)
			}
		}
	}
}

// TestRouteOwnTimeoutAndRetryWin: an HTTPRoute's or GRPCRoute's own
// timeouts and retry win over the policy's (gatewayRoute passes what
// the route says), and the policy's other parts still apply.
func TestRouteOwnTimeoutAndRetryWin(t *testing.T) {
	call := resilience.Route{
		RequestTimeout: &resilience.Timeout{Duration: 10 * time.Second},
		Retry:          &resilience.Retry{RetryOn: []string{"unavailable"}, NumRetries: 3, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond},
		HashPolicy:     &resilience.HashPolicy{HashOn: []resilience.HashOn{{Header: "x-user"}}},
	}
	o := outbound{port: spec.ServicePort{Port: 80, AppProtocol: "http"}}
	o.setCall(call)
	for _, f := range []Flavor{Envoy, GRPC} {
		own := &routev3.RetryPolicy{RetryOn: "5xx"}
		a := &routev3.RouteAction{Timeout: durationpb.New(3 * time.Second), RetryPolicy: own}
		applyCall(&routev3.Route{}, a, o, f, true, true)
		if a.GetTimeout().AsDuration() != 3*time.Second || a.GetMaxStreamDuration() != nil || a.RetryPolicy != own {
			t.Errorf("%s: the route's own timeout and retry were replaced: %v", f, a)
		}
		if len(a.GetHashPolicy()) != 1 {
			t.Errorf("%s: hash policy %v, want the policy's", f, a.GetHashPolicy())
		}
		b := &routev3.RouteAction{}
		applyCall(&routev3.Route{}, b, o, f, false, false)
		if b.GetRetryPolicy().GetNumRetries().GetValue() != 3 {
			t.Errorf("%s: without the route's own retry, retry = %v, want the policy's", f, b.GetRetryPolicy())
		}
		if f == Envoy && b.GetTimeout().AsDuration() != 10*time.Second || f == GRPC && b.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 10*time.Second {
			t.Errorf("%s: without the route's own timeout: %v, want the policy's 10s", f, b)
		}
	}
}
