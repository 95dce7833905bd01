package resilience

import (
	"slices"
	"strings"
)

// Defaults is MeshConfig's spec.resilience: what every call in the mesh
// gets unless a policy says otherwise. A part left out takes the
// built-in defaults below; a part given takes, for each field it leaves
// out, the built-in one; disabled: true turns the part off (the mesh then
// sets nothing and the data plane's own default applies).
//
// Why these built-in values (issue 62, and what other meshes' defaults
// did to their users):
//   - connect 5s: Envoy's and OSM's default, long enough for a machine
//     across a WAN, short enough that a blackholed backend is given up
//     on before most callers' own deadlines.
//   - request 15s, on HTTP ports only: Envoy applies 15s to every route
//     anyway; gRPC ports get none, because a route's timeout ends a
//     stream however healthy (Kuma #3630, Envoy Gateway #5446 and Contour
//     #3692 are users' streams cut at 15s).
//   - retry on connect-failure and refused-stream only, twice, backoff
//     25ms to 250ms: those retry calls the backend never received. A
//     default that retried 5xx, reset or unavailable retried POSTs that
//     had run, and paid out twice (Istio #13851, #27340, #50506).
//     Proxyless gRPC honours gRPC status names only, so this default
//     retries nothing there; gRPC's own transparent retry covers calls
//     that never left the client.
//   - no circuit breaker limits: Envoy's and gRPC-Go's implicit 1024
//     concurrent requests throttled busy services (AWS App Mesh turned
//     them off by default for that, aws-app-mesh-roadmap #229); the mesh
//     writes "unlimited" explicitly. Retries are bounded by a retry
//     budget instead (20% of the requests in flight, at least 3), which
//     scales with the traffic where a fixed maxRetries does not.
//   - outlier detection on 5 consecutive gateway errors (502, 503, 504
//     and connect failures: a backend that is down or unreachable, not
//     one whose application answers 500 on purpose), checked every 10s,
//     ejected 30s (at most 300s), at most half the backends at once so a
//     fleet-wide failure never ejects every backend.
type Defaults struct {
	Timeouts         *DefaultTimeouts          `json:"timeouts,omitempty"`
	Retry            *DefaultRetry             `json:"retry,omitempty"`
	CircuitBreaker   *DefaultCircuitBreaker    `json:"circuitBreaker,omitempty"`
	OutlierDetection *OutlierDetectionSettings `json:"outlierDetection,omitempty"`
}

// DefaultTimeouts are the mesh's default timeouts.
type DefaultTimeouts struct {
	Disabled        bool `json:"disabled,omitempty"`
	TimeoutSettings `json:",inline"`
}

// DefaultRetry is the mesh's default retry (its budget also bounds the
// retries policies ask for, even while disabled).
type DefaultRetry struct {
	Disabled      bool `json:"disabled,omitempty"`
	RetrySettings `json:",inline"`
}

// DefaultCircuitBreaker is the mesh's default circuit breaker.
type DefaultCircuitBreaker struct {
	Disabled               bool `json:"disabled,omitempty"`
	CircuitBreakerSettings `json:",inline"`
}

func ptr[T any](v T) *T { return &v }

// The built-in defaults (see Defaults for why).
func builtinTimeouts() TimeoutSettings { return TimeoutSettings{Connect: "5s", Request: "15s"} }

func builtinRetry() RetrySettings {
	return RetrySettings{Attempts: ptr(2), RetryOn: []string{"connect-failure", "refused-stream"},
		Backoff: &BackoffSettings{Base: "25ms", Max: "250ms"},
		Budget:  &BudgetSettings{Percent: ptr(20.0), MinRetryConcurrency: ptr(3)}}
}

func builtinOutlierDetection() OutlierDetectionSettings {
	return OutlierDetectionSettings{ConsecutiveGatewayErrors: ptr(5), Interval: "10s", BaseEjectionTime: "30s", MaxEjectionTime: "300s", MaxEjectionPercent: ptr(50)}
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orPtr[T any](p, def *T) *T {
	if p == nil {
		return def
	}
	return p
}

// Resolve returns d with every field it leaves out filled from the
// built-in defaults (a nil d is all built-in). Parts stay disabled.
func (d *Defaults) Resolve() Defaults {
	var in Defaults
	if d != nil {
		in = *d
	}
	out := Defaults{Timeouts: &DefaultTimeouts{}, Retry: &DefaultRetry{}, CircuitBreaker: &DefaultCircuitBreaker{}}
	t := builtinTimeouts()
	if in.Timeouts != nil {
		out.Timeouts.Disabled = in.Timeouts.Disabled
		t = TimeoutSettings{Connect: orStr(in.Timeouts.Connect, t.Connect), Request: orStr(in.Timeouts.Request, t.Request), Idle: orStr(in.Timeouts.Idle, t.Idle)}
	}
	out.Timeouts.TimeoutSettings = t
	r := builtinRetry()
	if g := in.Retry; g != nil {
		out.Retry.Disabled = g.Disabled
		r.Attempts = orPtr(g.Attempts, r.Attempts)
		if g.RetryOn != nil {
			r.RetryOn = g.RetryOn
		}
		r.PerTryTimeout = g.PerTryTimeout
		if g.Backoff != nil {
			b := BackoffSettings{Base: orStr(g.Backoff.Base, r.Backoff.Base), Max: g.Backoff.Max}
			if b.Max == "" && g.Backoff.Base == "" {
				b.Max = r.Backoff.Max
			}
			r.Backoff = &b // a base alone: the max is ten times it
		}
		if g.Budget != nil {
			r.Budget = &BudgetSettings{Percent: orPtr(g.Budget.Percent, r.Budget.Percent), MinRetryConcurrency: orPtr(g.Budget.MinRetryConcurrency, r.Budget.MinRetryConcurrency)}
		}
	}
	out.Retry.RetrySettings = r
	if in.CircuitBreaker != nil {
		*out.CircuitBreaker = *in.CircuitBreaker
	}
	o := builtinOutlierDetection()
	if g := in.OutlierDetection; g != nil {
		o.Disabled = g.Disabled
		if g.ConsecutiveErrors != nil || g.ConsecutiveGatewayErrors != nil || g.ConsecutiveLocalOriginFailures != nil || g.SuccessRate != nil || g.FailurePercentage != nil {
			// Detectors given replace the built-in one.
			o.ConsecutiveErrors, o.ConsecutiveGatewayErrors, o.ConsecutiveLocalOriginFailures = g.ConsecutiveErrors, g.ConsecutiveGatewayErrors, g.ConsecutiveLocalOriginFailures
			o.SuccessRate, o.FailurePercentage = g.SuccessRate, g.FailurePercentage
		}
		o.Interval = orStr(g.Interval, o.Interval)
		o.BaseEjectionTime = orStr(g.BaseEjectionTime, o.BaseEjectionTime)
		o.MaxEjectionTime = orStr(g.MaxEjectionTime, o.MaxEjectionTime)
		o.MaxEjectionPercent = orPtr(g.MaxEjectionPercent, o.MaxEjectionPercent)
	}
	out.OutlierDetection = &o
	return out
}

// safeRetryOn are the conditions that retry only calls the backend never
// received.
var safeRetryOn = []string{"connect-failure", "refused-stream", "reset-before-request"}

// ValidateDefaults checks MeshConfig's spec.resilience (at field).
func ValidateDefaults(c Checker, field string, d *Defaults) {
	if d == nil {
		return
	}
	r := d.Resolve()
	if d.Timeouts != nil {
		f := field + ".timeouts"
		if d.Timeouts.Disabled {
			ignoredWhileDisabled(c, f, d.Timeouts.TimeoutSettings != TimeoutSettings{})
		} else {
			checkTimeouts(c, f, &r.Timeouts.TimeoutSettings)
		}
	}
	if d.Retry != nil {
		f := field + ".retry"
		if d.Retry.Disabled {
			ignoredWhileDisabled(c, f, d.Retry.Attempts != nil || d.Retry.RetryOn != nil || d.Retry.PerTryTimeout != "" || d.Retry.Backoff != nil)
		}
		checkRetry(c, f, &r.Retry.RetrySettings)
		if !d.Retry.Disabled {
			var unsafe []string
			for _, t := range r.Retry.RetryOn {
				if !slices.Contains(safeRetryOn, t) && slices.Contains(unsafeRetryOn, t) {
					unsafe = append(unsafe, t)
				}
			}
			if len(unsafe) > 0 {
				c.Warnf(f+".retryOn", "%s retry calls a backend may already have run, and this is every call in the mesh: a call that is not idempotent (a POST that pays) may run twice; keep the mesh's default to %s and retry more per Service with a BackendTrafficPolicy", strings.Join(unsafe, ", "), strings.Join(safeRetryOn, ", "))
			}
			checkPerTry(c, f+".perTryTimeout", r.Retry.PerTryTimeout, r.Timeouts.Request)
		}
	}
	if d.CircuitBreaker != nil {
		f := field + ".circuitBreaker"
		if d.CircuitBreaker.Disabled {
			ignoredWhileDisabled(c, f, d.CircuitBreaker.CircuitBreakerSettings != CircuitBreakerSettings{})
		} else if d.CircuitBreaker.CircuitBreakerSettings != (CircuitBreakerSettings{}) {
			checkCircuitBreaker(c, f, &d.CircuitBreaker.CircuitBreakerSettings)
		}
	}
	if d.OutlierDetection != nil {
		f := field + ".outlierDetection"
		if !d.OutlierDetection.Disabled {
			checkOutlierDetection(c, f, r.OutlierDetection)
		} else {
			checkOutlierDetection(c, f, d.OutlierDetection) // warns of what is ignored
		}
	}
}

func ignoredWhileDisabled(c Checker, field string, set bool) {
	if set {
		c.Warnf(field, "disabled: the other fields are ignored")
	}
}
