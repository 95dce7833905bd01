package resilience

import (
	"fmt"
	"slices"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// BackendTrafficPolicySpec is the spec of a BackendTrafficPolicy
// (osm-vm.io/v1alpha1): how callers reach the Services its targetRefs
// name, in its own namespace. Every part is optional; a part it leaves
// out comes from the next policy in precedence (see the package doc).
type BackendTrafficPolicySpec struct {
	TargetRefs       []TargetRef               `json:"targetRefs"`
	Timeouts         *TimeoutSettings          `json:"timeouts,omitempty"`
	Retry            *RetrySettings            `json:"retry,omitempty"`
	CircuitBreaker   *CircuitBreakerSettings   `json:"circuitBreaker,omitempty"`
	OutlierDetection *OutlierDetectionSettings `json:"outlierDetection,omitempty"`
	LoadBalancer     *LoadBalancerSettings     `json:"loadBalancer,omitempty"`
	FaultInjection   *FaultInjectionSettings   `json:"faultInjection,omitempty"`
}

// TargetRef names a Service (group "", kind Service) of the policy's
// namespace, or one of its ports by name (sectionName), as Gateway API
// policy attachment does (GEP-713).
type TargetRef struct {
	Group       string `json:"group"`
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	SectionName string `json:"sectionName,omitempty"`
}

// TimeoutSettings are timeouts: connect (a connection to a backend;
// default 5s), request (a whole call, a stream's whole life included;
// 0s: none) and idle (a call with no bytes either way; 0s: none; unset:
// the data plane's, five minutes for Envoy).
type TimeoutSettings struct {
	Connect string `json:"connect,omitempty"`
	Request string `json:"request,omitempty"`
	Idle    string `json:"idle,omitempty"`
}

// RetrySettings are retries: attempts is the number of retries after the
// first try (as Gateway API's HTTPRoute counts them; default 2), on the
// retryOn conditions (default connect-failure and refused-stream, which
// only retry calls the backend never received), each try bounded by
// perTryTimeout, with exponential backoff (base 25ms, max ten times the
// base), the budget bounding the retries in flight.
type RetrySettings struct {
	Attempts      *int             `json:"attempts,omitempty"`
	RetryOn       []string         `json:"retryOn,omitempty"`
	PerTryTimeout string           `json:"perTryTimeout,omitempty"`
	Backoff       *BackoffSettings `json:"backoff,omitempty"`
	Budget        *BudgetSettings  `json:"budget,omitempty"`
}

// BackoffSettings bound the wait between tries.
type BackoffSettings struct {
	Base string `json:"base,omitempty"`
	Max  string `json:"max,omitempty"`
}

// BudgetSettings bound the retries in flight to percent of the requests
// in flight (default 20), and at least minRetryConcurrency (default 3).
type BudgetSettings struct {
	Percent             *float64 `json:"percent,omitempty"`
	MinRetryConcurrency *int     `json:"minRetryConcurrency,omitempty"`
}

// CircuitBreakerSettings are the limits of each caller's proxy to the
// Service (every one unlimited unless set).
type CircuitBreakerSettings struct {
	MaxConnections           *int `json:"maxConnections,omitempty"`
	MaxPendingRequests       *int `json:"maxPendingRequests,omitempty"`
	MaxRequests              *int `json:"maxRequests,omitempty"`
	MaxRetries               *int `json:"maxRetries,omitempty"`
	MaxRequestsPerConnection *int `json:"maxRequestsPerConnection,omitempty"`
}

// OutlierDetectionSettings eject a backend that fails: after
// consecutiveErrors (5xx responses and local failures),
// consecutiveGatewayErrors (502, 503, 504 and local failures) or
// consecutiveLocalOriginFailures (connect failures, resets and timeouts
// only) in a row, or by successRate or failurePercentage, checked every
// interval (default 10s); an ejected backend is out for baseEjectionTime
// (default 30s) times the number of its ejections, at most
// maxEjectionTime (default 300s), and at most maxEjectionPercent
// (default 10) of the backends are out at once. A detector is on when
// its field is given.
type OutlierDetectionSettings struct {
	Disabled                       bool                       `json:"disabled,omitempty"`
	ConsecutiveErrors              *int                       `json:"consecutiveErrors,omitempty"`
	ConsecutiveGatewayErrors       *int                       `json:"consecutiveGatewayErrors,omitempty"`
	ConsecutiveLocalOriginFailures *int                       `json:"consecutiveLocalOriginFailures,omitempty"`
	Interval                       string                     `json:"interval,omitempty"`
	BaseEjectionTime               string                     `json:"baseEjectionTime,omitempty"`
	MaxEjectionTime                string                     `json:"maxEjectionTime,omitempty"`
	MaxEjectionPercent             *int                       `json:"maxEjectionPercent,omitempty"`
	SuccessRate                    *SuccessRateSettings       `json:"successRate,omitempty"`
	FailurePercentage              *FailurePercentageSettings `json:"failurePercentage,omitempty"`
}

// SuccessRateSettings eject a backend whose success rate is below the
// mean by stdevFactor (default 1.9) standard deviations, when minHosts
// (default 5) backends had requestVolume (default 100) calls each in the
// interval.
type SuccessRateSettings struct {
	MinHosts      *int     `json:"minHosts,omitempty"`
	RequestVolume *int     `json:"requestVolume,omitempty"`
	StdevFactor   *float64 `json:"stdevFactor,omitempty"`
}

// FailurePercentageSettings eject a backend whose calls failed threshold
// percent (default 85) of the time, when minHosts (default 5) backends
// had requestVolume (default 50) calls each in the interval.
type FailurePercentageSettings struct {
	Threshold     *int `json:"threshold,omitempty"`
	MinHosts      *int `json:"minHosts,omitempty"`
	RequestVolume *int `json:"requestVolume,omitempty"`
}

// Load balancer types.
const (
	RoundRobin   = "RoundRobin"
	LeastRequest = "LeastRequest"
	RingHash     = "RingHash"
)

var lbTypes = []string{RoundRobin, LeastRequest, RingHash}

// LoadBalancerSettings pick the backend of each call: RoundRobin (the
// default), LeastRequest (the least busy of choiceCount random backends,
// default 2) or RingHash (by a hash of what hashOn names, on a ring of
// minimumRingSize to maximumRingSize entries, default 1024 to 8M).
type LoadBalancerSettings struct {
	Type         string                `json:"type"`
	LeastRequest *LeastRequestSettings `json:"leastRequest,omitempty"`
	RingHash     *RingHashSettings     `json:"ringHash,omitempty"`
	HashOn       []HashOnSettings      `json:"hashOn,omitempty"`
}

// LeastRequestSettings tune LeastRequest.
type LeastRequestSettings struct {
	ChoiceCount *int `json:"choiceCount,omitempty"`
}

// RingHashSettings tune RingHash.
type RingHashSettings struct {
	MinimumRingSize *int `json:"minimumRingSize,omitempty"`
	MaximumRingSize *int `json:"maximumRingSize,omitempty"`
}

// HashOnSettings is one thing RingHash hashes, exactly one of: a request
// header, the caller's address, or a cookie.
type HashOnSettings struct {
	Header   string          `json:"header,omitempty"`
	SourceIP bool            `json:"sourceIP,omitempty"`
	Cookie   *CookieSettings `json:"cookie,omitempty"`
}

// CookieSettings name the cookie; with a ttl the proxy sets it on a call
// that has none.
type CookieSettings struct {
	Name string `json:"name"`
	TTL  string `json:"ttl,omitempty"`
	Path string `json:"path,omitempty"`
}

// FaultInjectionSettings delay or fail a percentage of the calls, for
// chaos drills.
type FaultInjectionSettings struct {
	Delay *FaultDelaySettings `json:"delay,omitempty"`
	Abort *FaultAbortSettings `json:"abort,omitempty"`
}

// FaultDelaySettings delay percentage of the calls by fixed.
type FaultDelaySettings struct {
	Fixed      string   `json:"fixed"`
	Percentage *float64 `json:"percentage"`
}

// FaultAbortSettings fail percentage of the calls with an HTTP status
// (httpStatus) or a gRPC status code (grpcStatus), one of them.
type FaultAbortSettings struct {
	HTTPStatus *int     `json:"httpStatus,omitempty"`
	GRPCStatus *int     `json:"grpcStatus,omitempty"`
	Percentage *float64 `json:"percentage"`
}

// ValidateBackendTrafficPolicy checks a BackendTrafficPolicy's spec.
func ValidateBackendTrafficPolicy(c Checker, s *BackendTrafficPolicySpec) {
	if len(s.TargetRefs) == 0 {
		c.Errorf("spec.targetRefs", "no targets: add at least one {group: \"\", kind: Service, name: ...}")
	}
	if len(s.TargetRefs) > maxTargetRefs {
		c.Errorf("spec.targetRefs", "%d targets, more than %d", len(s.TargetRefs), maxTargetRefs)
	}
	seen := map[TargetRef]int{}
	sectioned := ""
	for i, t := range s.TargetRefs {
		f := fmt.Sprintf("spec.targetRefs[%d]", i)
		if t.Group != "" && t.Group != "core" {
			c.Errorf(f+".group", "%q: a BackendTrafficPolicy targets Services, whose group is \"\"", t.Group)
		}
		if t.Kind != kindService {
			c.Errorf(f+".kind", "%q is not supported: want Service", t.Kind)
		}
		if err := mesh.ValidateLabel("service name", t.Name); err != nil {
			c.Errorf(f+".name", "%v", err)
		}
		if t.SectionName != "" {
			if err := mesh.ValidateLabel("port name", t.SectionName); err != nil {
				c.Errorf(f+".sectionName", "%v", err)
			}
			sectioned = f + ".sectionName"
		}
		t.Group = ""
		if j, ok := seen[t]; ok {
			c.Errorf(f, "also spec.targetRefs[%d]: name each target once", j)
		}
		seen[t] = i
	}
	if s.Timeouts == nil && s.Retry == nil && s.CircuitBreaker == nil && s.OutlierDetection == nil && s.LoadBalancer == nil && s.FaultInjection == nil {
		c.Warnf("spec", "sets nothing: add timeouts, retry, circuitBreaker, outlierDetection, loadBalancer or faultInjection")
	}
	if sectioned != "" {
		// A Service's callers share one cluster for all its ports: what is
		// the cluster's cannot differ by port.
		for _, p := range []struct {
			field string
			set   bool
		}{
			{"spec.timeouts.connect", s.Timeouts != nil && s.Timeouts.Connect != ""},
			{"spec.retry.budget", s.Retry != nil && s.Retry.Budget != nil},
			{"spec.circuitBreaker", s.CircuitBreaker != nil},
			{"spec.outlierDetection", s.OutlierDetection != nil},
			{"spec.loadBalancer", s.LoadBalancer != nil},
		} {
			if p.set {
				c.Errorf(p.field, "applies to all the ports of a Service (its callers share one cluster), but %s names a port: move it to a policy whose targetRefs name the whole Service", sectioned)
			}
		}
	}
	if s.Timeouts != nil {
		checkTimeouts(c, "spec.timeouts", s.Timeouts)
	}
	if s.Retry != nil {
		checkRetry(c, "spec.retry", s.Retry)
		if s.Timeouts != nil {
			checkPerTry(c, "spec.retry.perTryTimeout", s.Retry.PerTryTimeout, s.Timeouts.Request)
		}
	}
	if s.CircuitBreaker != nil {
		checkCircuitBreaker(c, "spec.circuitBreaker", s.CircuitBreaker)
	}
	if s.OutlierDetection != nil {
		checkOutlierDetection(c, "spec.outlierDetection", s.OutlierDetection)
	}
	if s.LoadBalancer != nil {
		checkLoadBalancer(c, "spec.loadBalancer", s.LoadBalancer)
	}
	if s.FaultInjection != nil {
		checkFault(c, "spec.faultInjection", s.FaultInjection)
	}
}

// PortScoped reports whether a targetRef of the policy names a port.
func (s *BackendTrafficPolicySpec) PortScoped() bool {
	return slices.ContainsFunc(s.TargetRefs, func(t TargetRef) bool { return t.SectionName != "" })
}

func checkTimeouts(c Checker, f string, t *TimeoutSettings) {
	if t.Connect == "" && t.Request == "" && t.Idle == "" {
		c.Warnf(f, "sets no timeout: add connect, request or idle")
	}
	checkDuration(c, f+".connect", t.Connect, "5s", minDuration, maxConnectTimeout, false)
	checkDuration(c, f+".request", t.Request, "15s", minDuration, maxTimeout, true)
	checkDuration(c, f+".idle", t.Idle, "5m", minDuration, maxTimeout, true)
}

func checkRetry(c Checker, f string, r *RetrySettings) {
	checkIntPtr(c, f+".attempts", r.Attempts, 1, maxRetries)
	if r.RetryOn != nil {
		checkRetryOn(c, f+".retryOn", r.RetryOn, policyRetryOn, true)
	}
	checkDuration(c, f+".perTryTimeout", r.PerTryTimeout, "1s", minDuration, maxTimeout, false)
	if b := r.Backoff; b != nil {
		okBase := checkDuration(c, f+".backoff.base", b.Base, "25ms", minDuration, maxBackoff, false)
		okMax := checkDuration(c, f+".backoff.max", b.Max, "250ms", minDuration, maxBackoff, false)
		if okBase && okMax && duration(b.Max) < duration(b.Base) {
			c.Errorf(f+".backoff.max", "%s is shorter than backoff.base (%s): want at least the base", duration(b.Max), duration(b.Base))
		}
		if b.Base == "" && b.Max == "" {
			c.Warnf(f+".backoff", "sets nothing: add base or max")
		}
	}
	if b := r.Budget; b != nil {
		if b.Percent != nil {
			checkPercent(c, f+".budget.percent", *b.Percent)
		}
		checkIntPtr(c, f+".budget.minRetryConcurrency", b.MinRetryConcurrency, 1, maxUint32)
	}
}

func checkCircuitBreaker(c Checker, f string, b *CircuitBreakerSettings) {
	n := 0
	for _, l := range []struct {
		name string
		v    *int
	}{
		{"maxConnections", b.MaxConnections}, {"maxPendingRequests", b.MaxPendingRequests}, {"maxRequests", b.MaxRequests},
		{"maxRetries", b.MaxRetries}, {"maxRequestsPerConnection", b.MaxRequestsPerConnection},
	} {
		if l.v != nil {
			n++
			checkRange(c, f+"."+l.name, *l.v, 1, maxUint32)
		}
	}
	if n == 0 {
		c.Warnf(f, "sets no limit: add maxConnections, maxPendingRequests, maxRequests, maxRetries or maxRequestsPerConnection")
	}
}

func checkOutlierDetection(c Checker, f string, o *OutlierDetectionSettings) {
	detectors := o.ConsecutiveErrors != nil || o.ConsecutiveGatewayErrors != nil || o.ConsecutiveLocalOriginFailures != nil || o.SuccessRate != nil || o.FailurePercentage != nil
	if o.Disabled {
		if detectors || o.Interval != "" || o.BaseEjectionTime != "" || o.MaxEjectionTime != "" || o.MaxEjectionPercent != nil {
			c.Warnf(f, "disabled: the other fields are ignored")
		}
		return
	}
	if !detectors {
		c.Errorf(f, "no detector: set consecutiveErrors, consecutiveGatewayErrors, consecutiveLocalOriginFailures, successRate or failurePercentage, or disabled: true")
	}
	checkIntPtr(c, f+".consecutiveErrors", o.ConsecutiveErrors, 1, maxUint32)
	checkIntPtr(c, f+".consecutiveGatewayErrors", o.ConsecutiveGatewayErrors, 1, maxUint32)
	checkIntPtr(c, f+".consecutiveLocalOriginFailures", o.ConsecutiveLocalOriginFailures, 1, maxUint32)
	checkDuration(c, f+".interval", o.Interval, "10s", minDuration, maxEjectionTime, false)
	okBase := checkDuration(c, f+".baseEjectionTime", o.BaseEjectionTime, "30s", minDuration, maxEjectionTime, false)
	okMax := checkDuration(c, f+".maxEjectionTime", o.MaxEjectionTime, "300s", minDuration, maxEjectionTime, false)
	base := 30 * time.Second
	if okBase {
		base = duration(o.BaseEjectionTime)
	}
	if okMax && duration(o.MaxEjectionTime) < base {
		c.Errorf(f+".maxEjectionTime", "%s is shorter than baseEjectionTime (%s): want at least it", duration(o.MaxEjectionTime), base)
	}
	checkIntPtr(c, f+".maxEjectionPercent", o.MaxEjectionPercent, 0, 100)
	if s := o.SuccessRate; s != nil {
		checkIntPtr(c, f+".successRate.minHosts", s.MinHosts, 1, maxUint32)
		checkIntPtr(c, f+".successRate.requestVolume", s.RequestVolume, 1, maxUint32)
		if s.StdevFactor != nil && (*s.StdevFactor < 0.001 || *s.StdevFactor > maxStdevFactor) {
			c.Errorf(f+".successRate.stdevFactor", "%v is out of range: want 0.001 to %v, such as 1.9", *s.StdevFactor, maxStdevFactor)
		}
	}
	if p := o.FailurePercentage; p != nil {
		checkIntPtr(c, f+".failurePercentage.threshold", p.Threshold, 0, 100)
		checkIntPtr(c, f+".failurePercentage.minHosts", p.MinHosts, 1, maxUint32)
		checkIntPtr(c, f+".failurePercentage.requestVolume", p.RequestVolume, 1, maxUint32)
	}
}

func checkLoadBalancer(c Checker, f string, l *LoadBalancerSettings) {
	if !slices.Contains(lbTypes, l.Type) {
		c.Errorf(f+".type", "%q is not a load balancer: want RoundRobin, LeastRequest or RingHash%s", l.Type, c.DidYouMean(l.Type, lbTypes))
	}
	if l.LeastRequest != nil {
		if l.Type != LeastRequest {
			c.Errorf(f+".leastRequest", "set for type %s: set type: LeastRequest, or remove it", l.Type)
		}
		checkIntPtr(c, f+".leastRequest.choiceCount", l.LeastRequest.ChoiceCount, 2, maxChoiceCount)
	}
	if r := l.RingHash; r != nil {
		if l.Type != RingHash {
			c.Errorf(f+".ringHash", "set for type %s: set type: RingHash, or remove it", l.Type)
		}
		checkIntPtr(c, f+".ringHash.minimumRingSize", r.MinimumRingSize, 1, maxRingSize)
		checkIntPtr(c, f+".ringHash.maximumRingSize", r.MaximumRingSize, 1, maxRingSize)
		lo, hi := 1024, maxRingSize
		if r.MinimumRingSize != nil {
			lo = *r.MinimumRingSize
		}
		if r.MaximumRingSize != nil {
			hi = *r.MaximumRingSize
		}
		if lo > hi && lo <= maxRingSize && hi >= 1 {
			c.Errorf(f+".ringHash.maximumRingSize", "%d is smaller than minimumRingSize (%d): want at least it", hi, lo)
		}
	}
	if len(l.HashOn) > 0 && l.Type != RingHash {
		c.Errorf(f+".hashOn", "set for type %s: hashing needs type: RingHash", l.Type)
	}
	if l.Type == RingHash && len(l.HashOn) == 0 {
		c.Warnf(f+".hashOn", "RingHash without hashOn hashes nothing, so calls go to random backends: add hashOn, such as [{header: x-user-id}]")
	}
	if len(l.HashOn) > maxHashOn {
		c.Errorf(f+".hashOn", "%d entries, more than %d", len(l.HashOn), maxHashOn)
	}
	for i, h := range l.HashOn {
		hf := fmt.Sprintf("%s.hashOn[%d]", f, i)
		n := 0
		if h.Header != "" {
			n++
			checkHeaderName(c, hf+".header", h.Header)
		}
		if h.SourceIP {
			n++
		}
		if ck := h.Cookie; ck != nil {
			n++
			checkHeaderName(c, hf+".cookie.name", ck.Name)
			checkDuration(c, hf+".cookie.ttl", ck.TTL, "1h", time.Second, 365*24*time.Hour, true)
			if len(ck.Path) > 1024 {
				c.Errorf(hf+".cookie.path", "%d bytes, more than 1024", len(ck.Path))
			}
		}
		if n != 1 {
			c.Errorf(hf, "give exactly one of header, sourceIP: true or cookie")
		}
	}
}

func checkFault(c Checker, f string, fi *FaultInjectionSettings) {
	if fi.Delay == nil && fi.Abort == nil {
		c.Errorf(f, "no fault: add delay or abort")
	}
	if d := fi.Delay; d != nil {
		if d.Fixed == "" {
			c.Errorf(f+".delay.fixed", "missing: give the delay, such as \"2s\"")
		}
		checkDuration(c, f+".delay.fixed", d.Fixed, "2s", minDuration, time.Hour, false)
		if d.Percentage == nil {
			c.Errorf(f+".delay.percentage", "missing: give the percentage of calls to delay, such as 10")
		} else {
			checkPercent(c, f+".delay.percentage", *d.Percentage)
		}
	}
	if a := fi.Abort; a != nil {
		switch {
		case (a.HTTPStatus == nil) == (a.GRPCStatus == nil):
			c.Errorf(f+".abort", "give exactly one of httpStatus (such as 503) or grpcStatus (such as 14, UNAVAILABLE)")
		case a.HTTPStatus != nil:
			checkRange(c, f+".abort.httpStatus", *a.HTTPStatus, 200, 599)
		default:
			checkRange(c, f+".abort.grpcStatus", *a.GRPCStatus, 1, 16)
		}
		if a.Percentage == nil {
			c.Errorf(f+".abort.percentage", "missing: give the percentage of calls to fail, such as 10")
		} else {
			checkPercent(c, f+".abort.percentage", *a.Percentage)
		}
	}
}

// checkPerTry warns of a per-try timeout no shorter than the request
// timeout: no retry could start.
func checkPerTry(c Checker, field, perTry, request string) {
	p, r := duration(perTry), duration(request)
	if p > 0 && r > 0 && p >= r {
		c.Warnf(field, "%s is not shorter than the request timeout (%s): the request ends before a retry can start; shorten it", p, r)
	}
}
