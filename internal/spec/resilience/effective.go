package resilience

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Cluster is the effective policy of the callers' cluster of a Service:
// what every caller shares (see the package doc). A nil part is one the
// mesh does not set.
type Cluster struct {
	ConnectTimeout   *Timeout          `json:"connectTimeout,omitempty"`
	CircuitBreaker   *CircuitBreaker   `json:"circuitBreaker,omitempty"`
	RetryBudget      *RetryBudget      `json:"retryBudget,omitempty"`
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
	LoadBalancer     *LoadBalancer     `json:"loadBalancer,omitempty"`
}

// Route is the effective policy of one caller's calls to one port of a
// Service. An HTTPRoute's or GRPCRoute's own timeouts and retry win over
// these where the call matches it: rendering applies that, not Merge.
// A nil part is one the mesh does not set.
type Route struct {
	// RequestTimeout bounds a whole call (a stream's whole life); 0: none.
	RequestTimeout *Timeout `json:"requestTimeout,omitempty"`
	// IdleTimeout bounds a call with no bytes either way; 0: none.
	IdleTimeout *Timeout    `json:"idleTimeout,omitempty"`
	Retry       *Retry      `json:"retry,omitempty"`
	Fault       *Fault      `json:"fault,omitempty"`
	HashPolicy  *HashPolicy `json:"hashPolicy,omitempty"`
}

// Timeout is a duration and where it comes from.
type Timeout struct {
	Duration time.Duration `json:"duration"`
	Source   Source        `json:"source"`
}

// Unlimited is a circuit breaker limit that is no limit: the data planes
// take an unset limit as 1024 (Envoy, and gRPC-Go's max_requests), so
// rendering writes this instead.
const Unlimited = math.MaxUint32

// CircuitBreaker is the limits of each caller's proxy to the Service
// (Unlimited, or a positive limit; MaxRequestsPerConnection 0 is none).
type CircuitBreaker struct {
	MaxConnections           uint32 `json:"maxConnections"`
	MaxPendingRequests       uint32 `json:"maxPendingRequests"`
	MaxRequests              uint32 `json:"maxRequests"`
	MaxRetries               uint32 `json:"maxRetries"`
	MaxRequestsPerConnection uint32 `json:"maxRequestsPerConnection,omitempty"`
	Source                   Source `json:"source"`
}

// RetryBudget bounds the retries in flight to Percent of the requests in
// flight, at least MinRetryConcurrency (Envoy's retry_budget, which
// replaces MaxRetries when set).
type RetryBudget struct {
	Percent             float64 `json:"percent"`
	MinRetryConcurrency uint32  `json:"minRetryConcurrency"`
	Source              Source  `json:"source"`
}

// OutlierDetection ejects failing backends. A consecutive-failure
// detector whose count is 0 is off: rendering must set its enforcing
// percentage to 0, since Envoy enables consecutive 5xx by default, and
// set enforcing_success_rate to 0 when SuccessRate is nil, since gRPC
// enables success-rate ejection when it is unset. Proxyless gRPC honours
// only SuccessRate and FailurePercentage (gRFC A50), counting any failed
// call.
type OutlierDetection struct {
	Consecutive5xx                 uint32             `json:"consecutive5xx,omitempty"`
	ConsecutiveGatewayErrors       uint32             `json:"consecutiveGatewayErrors,omitempty"`
	ConsecutiveLocalOriginFailures uint32             `json:"consecutiveLocalOriginFailures,omitempty"`
	Interval                       time.Duration      `json:"interval"`
	BaseEjectionTime               time.Duration      `json:"baseEjectionTime"`
	MaxEjectionTime                time.Duration      `json:"maxEjectionTime"`
	MaxEjectionPercent             uint32             `json:"maxEjectionPercent"`
	SuccessRate                    *SuccessRate       `json:"successRate,omitempty"`
	FailurePercentage              *FailurePercentage `json:"failurePercentage,omitempty"`
	Source                         Source             `json:"source"`
}

// SuccessRate is the success-rate detector; StdevFactor is in
// thousandths, as Envoy and gRPC carry it (1900 is 1.9).
type SuccessRate struct {
	MinHosts      uint32 `json:"minHosts"`
	RequestVolume uint32 `json:"requestVolume"`
	StdevFactor   uint32 `json:"stdevFactor"`
}

// FailurePercentage is the failure-percentage detector.
type FailurePercentage struct {
	Threshold     uint32 `json:"threshold"`
	MinHosts      uint32 `json:"minHosts"`
	RequestVolume uint32 `json:"requestVolume"`
}

// LoadBalancer is the algorithm: RoundRobin, LeastRequest (ChoiceCount)
// or RingHash (ring sizes, and HashOn, which the Route's HashPolicy
// carries to the routes).
type LoadBalancer struct {
	Type            string   `json:"type"`
	ChoiceCount     uint32   `json:"choiceCount,omitempty"`
	MinimumRingSize uint64   `json:"minimumRingSize,omitempty"`
	MaximumRingSize uint64   `json:"maximumRingSize,omitempty"`
	HashOn          []HashOn `json:"hashOn,omitempty"`
	Source          Source   `json:"source"`
}

// HashOn is one thing a ring hash hashes: exactly one field is set.
type HashOn struct {
	Header   string  `json:"header,omitempty"`
	SourceIP bool    `json:"sourceIP,omitempty"`
	Cookie   *Cookie `json:"cookie,omitempty"`
}

// Cookie is a hashed cookie; with a TTL the proxy sets it on a call that
// has none.
type Cookie struct {
	Name string        `json:"name"`
	TTL  time.Duration `json:"ttl,omitempty"`
	Path string        `json:"path,omitempty"`
}

// HashPolicy is what a route hashes for its Service's ring hash.
type HashPolicy struct {
	HashOn []HashOn `json:"hashOn"`
	Source Source   `json:"source"`
}

// Retry is a route's retry policy: NumRetries after the first try, on
// the RetryOn conditions (Envoy's names; gRPC's status names), each try
// bounded by PerTryTimeout (0: none), waiting BackoffBase to BackoffMax
// between tries. NumRetries 0 (an OSM Retry may say so) is no retry:
// rendering writes none, as gRPC refuses num_retries 0.
type Retry struct {
	RetryOn       []string      `json:"retryOn"`
	NumRetries    uint32        `json:"numRetries"`
	PerTryTimeout time.Duration `json:"perTryTimeout,omitempty"`
	BackoffBase   time.Duration `json:"backoffBase"`
	BackoffMax    time.Duration `json:"backoffMax"`
	Source        Source        `json:"source"`
}

// Fault is fault injection: a Delay, an Abort, or both.
type Fault struct {
	Delay  *Delay `json:"delay,omitempty"`
	Abort  *Abort `json:"abort,omitempty"`
	Source Source `json:"source"`
}

// Delay delays PerMillion of a million calls by Fixed.
type Delay struct {
	Fixed      time.Duration `json:"fixed"`
	PerMillion uint32        `json:"perMillion"`
}

// Abort fails PerMillion of a million calls with HTTPStatus or
// GRPCStatus (one is set).
type Abort struct {
	HTTPStatus uint32 `json:"httpStatus,omitempty"`
	GRPCStatus uint32 `json:"grpcStatus,omitempty"`
	PerMillion uint32 `json:"perMillion"`
}

// RateLimit is what an UpstreamTrafficSetting's local rate limits make
// the Service's own proxies enforce on their inbound, as token buckets:
// MaxTokens = the rate plus the burst, refilled by TokensPerFill every
// FillInterval (the unit).
type RateLimit struct {
	TCP    *TokenBucket     `json:"tcp,omitempty"`
	HTTP   *HTTPRateLimit   `json:"http,omitempty"`
	Routes []RouteRateLimit `json:"routes,omitempty"`
	Source Source           `json:"source"`
}

// TokenBucket is a rate limit's bucket.
type TokenBucket struct {
	MaxTokens     uint32        `json:"maxTokens"`
	TokensPerFill uint32        `json:"tokensPerFill"`
	FillInterval  time.Duration `json:"fillInterval"`
}

// HTTPRateLimit is a bucket of requests, and the answer to those over
// it: Status (429 unless set) with Headers added.
type HTTPRateLimit struct {
	TokenBucket `json:",inline"`
	Status      uint32   `json:"status"`
	Headers     []Header `json:"headers,omitempty"`
}

// Header is a header's name and value.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// RouteRateLimit limits the requests whose path matches PathRegex (the
// whole path) instead of the Service's limit: such a request takes a
// token from this bucket only (as in Envoy and OSM).
type RouteRateLimit struct {
	PathRegex string        `json:"pathRegex"`
	Limit     HTTPRateLimit `json:"limit"`
}

// Named is a policy's spec with its source.
type Named[T any] struct {
	Source Source
	Spec   *T
}

// Attached is a BackendTrafficPolicy attached to a Service: to the whole
// Service, or to its port named SectionName.
type Attached struct {
	Named[BackendTrafficPolicySpec]
	SectionName string
}

// Port is what Merge needs of the called port.
type Port struct {
	Name string
	// AppProtocol is http, grpc or tcp (a tcp port has no routes).
	AppProtocol string
}

// MergeCluster works out a Service's Cluster from MeshConfig's defaults
// (d, nil for the built-in ones), the UpstreamTrafficSetting whose host
// is the Service (uts, nil for none) and the BackendTrafficPolicies
// attached to it (a policy attached to a port only sets no Cluster part).
func MergeCluster(d *Defaults, uts *Named[UpstreamTrafficSettingSpec], policies []Attached) Cluster {
	layers := make([]Cluster, 0, len(policies)+2)
	for _, p := range sortedPolicies(policies, "") {
		layers = append(layers, p.cluster())
	}
	if uts != nil {
		layers = append(layers, utsCluster(uts))
	}
	layers = append(layers, defaultCluster(d.Resolve()))
	var out Cluster
	for _, l := range layers {
		out.ConnectTimeout = cmp.Or(out.ConnectTimeout, l.ConnectTimeout)
		out.CircuitBreaker = cmp.Or(out.CircuitBreaker, l.CircuitBreaker)
		out.RetryBudget = cmp.Or(out.RetryBudget, l.RetryBudget)
		out.OutlierDetection = cmp.Or(out.OutlierDetection, l.OutlierDetection)
		out.LoadBalancer = cmp.Or(out.LoadBalancer, l.LoadBalancer)
	}
	if out.OutlierDetection == outlierDetectionOff {
		out.OutlierDetection = nil
	}
	return out
}

// outlierDetectionOff stands for a policy's outlierDetection.disabled
// while merging: it stops the parts below and leaves none.
var outlierDetectionOff = &OutlierDetection{}

// MergeRoute works out one caller's Route to port of a Service from
// MeshConfig's defaults (d), the BackendTrafficPolicies attached to the
// Service (those attached to another port are passed over), the Retry
// policies whose source is the caller and whose destinations include the
// Service, and the Service's load balancer (its Cluster's, for the hash
// policy).
func MergeRoute(d *Defaults, port Port, policies []Attached, retries []Named[RetrySpec], lb *LoadBalancer) Route {
	if port.AppProtocol == "tcp" {
		return Route{}
	}
	var layers []Route
	retries = slices.Clone(retries)
	slices.SortFunc(retries, func(a, b Named[RetrySpec]) int { return cmp.Compare(a.Source, b.Source) })
	for _, r := range retries {
		layers = append(layers, Route{Retry: osmRetry(r)})
	}
	for _, p := range sortedPolicies(policies, port.Name) {
		layers = append(layers, p.route())
	}
	layers = append(layers, defaultRoute(d.Resolve(), port))
	var out Route
	for _, l := range layers {
		out.RequestTimeout = cmp.Or(out.RequestTimeout, l.RequestTimeout)
		out.IdleTimeout = cmp.Or(out.IdleTimeout, l.IdleTimeout)
		out.Retry = cmp.Or(out.Retry, l.Retry)
		out.Fault = cmp.Or(out.Fault, l.Fault)
	}
	if lb != nil && lb.Type == RingHash && len(lb.HashOn) > 0 {
		out.HashPolicy = &HashPolicy{HashOn: lb.HashOn, Source: lb.Source}
	}
	return out
}

// sortedPolicies returns the policies that apply to port, highest
// precedence first: those naming the port, then those naming the whole
// Service, each by source (namespace and name). With port "", only those
// naming the whole Service.
func sortedPolicies(ps []Attached, port string) []Attached {
	var out []Attached
	for _, p := range ps {
		if p.SectionName == "" || (port != "" && p.SectionName == port) {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b Attached) int {
		if (a.SectionName == "") != (b.SectionName == "") {
			if a.SectionName != "" {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Source, b.Source)
	})
	return slices.CompactFunc(out, func(a, b Attached) bool { return a.Source == b.Source && a.SectionName == b.SectionName })
}

func timeout(s string, src Source) *Timeout {
	if s == "" {
		return nil
	}
	return &Timeout{Duration: duration(s), Source: src}
}

func (p Attached) cluster() Cluster {
	s, src := p.Spec, p.Source
	var c Cluster
	if s.Timeouts != nil {
		c.ConnectTimeout = timeout(s.Timeouts.Connect, src)
	}
	if s.Retry != nil && s.Retry.Budget != nil {
		c.RetryBudget = retryBudget(s.Retry.Budget, src)
	}
	if s.CircuitBreaker != nil {
		c.CircuitBreaker = circuitBreaker(s.CircuitBreaker, src)
	}
	if s.OutlierDetection != nil && !s.OutlierDetection.Disabled {
		c.OutlierDetection = outlierDetection(s.OutlierDetection, src)
	} else if s.OutlierDetection != nil {
		c.OutlierDetection = outlierDetectionOff // nothing lower applies
	}
	if l := s.LoadBalancer; l != nil {
		c.LoadBalancer = loadBalancer(l, src)
	}
	return c
}

func (p Attached) route() Route {
	s, src := p.Spec, p.Source
	var r Route
	if s.Timeouts != nil {
		r.RequestTimeout = timeout(s.Timeouts.Request, src)
		r.IdleTimeout = timeout(s.Timeouts.Idle, src)
	}
	if s.Retry != nil && (s.Retry.Attempts != nil || s.Retry.RetryOn != nil || s.Retry.PerTryTimeout != "" || s.Retry.Backoff != nil) {
		r.Retry = retry(s.Retry, src)
	}
	if f := s.FaultInjection; f != nil {
		r.Fault = fault(f, src)
	}
	return r
}

func retry(s *RetrySettings, src Source) *Retry {
	b := builtinRetry()
	r := &Retry{RetryOn: b.RetryOn, NumRetries: uintOr(s.Attempts, 2), PerTryTimeout: duration(s.PerTryTimeout), Source: src}
	if s.RetryOn != nil {
		r.RetryOn = slices.Clone(s.RetryOn)
	}
	base, hi := duration(b.Backoff.Base), time.Duration(0)
	if s.Backoff != nil {
		if s.Backoff.Base != "" {
			base = duration(s.Backoff.Base)
		}
		hi = duration(s.Backoff.Max)
	}
	if hi == 0 {
		hi = 10 * base
	}
	r.BackoffBase, r.BackoffMax = base, hi
	return r
}

func retryBudget(b *BudgetSettings, src Source) *RetryBudget {
	out := &RetryBudget{Percent: 20, MinRetryConcurrency: uintOr(b.MinRetryConcurrency, 3), Source: src}
	if b.Percent != nil {
		out.Percent = math.Round(*b.Percent*10000) / 10000
	}
	return out
}

func circuitBreaker(b *CircuitBreakerSettings, src Source) *CircuitBreaker {
	return &CircuitBreaker{
		MaxConnections:           uintOr(b.MaxConnections, Unlimited),
		MaxPendingRequests:       uintOr(b.MaxPendingRequests, Unlimited),
		MaxRequests:              uintOr(b.MaxRequests, Unlimited),
		MaxRetries:               uintOr(b.MaxRetries, Unlimited),
		MaxRequestsPerConnection: uintOr(b.MaxRequestsPerConnection, 0),
		Source:                   src,
	}
}

func outlierDetection(o *OutlierDetectionSettings, src Source) *OutlierDetection {
	od := &OutlierDetection{
		Consecutive5xx:                 uintOr(o.ConsecutiveErrors, 0),
		ConsecutiveGatewayErrors:       uintOr(o.ConsecutiveGatewayErrors, 0),
		ConsecutiveLocalOriginFailures: uintOr(o.ConsecutiveLocalOriginFailures, 0),
		Interval:                       durationOr(o.Interval, 10*time.Second),
		BaseEjectionTime:               durationOr(o.BaseEjectionTime, 30*time.Second),
		MaxEjectionTime:                durationOr(o.MaxEjectionTime, 300*time.Second),
		MaxEjectionPercent:             uintOr(o.MaxEjectionPercent, 10),
		Source:                         src,
	}
	od.MaxEjectionTime = max(od.MaxEjectionTime, od.BaseEjectionTime)
	if s := o.SuccessRate; s != nil {
		od.SuccessRate = &SuccessRate{MinHosts: uintOr(s.MinHosts, 5), RequestVolume: uintOr(s.RequestVolume, 100), StdevFactor: 1900}
		if s.StdevFactor != nil {
			od.SuccessRate.StdevFactor = uint32(math.Round(*s.StdevFactor * 1000))
		}
	}
	if p := o.FailurePercentage; p != nil {
		od.FailurePercentage = &FailurePercentage{Threshold: uintOr(p.Threshold, 85), MinHosts: uintOr(p.MinHosts, 5), RequestVolume: uintOr(p.RequestVolume, 50)}
	}
	return od
}

func durationOr(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	return duration(s)
}

func loadBalancer(l *LoadBalancerSettings, src Source) *LoadBalancer {
	lb := &LoadBalancer{Type: l.Type, Source: src}
	switch l.Type {
	case LeastRequest:
		lb.ChoiceCount = 2
		if l.LeastRequest != nil {
			lb.ChoiceCount = uintOr(l.LeastRequest.ChoiceCount, 2)
		}
	case RingHash:
		lb.MinimumRingSize, lb.MaximumRingSize = 1024, maxRingSize
		if r := l.RingHash; r != nil {
			lb.MinimumRingSize = uint64(uintOr(r.MinimumRingSize, 1024))
			lb.MaximumRingSize = uint64(uintOr(r.MaximumRingSize, maxRingSize))
		}
		for _, h := range l.HashOn {
			o := HashOn{Header: h.Header, SourceIP: h.SourceIP}
			if h.Cookie != nil {
				o.Cookie = &Cookie{Name: h.Cookie.Name, TTL: duration(h.Cookie.TTL), Path: h.Cookie.Path}
			}
			lb.HashOn = append(lb.HashOn, o)
		}
	}
	return lb
}

func fault(f *FaultInjectionSettings, src Source) *Fault {
	out := &Fault{Source: src}
	if d := f.Delay; d != nil && d.Percentage != nil {
		out.Delay = &Delay{Fixed: duration(d.Fixed), PerMillion: perMillion(*d.Percentage)}
	}
	if a := f.Abort; a != nil && a.Percentage != nil {
		out.Abort = &Abort{HTTPStatus: uintOr(a.HTTPStatus, 0), GRPCStatus: uintOr(a.GRPCStatus, 0), PerMillion: perMillion(*a.Percentage)}
	}
	return out
}

func utsCluster(n *Named[UpstreamTrafficSettingSpec]) Cluster {
	var c Cluster
	cs := n.Spec.ConnectionSettings
	if cs == nil {
		return c
	}
	if cs.TCP != nil {
		c.ConnectTimeout = timeout(cs.TCP.ConnectTimeout, n.Source)
	}
	if cs.TCP != nil && cs.TCP.MaxConnections != nil || cs.HTTP != nil {
		cb := &CircuitBreakerSettings{}
		if cs.TCP != nil {
			cb.MaxConnections = cs.TCP.MaxConnections
		}
		if h := cs.HTTP; h != nil {
			cb.MaxRequests, cb.MaxPendingRequests, cb.MaxRetries, cb.MaxRequestsPerConnection = h.MaxRequests, h.MaxPendingRequests, h.MaxRetries, h.MaxRequestsPerConnection
		}
		c.CircuitBreaker = circuitBreaker(cb, n.Source)
	}
	return c
}

func osmRetry(n Named[RetrySpec]) *Retry {
	p := n.Spec.RetryPolicy
	base := duration(p.RetryBackoffBaseInterval)
	return &Retry{RetryOn: RetryOnList(p.RetryOn), NumRetries: uintOr(p.NumRetries, 0), PerTryTimeout: duration(p.PerTryTimeout),
		BackoffBase: base, BackoffMax: 10 * base, Source: n.Source}
}

// defaultCluster is the Cluster parts of resolved defaults.
func defaultCluster(d Defaults) Cluster {
	var c Cluster
	if !d.Timeouts.Disabled {
		c.ConnectTimeout = timeout(d.Timeouts.Connect, SourceDefault)
	}
	if !d.CircuitBreaker.Disabled {
		c.CircuitBreaker = circuitBreaker(&d.CircuitBreaker.CircuitBreakerSettings, SourceDefault)
	}
	if d.Retry.Budget != nil { // bounds policies' retries even while the default retry is off
		c.RetryBudget = retryBudget(d.Retry.Budget, SourceDefault)
	}
	if !d.OutlierDetection.Disabled {
		c.OutlierDetection = outlierDetection(d.OutlierDetection, SourceDefault)
	}
	return c
}

// defaultRoute is the Route parts of resolved defaults for port: the
// request timeout is for HTTP ports; a gRPC port gets none (0), since a
// route's timeout ends a stream however healthy.
func defaultRoute(d Defaults, port Port) Route {
	var r Route
	if !d.Timeouts.Disabled {
		r.RequestTimeout = timeout(d.Timeouts.Request, SourceDefault)
		if r.RequestTimeout != nil && port.AppProtocol == "grpc" {
			r.RequestTimeout.Duration = 0
		}
		r.IdleTimeout = timeout(d.Timeouts.Idle, SourceDefault)
	}
	if !d.Retry.Disabled {
		r.Retry = retry(&d.Retry.RetrySettings, SourceDefault)
	}
	return r
}

// InboundRateLimit returns the rate limits an UpstreamTrafficSetting
// makes its Service's proxies enforce (nil when it sets none).
func InboundRateLimit(n *Named[UpstreamTrafficSettingSpec]) *RateLimit {
	if n == nil {
		return nil
	}
	s := n.Spec
	out := &RateLimit{Source: n.Source}
	if s.RateLimit != nil && s.RateLimit.Local != nil {
		if t := s.RateLimit.Local.TCP; t != nil {
			out.TCP = &TokenBucket{MaxTokens: uint32(t.Connections + t.Burst), TokensPerFill: uint32(t.Connections), FillInterval: unitDuration(t.Unit)}
		}
		if h := s.RateLimit.Local.HTTP; h != nil {
			hl := httpRateLimit(h)
			out.HTTP = &hl
		}
	}
	for _, r := range s.HTTPRoutes {
		if r.RateLimit != nil && r.RateLimit.Local != nil {
			out.Routes = append(out.Routes, RouteRateLimit{PathRegex: r.Path, Limit: httpRateLimit(r.RateLimit.Local)})
		}
	}
	if out.TCP == nil && out.HTTP == nil && len(out.Routes) == 0 {
		return nil
	}
	return out
}

func httpRateLimit(h *HTTPLocalRateLimitSpec) HTTPRateLimit {
	l := HTTPRateLimit{
		TokenBucket: TokenBucket{MaxTokens: uint32(h.Requests + h.Burst), TokensPerFill: uint32(h.Requests), FillInterval: unitDuration(h.Unit)},
		Status:      429,
	}
	if h.ResponseStatusCode != 0 {
		l.Status = uint32(h.ResponseStatusCode)
	}
	for _, hv := range h.ResponseHeadersToAdd {
		l.Headers = append(l.Headers, Header(hv))
	}
	return l
}
