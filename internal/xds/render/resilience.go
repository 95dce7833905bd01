package render

// Failure handling (issue 62): what the effective policy of a Service
// (spec's resilience.Cluster) makes of the callers' cluster. Clusters are
// stamped (see stamp), so the policy is first reduced to clusterPolicy,
// a comparable value that is part of the cluster's shape key: two
// services whose policies render alike share a stamp, and a stamp never
// holds another service's numbers.
//
// What is left out: whatever the data plane already defaults to (a
// 10,000-cluster CDS response must stay under gRPC's 4 MiB message
// limit), and for gRPC every field a proxyless client ignores, or that
// one of them would NACK (see /docs/operator-guide.md's support matrix):
// gRPC gets max_requests, ring hash, and the success-rate and
// failure-percentage detectors only.

import (
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Envoy's defaults, which rendering leaves out (and gRPC's, where A50 and
// A42 took Envoy's).
const (
	envoyConnectTimeout     = 5 * time.Second
	envoyODInterval         = 10 * time.Second
	envoyODBaseEjection     = 30 * time.Second
	envoyODMaxEjection      = 300 * time.Second
	envoyODMaxEjectPercent  = 10
	envoySRMinHosts         = 5
	envoySRRequestVolume    = 100
	envoySRStdevFactor      = 1900
	envoyFPThreshold        = 85
	envoyFPMinHosts         = 5
	envoyFPRequestVolume    = 50
	envoyBudgetPercent      = 20.0
	envoyBudgetMinRetryConc = 3
	envoyChoiceCount        = 2
	envoyMinRingSize        = 1024
	envoyMaxRingSize        = 8 * 1024 * 1024
	enforcingAll            = 100
)

// clusterPolicy is a resilience.Cluster as rendering uses it: values
// only (comparable, a part of the shape key), without the sources.
type clusterPolicy struct {
	connect   time.Duration // 0: not set
	cb        resilience.CircuitBreaker
	hasCB     bool
	budget    resilience.RetryBudget
	hasBudget bool
	od        odPolicy
	hasOD     bool
	lbType    string
	choice    uint32
	minRing   uint64
	maxRing   uint64
	hasLB     bool
}

// odPolicy is resilience.OutlierDetection as values.
type odPolicy struct {
	consecutive5xx, gateway, localOrigin uint32
	interval, baseEjection, maxEjection  time.Duration
	maxEjectionPercent                   uint32
	sr                                   resilience.SuccessRate
	hasSR                                bool
	fp                                   resilience.FailurePercentage
	hasFP                                bool
}

// clusterPolicyOf reduces c to what flavour f renders of it, so that
// policies that render alike are one shape.
func clusterPolicyOf(c resilience.Cluster, f Flavor) clusterPolicy {
	var p clusterPolicy
	grpc := f == GRPC
	if t := c.ConnectTimeout; t != nil && !grpc {
		p.connect = t.Duration
	}
	if cb := c.CircuitBreaker; cb != nil {
		p.cb, p.hasCB = *cb, true
		p.cb.Source = ""
		if grpc { // gRPC honours max_requests only
			p.cb = resilience.CircuitBreaker{MaxRequests: cb.MaxRequests}
		}
	}
	if b := c.RetryBudget; b != nil && !grpc && !maxRetriesWins(c) {
		p.budget, p.hasBudget = *b, true
		p.budget.Source = ""
	}
	if o := c.OutlierDetection; o != nil {
		od := odPolicy{consecutive5xx: o.Consecutive5xx, gateway: o.ConsecutiveGatewayErrors, localOrigin: o.ConsecutiveLocalOriginFailures,
			interval: o.Interval, baseEjection: o.BaseEjectionTime, maxEjection: o.MaxEjectionTime, maxEjectionPercent: o.MaxEjectionPercent}
		if o.SuccessRate != nil {
			od.sr, od.hasSR = *o.SuccessRate, true
		}
		if o.FailurePercentage != nil {
			od.fp, od.hasFP = *o.FailurePercentage, true
		}
		if grpc {
			// Proxyless clients count any failed call and ignore the
			// consecutive detectors (gRFC A50): without success rate
			// or failure percentage there is nothing they would do.
			od.consecutive5xx, od.gateway, od.localOrigin = 0, 0, 0
		}
		p.od, p.hasOD = od, !grpc || od.hasSR || od.hasFP
	}
	if l := c.LoadBalancer; l != nil {
		switch {
		case l.Type == resilience.LeastRequest && !grpc:
			p.lbType, p.choice, p.hasLB = l.Type, l.ChoiceCount, true
		case l.Type == resilience.RingHash:
			p.lbType, p.minRing, p.maxRing, p.hasLB = l.Type, l.MinimumRingSize, l.MaximumRingSize, true
		}
		// RoundRobin is the default; LeastRequest is left out for gRPC:
		// C-core 1.51 and grpc-js NACK the cluster.
	}
	return p
}

// maxRetriesWins reports whether a policy's circuit breaker limits the
// retries while the retry budget is MeshConfig's default: Envoy ignores
// max_retries when a cluster has a budget, so the budget is left out
// rather than overriding what a policy said.
func maxRetriesWins(c resilience.Cluster) bool {
	cb, b := c.CircuitBreaker, c.RetryBudget
	return cb != nil && b != nil && cb.MaxRetries != resilience.Unlimited && cb.Source != resilience.SourceDefault && b.Source == resilience.SourceDefault
}

// apply sets p on c, an EDS cluster of flavour f; http is whether the
// upstream has an HTTP port (max requests per connection is an HTTP
// protocol option).
func (p clusterPolicy) apply(c *clusterv3.Cluster, f Flavor) {
	if p.connect != 0 && p.connect != envoyConnectTimeout {
		c.ConnectTimeout = durationpb.New(p.connect)
	}
	if th := p.thresholds(f); th != nil {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}
	}
	switch {
	case p.hasOD:
		c.OutlierDetection = p.od.render(f)
	case f == GRPC:
		// Outlier detection that detects nothing (gRFC A50: no
		// algorithm, no ejection), so that every proxyless cluster has
		// it from the start: grpc-js-xds 1.14 drops a cluster update that
		// only adds keys to the one it holds (its deepEqual walks the old
		// object's keys), so outlier detection added later to a cluster
		// without it never reached a running channel.
		c.OutlierDetection = &clusterv3.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	}
	if p.hasLB {
		switch p.lbType {
		case resilience.LeastRequest:
			c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
			if p.choice != envoyChoiceCount {
				c.LbConfig = &clusterv3.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &clusterv3.Cluster_LeastRequestLbConfig{ChoiceCount: wrapperspb.UInt32(p.choice)}}
			}
		case resilience.RingHash:
			c.LbPolicy = clusterv3.Cluster_RING_HASH
			rh := &clusterv3.Cluster_RingHashLbConfig{}
			if p.minRing != envoyMinRingSize {
				rh.MinimumRingSize = wrapperspb.UInt64(p.minRing)
			}
			if p.maxRing != envoyMaxRingSize {
				rh.MaximumRingSize = wrapperspb.UInt64(p.maxRing)
			}
			if rh.MinimumRingSize != nil || rh.MaximumRingSize != nil {
				c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
			}
		}
	}
}

// maxRequestsPerConnection is the HTTP protocol option the circuit
// breaker asks for (0: none).
func (p clusterPolicy) maxRequestsPerConnection() uint32 {
	if !p.hasCB {
		return 0
	}
	return p.cb.MaxRequestsPerConnection
}

// thresholds is the DEFAULT priority's circuit breaker (nil: none). Every
// limit is written, "unlimited" too: the data planes' unset limit is
// 1024. With a retry budget, Envoy ignores max_retries: it is left out.
func (p clusterPolicy) thresholds(f Flavor) *clusterv3.CircuitBreakers_Thresholds {
	if !p.hasCB && !p.hasBudget {
		return nil
	}
	th := &clusterv3.CircuitBreakers_Thresholds{}
	if p.hasCB {
		th.MaxRequests = wrapperspb.UInt32(p.cb.MaxRequests)
		if f != GRPC {
			th.MaxConnections = wrapperspb.UInt32(p.cb.MaxConnections)
			th.MaxPendingRequests = wrapperspb.UInt32(p.cb.MaxPendingRequests)
			if !p.hasBudget {
				th.MaxRetries = wrapperspb.UInt32(p.cb.MaxRetries)
			}
		}
	}
	if p.hasBudget {
		rb := &clusterv3.CircuitBreakers_Thresholds_RetryBudget{}
		if p.budget.Percent != envoyBudgetPercent {
			rb.BudgetPercent = &typev3.Percent{Value: p.budget.Percent}
		}
		if p.budget.MinRetryConcurrency != envoyBudgetMinRetryConc {
			rb.MinRetryConcurrency = wrapperspb.UInt32(p.budget.MinRetryConcurrency)
		}
		th.RetryBudget = rb
	}
	return th
}

// render is the outlier detection of flavour f. A consecutive detector
// whose count is 0 is turned off where Envoy would enable it by default
// (consecutive 5xx); the gateway detector, off by default, is enforced
// when given; enforcing_success_rate is always written, because Envoy and
// gRPC-Go enable success-rate ejection when it is unset and C-core does
// not.
func (o odPolicy) render(f Flavor) *clusterv3.OutlierDetection {
	od := &clusterv3.OutlierDetection{}
	if f != GRPC {
		if o.consecutive5xx == 0 {
			od.EnforcingConsecutive_5Xx = wrapperspb.UInt32(0)
		} else if o.consecutive5xx != 5 {
			od.Consecutive_5Xx = wrapperspb.UInt32(o.consecutive5xx)
		}
		if o.gateway != 0 {
			if o.gateway != 5 {
				od.ConsecutiveGatewayFailure = wrapperspb.UInt32(o.gateway)
			}
			od.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcingAll)
		}
		if o.localOrigin != 0 {
			// Local-origin failures are counted apart only when split.
			od.SplitExternalLocalOriginErrors = true
			if o.localOrigin != 5 {
				od.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(o.localOrigin)
			}
		}
	}
	if o.interval != envoyODInterval {
		od.Interval = durationpb.New(o.interval)
	}
	if o.baseEjection != envoyODBaseEjection {
		od.BaseEjectionTime = durationpb.New(o.baseEjection)
	}
	if o.maxEjection != envoyODMaxEjection {
		od.MaxEjectionTime = durationpb.New(o.maxEjection)
	}
	if o.maxEjectionPercent != envoyODMaxEjectPercent {
		od.MaxEjectionPercent = wrapperspb.UInt32(o.maxEjectionPercent)
	}
	od.EnforcingSuccessRate = wrapperspb.UInt32(0)
	if o.hasSR {
		od.EnforcingSuccessRate = wrapperspb.UInt32(enforcingAll)
		if o.sr.MinHosts != envoySRMinHosts {
			od.SuccessRateMinimumHosts = wrapperspb.UInt32(o.sr.MinHosts)
		}
		if o.sr.RequestVolume != envoySRRequestVolume {
			od.SuccessRateRequestVolume = wrapperspb.UInt32(o.sr.RequestVolume)
		}
		if o.sr.StdevFactor != envoySRStdevFactor {
			od.SuccessRateStdevFactor = wrapperspb.UInt32(o.sr.StdevFactor)
		}
	}
	if o.hasFP {
		od.EnforcingFailurePercentage = wrapperspb.UInt32(enforcingAll)
		if o.fp.Threshold != envoyFPThreshold {
			od.FailurePercentageThreshold = wrapperspb.UInt32(o.fp.Threshold)
		}
		if o.fp.MinHosts != envoyFPMinHosts {
			od.FailurePercentageMinimumHosts = wrapperspb.UInt32(o.fp.MinHosts)
		}
		if o.fp.RequestVolume != envoyFPRequestVolume {
			od.FailurePercentageRequestVolume = wrapperspb.UInt32(o.fp.RequestVolume)
		}
	}
	return od
}

// commonHTTPOptions is the common HTTP protocol options the policy asks
// for (nil: none).
func (p clusterPolicy) commonHTTPOptions() *corev3.HttpProtocolOptions {
	if n := p.maxRequestsPerConnection(); n != 0 {
		return &corev3.HttpProtocolOptions{MaxRequestsPerConnection: wrapperspb.UInt32(n)}
	}
	return nil
}
