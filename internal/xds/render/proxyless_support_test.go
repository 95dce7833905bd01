package render

import (
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// supportOutput is one policy's output: a Service's cluster and one route.
type supportOutput struct {
	cluster *clusterv3.Cluster
	route   *routev3.Route
	action  *routev3.RouteAction
}

func (r supportOutput) thresholds() *clusterv3.CircuitBreakers_Thresholds {
	return r.cluster.GetCircuitBreakers().GetThresholds()[0]
}

func (r supportOutput) od() *clusterv3.OutlierDetection { return r.cluster.GetOutlierDetection() }

func (r supportOutput) retryOn(cond string) bool {
	return slices.Contains(strings.Split(r.action.GetRetryPolicy().GetRetryOn(), ","), cond)
}

func (r supportOutput) hashOn(has func(*routev3.RouteAction_HashPolicy) bool) bool {
	return slices.ContainsFunc(r.action.GetHashPolicy(), has)
}

func (r supportOutput) fault(t *testing.T) *faultv3.HTTPFault {
	a, ok := r.route.GetTypedPerFilterConfig()[faultFilter]
	if !ok {
		return nil
	}
	f := &faultv3.HTTPFault{}
	if err := a.UnmarshalTo(f); err != nil {
		t.Fatal(err)
	}
	return f
}

func (r supportOutput) maxRequestsPerConnection(t *testing.T) bool {
	a, ok := r.cluster.GetTypedExtensionProtocolOptions()[httpProtocolOpts]
	if !ok {
		return false
	}
	o := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(o); err != nil {
		t.Fatal(err)
	}
	return o.GetCommonHttpProtocolOptions().GetMaxRequestsPerConnection() != nil
}

// supportProbes find each field of resilience's support matrix in what
// rendering made of a policy.
func supportProbes(t *testing.T) map[string]func(supportOutput) bool {
	return map[string]func(supportOutput) bool{
		resilience.FieldConnectTimeout: func(r supportOutput) bool { return r.cluster.GetConnectTimeout() != nil },
		resilience.FieldRequestTimeout: func(r supportOutput) bool {
			return r.action.GetTimeout() != nil || r.action.GetMaxStreamDuration().GetMaxStreamDuration() != nil
		},
		resilience.FieldIdleTimeout:   func(r supportOutput) bool { return r.action.GetIdleTimeout() != nil },
		resilience.FieldRetryAttempts: func(r supportOutput) bool { return r.action.GetRetryPolicy().GetNumRetries() != nil },
		resilience.FieldRetryOnGRPC:   func(r supportOutput) bool { return r.retryOn("unavailable") },
		resilience.FieldRetryOnOther:  func(r supportOutput) bool { return r.retryOn("connect-failure") },
		resilience.FieldPerTryTimeout: func(r supportOutput) bool { return r.action.GetRetryPolicy().GetPerTryTimeout() != nil },
		resilience.FieldBackoff:       func(r supportOutput) bool { return r.action.GetRetryPolicy().GetRetryBackOff() != nil },
		resilience.FieldRetryBudget: func(r supportOutput) bool {
			return r.cluster.GetCircuitBreakers() != nil && r.thresholds().GetRetryBudget() != nil
		},
		resilience.FieldMaxConnections: func(r supportOutput) bool {
			return r.cluster.GetCircuitBreakers() != nil && r.thresholds().GetMaxConnections() != nil
		},
		resilience.FieldMaxPendingRequests: func(r supportOutput) bool {
			return r.cluster.GetCircuitBreakers() != nil && r.thresholds().GetMaxPendingRequests() != nil
		},
		resilience.FieldMaxRequests: func(r supportOutput) bool {
			return r.cluster.GetCircuitBreakers() != nil && r.thresholds().GetMaxRequests() != nil
		},
		resilience.FieldMaxRetries: func(r supportOutput) bool {
			return r.cluster.GetCircuitBreakers() != nil && r.thresholds().GetMaxRetries() != nil
		},
		resilience.FieldMaxRequestsPerConnection: func(r supportOutput) bool { return r.maxRequestsPerConnection(t) },
		resilience.FieldConsecutiveErrors:        func(r supportOutput) bool { return r.od().GetConsecutive_5Xx() != nil },
		resilience.FieldConsecutiveGatewayErrors: func(r supportOutput) bool { return r.od().GetEnforcingConsecutiveGatewayFailure() != nil },
		resilience.FieldConsecutiveLocalOrigin: func(r supportOutput) bool {
			return r.od().GetSplitExternalLocalOriginErrors() || r.od().GetConsecutiveLocalOriginFailure() != nil
		},
		resilience.FieldEjection: func(r supportOutput) bool {
			od := r.od()
			return od.GetInterval() != nil && od.GetBaseEjectionTime() != nil && od.GetMaxEjectionTime() != nil && od.GetMaxEjectionPercent() != nil
		},
		resilience.FieldSuccessRate:       func(r supportOutput) bool { return r.od().GetEnforcingSuccessRate().GetValue() == enforcingAll },
		resilience.FieldFailurePercentage: func(r supportOutput) bool { return r.od().GetEnforcingFailurePercentage().GetValue() == enforcingAll },
		resilience.FieldLeastRequest:      func(r supportOutput) bool { return r.cluster.GetLbPolicy() == clusterv3.Cluster_LEAST_REQUEST },
		resilience.FieldRingHash:          func(r supportOutput) bool { return r.cluster.GetLbPolicy() == clusterv3.Cluster_RING_HASH },
		resilience.FieldHashOnHeader: func(r supportOutput) bool {
			return r.hashOn(func(h *routev3.RouteAction_HashPolicy) bool { return h.GetHeader() != nil })
		},
		resilience.FieldHashOnSourceIP: func(r supportOutput) bool {
			return r.hashOn(func(h *routev3.RouteAction_HashPolicy) bool { return h.GetConnectionProperties().GetSourceIp() })
		},
		resilience.FieldHashOnCookie: func(r supportOutput) bool {
			return r.hashOn(func(h *routev3.RouteAction_HashPolicy) bool { return h.GetCookie() != nil })
		},
		resilience.FieldFaultDelay: func(r supportOutput) bool { return r.fault(t).GetDelay() != nil },
		resilience.FieldFaultAbort: func(r supportOutput) bool { return r.fault(t).GetAbort() != nil },
	}
}

// everyField are policies that, together, set every field of the
// support matrix to a value the data planes do not default to (a field
// at its default is left out): the load balancers exclude each other,
// and a retry budget leaves out max_retries.
func everyField() map[string]struct {
	cluster resilience.Cluster
	route   resilience.Route
} {
	od := &resilience.OutlierDetection{Consecutive5xx: 7, ConsecutiveGatewayErrors: 3, ConsecutiveLocalOriginFailures: 4,
		Interval: 7 * time.Second, BaseEjectionTime: 20 * time.Second, MaxEjectionTime: 90 * time.Second, MaxEjectionPercent: 40,
		SuccessRate:       &resilience.SuccessRate{MinHosts: 3, RequestVolume: 20, StdevFactor: 1500},
		FailurePercentage: &resilience.FailurePercentage{Threshold: 50, MinHosts: 2, RequestVolume: 10}}
	cb := &resilience.CircuitBreaker{MaxConnections: 100, MaxPendingRequests: 50, MaxRequests: 500, MaxRetries: 10, MaxRequestsPerConnection: 1000}
	route := resilience.Route{
		RequestTimeout: &resilience.Timeout{Duration: 10 * time.Second},
		IdleTimeout:    &resilience.Timeout{Duration: time.Minute},
		Retry: &resilience.Retry{RetryOn: []string{"unavailable", "connect-failure", "5xx"}, NumRetries: 3, PerTryTimeout: 2 * time.Second,
			BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second},
		Fault: &resilience.Fault{Delay: &resilience.Delay{Fixed: 2 * time.Second, PerMillion: 50000}, Abort: &resilience.Abort{GRPCStatus: 14, PerMillion: 100000}},
	}
	ring := &resilience.LoadBalancer{Type: resilience.RingHash, MinimumRingSize: 2048, MaximumRingSize: 4096,
		HashOn: []resilience.HashOn{{Header: "x-user"}, {SourceIP: true}, {Cookie: &resilience.Cookie{Name: "session", TTL: time.Hour}}}}
	ringRoute := route
	ringRoute.HashPolicy = &resilience.HashPolicy{HashOn: ring.HashOn}
	return map[string]struct {
		cluster resilience.Cluster
		route   resilience.Route
	}{
		"least request, retry budget": {resilience.Cluster{ConnectTimeout: &resilience.Timeout{Duration: 2 * time.Second}, CircuitBreaker: cb,
			RetryBudget: &resilience.RetryBudget{Percent: 25, MinRetryConcurrency: 5}, OutlierDetection: od,
			LoadBalancer: &resilience.LoadBalancer{Type: resilience.LeastRequest, ChoiceCount: 3}}, route},
		"ring hash, max retries": {resilience.Cluster{ConnectTimeout: &resilience.Timeout{Duration: 2 * time.Second}, CircuitBreaker: cb,
			OutlierDetection: od, LoadBalancer: ring}, ringRoute},
	}
}

// TestGRPCRendersWhatProxylessClientsHonour: the gRPC flavour carries a
// failure-handling field exactly when resilience's support matrix says
// a proxyless client honours it and none refuses it. Envoy gets every
// field, which shows each probe finds its field.
func TestGRPCRendersWhatProxylessClientsHonour(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	var info spec.ServiceInfo
	for _, i := range m.Spec().Services() {
		if i.Service == svc("bookstore-v1") {
			info = i
		}
	}
	if !hasHTTP(info) {
		t.Fatalf("bookstore-v1 = %+v, want a Service with an HTTP or gRPC port", info)
	}
	probes := supportProbes(t)
	table := resilience.ProxylessSupport()
	for _, s := range table {
		if probes[s.Field] == nil {
			t.Errorf("no probe for the matrix's %q: add one", s.Field)
		}
	}
	for field := range probes {
		if !slices.ContainsFunc(table, func(s resilience.Support) bool { return s.Field == field }) {
			t.Errorf("probe for %q, which the matrix does not have", field)
		}
	}
	for _, f := range []Flavor{Envoy, GRPC} {
		found := map[string]bool{}
		for name, p := range everyField() {
			r := supportOutput{cluster: (&builder{}).edsCluster(m, info, f, clusterPolicyOf(p.cluster, f)), route: &routev3.Route{}, action: &routev3.RouteAction{}}
			o := outbound{port: spec.ServicePort{Port: 14001, AppProtocol: "grpc"}}
			o.setCall(p.route)
			applyCall(r.route, r.action, o, f, false, false)
			for field, probe := range probes {
				if probe(r) {
					found[field] = true
					t.Logf("%s, %s: %s rendered", f, name, field)
				}
			}
		}
		for _, s := range table {
			want := f == Envoy || s.Rendered()
			if found[s.Field] != want {
				t.Errorf("%s: %s rendered = %v, want %v (the matrix: %v)", f, s.Field, found[s.Field], want, s.Verdicts)
			}
		}
	}
}
