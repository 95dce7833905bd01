package resilience

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checker records what validation reports.
type checker struct {
	errs, warns []string
}

func (c *checker) Errorf(field, format string, args ...any) {
	c.errs = append(c.errs, field+": "+fmt.Sprintf(format, args...))
}

func (c *checker) Warnf(field, format string, args ...any) {
	c.warns = append(c.warns, field+": "+fmt.Sprintf(format, args...))
}

func (c *checker) CheckRegex(field, re string) {
	if _, err := regexp.Compile(re); err != nil {
		c.Errorf(field, "%v", err)
	}
}

func (c *checker) DidYouMean(s string, candidates []string) string {
	for _, cand := range candidates {
		if strings.EqualFold(strings.ReplaceAll(cand, "-", ""), strings.ReplaceAll(s, "-", "")) || strings.HasPrefix(s, cand) && len(cand) > 3 {
			return fmt.Sprintf(" (did you mean %q?)", cand)
		}
	}
	return ""
}

// oneProblem checks that got holds exactly one entry, for field and
// containing text.
func oneProblem(t *testing.T, what string, got []string, field, text string) {
	t.Helper()
	if len(got) != 1 || !strings.HasPrefix(got[0], field+": ") || !strings.Contains(got[0], text) {
		t.Errorf("%s = %q, want one for %s containing %q", what, got, field, text)
	}
}

func svcRef(name string) []TargetRef { return []TargetRef{{Kind: "Service", Name: name}} }

func TestValidateBackendTrafficPolicy(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name        string
		spec        BackendTrafficPolicySpec
		field, text string // the one error; none when field is ""
	}{
		{"valid everything", BackendTrafficPolicySpec{TargetRefs: svcRef("web"),
			Timeouts:         &TimeoutSettings{Connect: "2s", Request: "30s", Idle: "0s"},
			Retry:            &RetrySettings{Attempts: ptr(3), RetryOn: []string{"5xx", "unavailable"}, PerTryTimeout: "5s", Backoff: &BackoffSettings{Base: "10ms", Max: "1s"}, Budget: &BudgetSettings{Percent: f(25), MinRetryConcurrency: ptr(5)}},
			CircuitBreaker:   &CircuitBreakerSettings{MaxConnections: ptr(100), MaxRequests: ptr(1000), MaxRequestsPerConnection: ptr(50)},
			OutlierDetection: &OutlierDetectionSettings{ConsecutiveErrors: ptr(5), ConsecutiveGatewayErrors: ptr(3), ConsecutiveLocalOriginFailures: ptr(2), Interval: "5s", BaseEjectionTime: "10s", MaxEjectionTime: "60s", MaxEjectionPercent: ptr(33), SuccessRate: &SuccessRateSettings{MinHosts: ptr(3), RequestVolume: ptr(10), StdevFactor: f(1.5)}, FailurePercentage: &FailurePercentageSettings{Threshold: ptr(50), MinHosts: ptr(3), RequestVolume: ptr(10)}},
			LoadBalancer:     &LoadBalancerSettings{Type: RingHash, RingHash: &RingHashSettings{MinimumRingSize: ptr(64), MaximumRingSize: ptr(4096)}, HashOn: []HashOnSettings{{Header: "x-user"}, {SourceIP: true}, {Cookie: &CookieSettings{Name: "session", TTL: "1h"}}}},
			FaultInjection:   &FaultInjectionSettings{Delay: &FaultDelaySettings{Fixed: "2s", Percentage: f(10)}, Abort: &FaultAbortSettings{GRPCStatus: ptr(14), Percentage: f(0.5)}},
		}, "", ""},
		{"no targets", BackendTrafficPolicySpec{Timeouts: &TimeoutSettings{Request: "1s"}}, "spec.targetRefs", "no targets"},
		{"target kind", BackendTrafficPolicySpec{TargetRefs: []TargetRef{{Kind: "Deployment", Name: "web"}}, Timeouts: &TimeoutSettings{Request: "1s"}}, "spec.targetRefs[0].kind", "want Service"},
		{"target group", BackendTrafficPolicySpec{TargetRefs: []TargetRef{{Group: "apps", Kind: "Service", Name: "web"}}, Timeouts: &TimeoutSettings{Request: "1s"}}, "spec.targetRefs[0].group", `group is ""`},
		{"target name", BackendTrafficPolicySpec{TargetRefs: svcRef("Web_1"), Timeouts: &TimeoutSettings{Request: "1s"}}, "spec.targetRefs[0].name", "DNS-1123"},
		{"target twice", BackendTrafficPolicySpec{TargetRefs: []TargetRef{{Kind: "Service", Name: "web"}, {Group: "core", Kind: "Service", Name: "web"}}, Timeouts: &TimeoutSettings{Request: "1s"}}, "spec.targetRefs[1]", "name each target once"},
		{"port and cluster part", BackendTrafficPolicySpec{TargetRefs: []TargetRef{{Kind: "Service", Name: "web", SectionName: "http"}}, CircuitBreaker: &CircuitBreakerSettings{MaxRequests: ptr(1)}}, "spec.circuitBreaker", "one cluster"},
		{"port and connect timeout", BackendTrafficPolicySpec{TargetRefs: []TargetRef{{Kind: "Service", Name: "web", SectionName: "http"}}, Timeouts: &TimeoutSettings{Connect: "1s"}}, "spec.timeouts.connect", "names a port"},
		{"connect not a duration", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Connect: "5"}}, "spec.timeouts.connect", "not a duration"},
		{"connect 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Connect: "0s"}}, "spec.timeouts.connect", "out of range"},
		{"connect too long", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Connect: "10m"}}, "spec.timeouts.connect", "out of range"},
		{"request too long", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Request: "25h"}}, "spec.timeouts.request", "or 0s to turn it off"},
		{"idle negative", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Idle: "-1s"}}, "spec.timeouts.idle", "out of range"},
		{"attempts 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Attempts: ptr(0)}}, "spec.retry.attempts", "want 1 to 10"},
		{"attempts 11", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Attempts: ptr(11)}}, "spec.retry.attempts", "want 1 to 10"},
		{"retryOn unknown", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{RetryOn: []string{"connect-failure", "connectfailure"}}}, "spec.retry.retryOn[1]", `did you mean "connect-failure"`},
		{"retryOn needs codes", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{RetryOn: []string{"retriable-status-codes"}}}, "spec.retry.retryOn[0]", "unknown retry condition"},
		{"retryOn twice", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{RetryOn: []string{"5xx", "5xx"}}}, "spec.retry.retryOn[1]", "twice"},
		{"retryOn empty", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{RetryOn: []string{}}}, "spec.retry.retryOn", "no retry condition"},
		{"per try 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{PerTryTimeout: "0s"}}, "spec.retry.perTryTimeout", "out of range"},
		{"backoff max < base", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Backoff: &BackoffSettings{Base: "1s", Max: "100ms"}}}, "spec.retry.backoff.max", "shorter than backoff.base"},
		{"backoff too long", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Backoff: &BackoffSettings{Base: "2h"}}}, "spec.retry.backoff.base", "out of range"},
		{"budget over 100", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Budget: &BudgetSettings{Percent: f(101)}}}, "spec.retry.budget.percent", "0 to 100"},
		{"budget concurrency 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Retry: &RetrySettings{Budget: &BudgetSettings{MinRetryConcurrency: ptr(0)}}}, "spec.retry.budget.minRetryConcurrency", "want 1 to"},
		{"limit 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), CircuitBreaker: &CircuitBreakerSettings{MaxRequests: ptr(0)}}, "spec.circuitBreaker.maxRequests", "want 1 to 4294967295"},
		{"limit over uint32", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), CircuitBreaker: &CircuitBreakerSettings{MaxPendingRequests: ptr(1 << 32)}}, "spec.circuitBreaker.maxPendingRequests", "out of range"},
		{"no detector", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{Interval: "1s"}}, "spec.outlierDetection", "no detector"},
		{"consecutive 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveErrors: ptr(0)}}, "spec.outlierDetection.consecutiveErrors", "want 1 to"},
		{"gateway errors 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveGatewayErrors: ptr(0)}}, "spec.outlierDetection.consecutiveGatewayErrors", "want 1 to"},
		{"local origin 0", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveLocalOriginFailures: ptr(0)}}, "spec.outlierDetection.consecutiveLocalOriginFailures", "want 1 to"},
		{"interval", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveErrors: ptr(5), Interval: "ten seconds"}}, "spec.outlierDetection.interval", "not a duration"},
		{"max ejection < base", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveErrors: ptr(5), BaseEjectionTime: "1m", MaxEjectionTime: "30s"}}, "spec.outlierDetection.maxEjectionTime", "shorter than baseEjectionTime"},
		{"max ejection percent", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{ConsecutiveErrors: ptr(5), MaxEjectionPercent: ptr(101)}}, "spec.outlierDetection.maxEjectionPercent", "want 0 to 100"},
		{"stdev factor", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{SuccessRate: &SuccessRateSettings{StdevFactor: f(0)}}}, "spec.outlierDetection.successRate.stdevFactor", "out of range"},
		{"success min hosts", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{SuccessRate: &SuccessRateSettings{MinHosts: ptr(0)}}}, "spec.outlierDetection.successRate.minHosts", "want 1 to"},
		{"success volume", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{SuccessRate: &SuccessRateSettings{RequestVolume: ptr(-1)}}}, "spec.outlierDetection.successRate.requestVolume", "want 1 to"},
		{"failure threshold", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{FailurePercentage: &FailurePercentageSettings{Threshold: ptr(150)}}}, "spec.outlierDetection.failurePercentage.threshold", "want 0 to 100"},
		{"failure min hosts", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{FailurePercentage: &FailurePercentageSettings{MinHosts: ptr(0)}}}, "spec.outlierDetection.failurePercentage.minHosts", "want 1 to"},
		{"failure volume", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{FailurePercentage: &FailurePercentageSettings{RequestVolume: ptr(0)}}}, "spec.outlierDetection.failurePercentage.requestVolume", "want 1 to"},
		{"lb type", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: "RoundRobbin"}}, "spec.loadBalancer.type", "want RoundRobin, LeastRequest or RingHash"},
		{"choice count 1", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: LeastRequest, LeastRequest: &LeastRequestSettings{ChoiceCount: ptr(1)}}}, "spec.loadBalancer.leastRequest.choiceCount", "want 2 to 100"},
		{"least request for ring hash", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RoundRobin, LeastRequest: &LeastRequestSettings{}}}, "spec.loadBalancer.leastRequest", "set type: LeastRequest"},
		{"ring too large", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash, RingHash: &RingHashSettings{MaximumRingSize: ptr(maxRingSize + 1)}, HashOn: []HashOnSettings{{SourceIP: true}}}}, "spec.loadBalancer.ringHash.maximumRingSize", "out of range"},
		{"ring min > max", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash, RingHash: &RingHashSettings{MinimumRingSize: ptr(2048), MaximumRingSize: ptr(1024)}, HashOn: []HashOnSettings{{SourceIP: true}}}}, "spec.loadBalancer.ringHash.maximumRingSize", "smaller than minimumRingSize"},
		{"hashOn without ring hash", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: LeastRequest, HashOn: []HashOnSettings{{SourceIP: true}}}}, "spec.loadBalancer.hashOn", "needs type: RingHash"},
		{"hashOn two", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash, HashOn: []HashOnSettings{{Header: "x", SourceIP: true}}}}, "spec.loadBalancer.hashOn[0]", "exactly one"},
		{"hashOn header", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash, HashOn: []HashOnSettings{{Header: "x user"}}}}, "spec.loadBalancer.hashOn[0].header", "not a header name"},
		{"cookie ttl", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash, HashOn: []HashOnSettings{{Cookie: &CookieSettings{Name: "s", TTL: "1ms"}}}}}, "spec.loadBalancer.hashOn[0].cookie.ttl", "out of range"},
		{"no fault", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{}}, "spec.faultInjection", "add delay or abort"},
		{"delay percentage missing", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Delay: &FaultDelaySettings{Fixed: "1s"}}}, "spec.faultInjection.delay.percentage", "missing"},
		{"delay fixed missing", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Delay: &FaultDelaySettings{Percentage: f(1)}}}, "spec.faultInjection.delay.fixed", "missing"},
		{"delay percentage", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Delay: &FaultDelaySettings{Fixed: "1s", Percentage: f(-1)}}}, "spec.faultInjection.delay.percentage", "0 to 100"},
		{"abort both", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{HTTPStatus: ptr(503), GRPCStatus: ptr(14), Percentage: f(1)}}}, "spec.faultInjection.abort", "exactly one"},
		{"abort http status", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{HTTPStatus: ptr(600), Percentage: f(1)}}}, "spec.faultInjection.abort.httpStatus", "want 200 to 599"},
		{"abort grpc status", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{GRPCStatus: ptr(0), Percentage: f(1)}}}, "spec.faultInjection.abort.grpcStatus", "want 1 to 16"},
		{"abort percentage", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{GRPCStatus: ptr(14), Percentage: f(100.5)}}}, "spec.faultInjection.abort.percentage", "0 to 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{}
			ValidateBackendTrafficPolicy(c, &tt.spec)
			if tt.field == "" {
				if len(c.errs) > 0 {
					t.Errorf("errors = %q, want none", c.errs)
				}
				return
			}
			oneProblem(t, "errors", c.errs, tt.field, tt.text)
		})
	}
}

func TestValidateBackendTrafficPolicyWarnings(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name        string
		spec        BackendTrafficPolicySpec
		field, text string
	}{
		{"sets nothing", BackendTrafficPolicySpec{TargetRefs: svcRef("web")}, "spec", "sets nothing"},
		{"ring hash without hashOn", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), LoadBalancer: &LoadBalancerSettings{Type: RingHash}}, "spec.loadBalancer.hashOn", "random backends"},
		{"per try not shorter", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), Timeouts: &TimeoutSettings{Request: "1s"}, Retry: &RetrySettings{PerTryTimeout: "1s"}}, "spec.retry.perTryTimeout", "before a retry can start"},
		{"fine percentage", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{HTTPStatus: ptr(503), Percentage: f(0.00001)}}}, "spec.faultInjection.abort.percentage", "rounded"},
		{"disabled with fields", BackendTrafficPolicySpec{TargetRefs: svcRef("web"), OutlierDetection: &OutlierDetectionSettings{Disabled: true, ConsecutiveErrors: ptr(3)}}, "spec.outlierDetection", "ignored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{}
			ValidateBackendTrafficPolicy(c, &tt.spec)
			if len(c.errs) > 0 {
				t.Errorf("errors = %q, want none", c.errs)
			}
			oneProblem(t, "warnings", c.warns, tt.field, tt.text)
		})
	}
}

func TestValidateUpstreamTrafficSetting(t *testing.T) {
	tcp := func(s TCPConnectionSettings) *ConnectionSettingsSpec { return &ConnectionSettingsSpec{TCP: &s} }
	http := func(s HTTPConnectionSettings) *ConnectionSettingsSpec { return &ConnectionSettingsSpec{HTTP: &s} }
	local := func(h HTTPLocalRateLimitSpec) *RateLimitSpec {
		return &RateLimitSpec{Local: &LocalRateLimitSpec{HTTP: &h}}
	}
	tests := []struct {
		name        string
		spec        UpstreamTrafficSettingSpec
		field, text string
	}{
		{"osm fqdn", UpstreamTrafficSettingSpec{Host: "bookstore.shop.svc.cluster.local", ConnectionSettings: tcp(TCPConnectionSettings{MaxConnections: ptr(100), ConnectTimeout: "5s"})}, "", ""},
		{"mesh name", UpstreamTrafficSettingSpec{Host: "bookstore.shop.mesh", ConnectionSettings: http(HTTPConnectionSettings{MaxRequests: ptr(1), MaxRequestsPerConnection: ptr(0), MaxPendingRequests: ptr(4294967295), MaxRetries: ptr(3)})}, "", ""},
		{"bare name", UpstreamTrafficSettingSpec{Host: "bookstore", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 10, Unit: "minute", Burst: 5, ResponseStatusCode: 503, ResponseHeadersToAdd: []HTTPHeaderValue{{Name: "retry-after", Value: "60"}}})}, "", ""},
		{"host missing", UpstreamTrafficSettingSpec{ConnectionSettings: tcp(TCPConnectionSettings{ConnectTimeout: "1s"})}, "spec.host", "missing"},
		{"host other namespace", UpstreamTrafficSettingSpec{Host: "bookstore.other.svc.cluster.local", ConnectionSettings: tcp(TCPConnectionSettings{ConnectTimeout: "1s"})}, "spec.host", `create it in namespace "other"`},
		{"host not a name", UpstreamTrafficSettingSpec{Host: "book_store", ConnectionSettings: tcp(TCPConnectionSettings{ConnectTimeout: "1s"})}, "spec.host", "not a Service's host"},
		{"max connections negative", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: tcp(TCPConnectionSettings{MaxConnections: ptr(-1)})}, "spec.connectionSettings.tcp.maxConnections", "want 0 to 4294967295"},
		{"connect timeout", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: tcp(TCPConnectionSettings{ConnectTimeout: "5 s"})}, "spec.connectionSettings.tcp.connectTimeout", "not a duration"},
		{"max requests", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: http(HTTPConnectionSettings{MaxRequests: ptr(1 << 33)})}, "spec.connectionSettings.http.maxRequests", "out of range"},
		{"max per connection", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: http(HTTPConnectionSettings{MaxRequestsPerConnection: ptr(-2)})}, "spec.connectionSettings.http.maxRequestsPerConnection", "out of range"},
		{"max pending", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: http(HTTPConnectionSettings{MaxPendingRequests: ptr(-2)})}, "spec.connectionSettings.http.maxPendingRequests", "out of range"},
		{"max retries", UpstreamTrafficSettingSpec{Host: "b", ConnectionSettings: http(HTTPConnectionSettings{MaxRetries: ptr(-2)})}, "spec.connectionSettings.http.maxRetries", "out of range"},
		{"tcp connections 0", UpstreamTrafficSettingSpec{Host: "b", RateLimit: &RateLimitSpec{Local: &LocalRateLimitSpec{TCP: &TCPLocalRateLimitSpec{Unit: "second"}}}}, "spec.rateLimit.local.tcp.connections", "want 1 to"},
		{"tcp unit", UpstreamTrafficSettingSpec{Host: "b", RateLimit: &RateLimitSpec{Local: &LocalRateLimitSpec{TCP: &TCPLocalRateLimitSpec{Connections: 1, Unit: "day"}}}}, "spec.rateLimit.local.tcp.unit", "second, minute or hour"},
		{"tcp burst", UpstreamTrafficSettingSpec{Host: "b", RateLimit: &RateLimitSpec{Local: &LocalRateLimitSpec{TCP: &TCPLocalRateLimitSpec{Connections: 1, Unit: "second", Burst: maxUint32}}}}, "spec.rateLimit.local.tcp.burst", "lower burst"},
		{"http requests 0", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Unit: "second"})}, "spec.rateLimit.local.http.requests", "want 1 to"},
		{"http unit", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 1, Unit: "seconds"})}, "spec.rateLimit.local.http.unit", `did you mean "second"`},
		{"http burst negative", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 1, Unit: "second", Burst: -1})}, "spec.rateLimit.local.http.burst", "want 0 to"},
		{"status code", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 1, Unit: "second", ResponseStatusCode: 200})}, "spec.rateLimit.local.http.responseStatusCode", "want 400 to 599"},
		{"header name", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 1, Unit: "second", ResponseHeadersToAdd: []HTTPHeaderValue{{Value: "x"}}})}, "spec.rateLimit.local.http.responseHeadersToAdd[0].name", "missing"},
		{"header value", UpstreamTrafficSettingSpec{Host: "b", RateLimit: local(HTTPLocalRateLimitSpec{Requests: 1, Unit: "second", ResponseHeadersToAdd: []HTTPHeaderValue{{Name: "x", Value: "a\nb"}}})}, "spec.rateLimit.local.http.responseHeadersToAdd[0].value", "line break"},
		{"route path", UpstreamTrafficSettingSpec{Host: "b", HTTPRoutes: []HTTPRouteSpec{{RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 1, Unit: "second"}}}}}, "spec.httpRoutes[0].path", "missing"},
		{"route regex", UpstreamTrafficSettingSpec{Host: "b", HTTPRoutes: []HTTPRouteSpec{{Path: "/a(", RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 1, Unit: "second"}}}}}, "spec.httpRoutes[0].path", "missing closing"},
		{"route twice", UpstreamTrafficSettingSpec{Host: "b", HTTPRoutes: []HTTPRouteSpec{{Path: "/a", RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 1, Unit: "second"}}}, {Path: "/a", RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 1, Unit: "second"}}}}}, "spec.httpRoutes[1].path", "give each path once"},
		{"route limit", UpstreamTrafficSettingSpec{Host: "b", HTTPRoutes: []HTTPRouteSpec{{Path: "/a", RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 1, Unit: "week"}}}}}, "spec.httpRoutes[0].rateLimit.local.unit", "second, minute or hour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{}
			ValidateUpstreamTrafficSetting(c, "shop", &tt.spec)
			if tt.field == "" {
				if len(c.errs) > 0 {
					t.Errorf("errors = %q, want none", c.errs)
				}
				return
			}
			oneProblem(t, "errors", c.errs, tt.field, tt.text)
		})
	}
}

func TestValidateRetry(t *testing.T) {
	valid := func() RetrySpec {
		return RetrySpec{
			Source:       RetrySrcDstSpec{Kind: "ServiceAccount", Name: "client", Namespace: "shop"},
			Destinations: []RetrySrcDstSpec{{Kind: "Service", Name: "server", Namespace: "shop"}},
			RetryPolicy:  RetryPolicySpec{RetryOn: "5xx, connect-failure", PerTryTimeout: "1s", NumRetries: ptr(5), RetryBackoffBaseInterval: "1s"},
		}
	}
	tests := []struct {
		name        string
		edit        func(*RetrySpec)
		field, text string
	}{
		{"valid", func(*RetrySpec) {}, "", ""},
		{"grpc conditions", func(s *RetrySpec) { s.RetryPolicy.RetryOn = "unavailable,cancelled" }, "", ""},
		{"source kind", func(s *RetrySpec) { s.Source.Kind = "Service" }, "spec.source.kind", "want ServiceAccount"},
		{"source name", func(s *RetrySpec) { s.Source.Name = "" }, "spec.source.name", "empty"},
		{"no destinations", func(s *RetrySpec) { s.Destinations = nil }, "spec.destinations", "no destinations"},
		{"destination kind", func(s *RetrySpec) { s.Destinations[0].Kind = "ServiceAccount" }, "spec.destinations[0].kind", "want Service"},
		{"destination namespace", func(s *RetrySpec) { s.Destinations[0].Namespace = "Shop" }, "spec.destinations[0].namespace", "DNS-1123"},
		{"destination twice", func(s *RetrySpec) { s.Destinations = append(s.Destinations, s.Destinations[0]) }, "spec.destinations[1]", "once"},
		{"retryOn missing", func(s *RetrySpec) { s.RetryPolicy.RetryOn = " " }, "spec.retryPolicy.retryOn", "missing"},
		{"retryOn unknown", func(s *RetrySpec) { s.RetryPolicy.RetryOn = "5xx,gateway-errors" }, "spec.retryPolicy.retryOn", `did you mean "gateway-error"`},
		{"perTryTimeout missing", func(s *RetrySpec) { s.RetryPolicy.PerTryTimeout = "" }, "spec.retryPolicy.perTryTimeout", "missing"},
		{"perTryTimeout", func(s *RetrySpec) { s.RetryPolicy.PerTryTimeout = "48h" }, "spec.retryPolicy.perTryTimeout", "out of range"},
		{"numRetries missing", func(s *RetrySpec) { s.RetryPolicy.NumRetries = nil }, "spec.retryPolicy.numRetries", "missing"},
		{"numRetries", func(s *RetrySpec) { s.RetryPolicy.NumRetries = ptr(101) }, "spec.retryPolicy.numRetries", "want 0 to 100"},
		{"backoff missing", func(s *RetrySpec) { s.RetryPolicy.RetryBackoffBaseInterval = "" }, "spec.retryPolicy.retryBackoffBaseInterval", "missing"},
		{"backoff", func(s *RetrySpec) { s.RetryPolicy.RetryBackoffBaseInterval = "0s" }, "spec.retryPolicy.retryBackoffBaseInterval", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.edit(&s)
			c := &checker{}
			ValidateRetry(c, &s)
			if tt.field == "" {
				if len(c.errs) > 0 {
					t.Errorf("errors = %q, want none", c.errs)
				}
				return
			}
			oneProblem(t, "errors", c.errs, tt.field, tt.text)
		})
	}
}

func TestHostService(t *testing.T) {
	for _, host := range []string{"bookstore", "bookstore.shop", "bookstore.shop.svc", "bookstore.shop.svc.cluster.local", "bookstore.shop.svc.cluster.local.", "bookstore.shop.mesh", "Bookstore.Shop.Mesh"} {
		got, err := HostService(host, "shop")
		if err != nil || got != "bookstore" {
			t.Errorf("HostService(%q) = %q, %v, want bookstore", host, got, err)
		}
	}
	for _, host := range []string{"", "bookstore.other.mesh", "a.b.c.mesh", "book_store"} {
		if got, err := HostService(host, "shop"); err == nil {
			t.Errorf("HostService(%q) = %q, want an error", host, got)
		}
	}
}

func TestValidateDefaults(t *testing.T) {
	tests := []struct {
		name              string
		d                 Defaults
		errField, errText string
		warnField, warn   string
	}{
		{"empty", Defaults{}, "", "", "", ""},
		{"partial timeouts", Defaults{Timeouts: &DefaultTimeouts{TimeoutSettings: TimeoutSettings{Request: "0s"}}}, "", "", "", ""},
		{"bad connect", Defaults{Timeouts: &DefaultTimeouts{TimeoutSettings: TimeoutSettings{Connect: "0s"}}}, "spec.resilience.timeouts.connect", "out of range", "", ""},
		{"disabled with fields", Defaults{Timeouts: &DefaultTimeouts{Disabled: true, TimeoutSettings: TimeoutSettings{Request: "1s"}}}, "", "", "spec.resilience.timeouts", "ignored"},
		{"unsafe retry", Defaults{Retry: &DefaultRetry{RetrySettings: RetrySettings{RetryOn: []string{"connect-failure", "5xx"}}}}, "", "", "spec.resilience.retry.retryOn", "may run twice"},
		{"bad attempts", Defaults{Retry: &DefaultRetry{RetrySettings: RetrySettings{Attempts: ptr(20)}}}, "spec.resilience.retry.attempts", "want 1 to 10", "", ""},
		{"backoff max below the built-in base", Defaults{Retry: &DefaultRetry{RetrySettings: RetrySettings{Backoff: &BackoffSettings{Max: "10ms"}}}}, "spec.resilience.retry.backoff.max", "shorter than backoff.base (25ms)", "", ""},
		{"circuit breaker", Defaults{CircuitBreaker: &DefaultCircuitBreaker{CircuitBreakerSettings: CircuitBreakerSettings{MaxRequests: ptr(0)}}}, "spec.resilience.circuitBreaker.maxRequests", "want 1 to", "", ""},
		{"outlier timing only", Defaults{OutlierDetection: &OutlierDetectionSettings{Interval: "5s"}}, "", "", "", ""},
		{"outlier ejection", Defaults{OutlierDetection: &OutlierDetectionSettings{MaxEjectionPercent: ptr(200)}}, "spec.resilience.outlierDetection.maxEjectionPercent", "want 0 to 100", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{}
			ValidateDefaults(c, "spec.resilience", &tt.d)
			if tt.errField == "" {
				if len(c.errs) > 0 {
					t.Errorf("errors = %q, want none", c.errs)
				}
			} else {
				oneProblem(t, "errors", c.errs, tt.errField, tt.errText)
			}
			if tt.warnField == "" {
				if len(c.warns) > 0 {
					t.Errorf("warnings = %q, want none", c.warns)
				}
			} else {
				oneProblem(t, "warnings", c.warns, tt.warnField, tt.warn)
			}
		})
	}
}

// The built-in defaults are what a mesh without MeshConfig resilience
// gets, and each part turns off on its own.
func TestMergeDefaults(t *testing.T) {
	wantCluster := Cluster{
		ConnectTimeout: &Timeout{5 * time.Second, SourceDefault},
		CircuitBreaker: &CircuitBreaker{MaxConnections: Unlimited, MaxPendingRequests: Unlimited, MaxRequests: Unlimited, MaxRetries: Unlimited, Source: SourceDefault},
		RetryBudget:    &RetryBudget{Percent: 20, MinRetryConcurrency: 3, Source: SourceDefault},
		OutlierDetection: &OutlierDetection{ConsecutiveGatewayErrors: 5, Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second,
			MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 50, Source: SourceDefault},
	}
	if diff := cmp.Diff(wantCluster, MergeCluster(nil, nil, nil)); diff != "" {
		t.Errorf("MergeCluster(built-in) (-want +got):\n%s", diff)
	}
	defaultRetry := &Retry{RetryOn: []string{"connect-failure", "refused-stream"}, NumRetries: 2, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond, Source: SourceDefault}
	if diff := cmp.Diff(Route{RequestTimeout: &Timeout{15 * time.Second, SourceDefault}, Retry: defaultRetry}, MergeRoute(nil, Port{AppProtocol: "http"}, nil, nil, nil)); diff != "" {
		t.Errorf("MergeRoute(http) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Route{RequestTimeout: &Timeout{0, SourceDefault}, Retry: defaultRetry}, MergeRoute(nil, Port{AppProtocol: "grpc"}, nil, nil, nil)); diff != "" {
		t.Errorf("MergeRoute(grpc) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Route{}, MergeRoute(nil, Port{AppProtocol: "tcp"}, nil, nil, nil)); diff != "" {
		t.Errorf("MergeRoute(tcp) (-want +got):\n%s", diff)
	}
	off := &Defaults{Timeouts: &DefaultTimeouts{Disabled: true}, Retry: &DefaultRetry{Disabled: true}, CircuitBreaker: &DefaultCircuitBreaker{Disabled: true}, OutlierDetection: &OutlierDetectionSettings{Disabled: true}}
	// The budget stays: it bounds what policies retry.
	if diff := cmp.Diff(Cluster{RetryBudget: wantCluster.RetryBudget}, MergeCluster(off, nil, nil)); diff != "" {
		t.Errorf("MergeCluster(all disabled) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Route{}, MergeRoute(off, Port{AppProtocol: "http"}, nil, nil, nil)); diff != "" {
		t.Errorf("MergeRoute(all disabled) (-want +got):\n%s", diff)
	}
	tuned := &Defaults{Timeouts: &DefaultTimeouts{TimeoutSettings: TimeoutSettings{Request: "30s", Idle: "1m"}},
		Retry:            &DefaultRetry{RetrySettings: RetrySettings{Attempts: ptr(1), Backoff: &BackoffSettings{Base: "50ms"}}},
		OutlierDetection: &OutlierDetectionSettings{ConsecutiveLocalOriginFailures: ptr(3)}}
	gotR := MergeRoute(tuned, Port{AppProtocol: "http"}, nil, nil, nil)
	wantR := Route{RequestTimeout: &Timeout{30 * time.Second, SourceDefault}, IdleTimeout: &Timeout{time.Minute, SourceDefault},
		Retry: &Retry{RetryOn: []string{"connect-failure", "refused-stream"}, NumRetries: 1, BackoffBase: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond, Source: SourceDefault}}
	if diff := cmp.Diff(wantR, gotR); diff != "" {
		t.Errorf("MergeRoute(tuned) (-want +got):\n%s", diff)
	}
	gotC := MergeCluster(tuned, nil, nil)
	if od := gotC.OutlierDetection; od.ConsecutiveLocalOriginFailures != 3 || od.ConsecutiveGatewayErrors != 0 || od.MaxEjectionPercent != 50 {
		t.Errorf("MergeCluster(tuned).OutlierDetection = %+v, want the given detector alone, with the default ejection", od)
	}
}

// Each part comes whole from the highest policy that sets it: a Retry for
// its source, a port's BackendTrafficPolicy, the Service's (the first by
// name among equals), the UpstreamTrafficSetting, MeshConfig.
func TestMergePrecedence(t *testing.T) {
	src := func(kind, name string) Source { return SourceOf(kind, "shop", name) }
	f := func(v float64) *float64 { return &v }
	uts := &Named[UpstreamTrafficSettingSpec]{Source: src(KindUpstreamTrafficSetting, "u"), Spec: &UpstreamTrafficSettingSpec{Host: "web",
		ConnectionSettings: &ConnectionSettingsSpec{TCP: &TCPConnectionSettings{MaxConnections: ptr(10), ConnectTimeout: "2s"}, HTTP: &HTTPConnectionSettings{MaxRequests: ptr(20)}}}}
	whole := func(name string, s BackendTrafficPolicySpec) Attached {
		return Attached{Named: Named[BackendTrafficPolicySpec]{Source: src(KindBackendTrafficPolicy, name), Spec: &s}}
	}
	port := func(name, section string, s BackendTrafficPolicySpec) Attached {
		a := whole(name, s)
		a.SectionName = section
		return a
	}
	policies := []Attached{
		whole("b", BackendTrafficPolicySpec{Timeouts: &TimeoutSettings{Request: "20s"}, CircuitBreaker: &CircuitBreakerSettings{MaxRequests: ptr(100)},
			LoadBalancer: &LoadBalancerSettings{Type: RingHash, HashOn: []HashOnSettings{{Header: "x-user"}}}}),
		whole("a", BackendTrafficPolicySpec{Timeouts: &TimeoutSettings{Request: "10s", Idle: "1m"}, OutlierDetection: &OutlierDetectionSettings{Disabled: true}}),
		port("z", "admin", BackendTrafficPolicySpec{Timeouts: &TimeoutSettings{Request: "1s"}, Retry: &RetrySettings{Attempts: ptr(4)},
			FaultInjection: &FaultInjectionSettings{Abort: &FaultAbortSettings{HTTPStatus: ptr(503), Percentage: f(10)}}}),
		port("y", "other", BackendTrafficPolicySpec{Timeouts: &TimeoutSettings{Request: "2s"}}),
	}
	gotC := MergeCluster(nil, uts, policies)
	wantC := Cluster{
		ConnectTimeout: &Timeout{2 * time.Second, src(KindUpstreamTrafficSetting, "u")},
		CircuitBreaker: &CircuitBreaker{MaxConnections: Unlimited, MaxPendingRequests: Unlimited, MaxRequests: 100, MaxRetries: Unlimited, Source: src(KindBackendTrafficPolicy, "b")},
		RetryBudget:    &RetryBudget{Percent: 20, MinRetryConcurrency: 3, Source: SourceDefault},
		LoadBalancer:   &LoadBalancer{Type: RingHash, MinimumRingSize: 1024, MaximumRingSize: maxRingSize, HashOn: []HashOn{{Header: "x-user"}}, Source: src(KindBackendTrafficPolicy, "b")},
		// outlier detection: "a" turned it off, over MeshConfig's
	}
	if diff := cmp.Diff(wantC, gotC); diff != "" {
		t.Errorf("MergeCluster (-want +got):\n%s", diff)
	}
	if got := MergeCluster(nil, uts, nil).CircuitBreaker; got.MaxConnections != 10 || got.MaxRequests != 20 || got.MaxPendingRequests != Unlimited || got.Source != src(KindUpstreamTrafficSetting, "u") {
		t.Errorf("MergeCluster(UpstreamTrafficSetting).CircuitBreaker = %+v, want its limits, the others unlimited", got)
	}
	retries := []Named[RetrySpec]{
		{Source: src(KindRetry, "r2"), Spec: &RetrySpec{RetryPolicy: RetryPolicySpec{RetryOn: "5xx", NumRetries: ptr(9), PerTryTimeout: "1s", RetryBackoffBaseInterval: "1s"}}},
		{Source: src(KindRetry, "r1"), Spec: &RetrySpec{RetryPolicy: RetryPolicySpec{RetryOn: "5xx, reset", NumRetries: ptr(3), PerTryTimeout: "2s", RetryBackoffBaseInterval: "100ms"}}},
	}
	tests := []struct {
		name    string
		port    Port
		retries []Named[RetrySpec]
		want    Route
	}{
		{"the port's policy wins", Port{Name: "admin", AppProtocol: "http"}, nil, Route{
			RequestTimeout: &Timeout{time.Second, src(KindBackendTrafficPolicy, "z")},
			IdleTimeout:    &Timeout{time.Minute, src(KindBackendTrafficPolicy, "a")},
			Retry:          &Retry{RetryOn: []string{"connect-failure", "refused-stream"}, NumRetries: 4, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond, Source: src(KindBackendTrafficPolicy, "z")},
			Fault:          &Fault{Abort: &Abort{HTTPStatus: 503, PerMillion: 100000}, Source: src(KindBackendTrafficPolicy, "z")},
			HashPolicy:     &HashPolicy{HashOn: []HashOn{{Header: "x-user"}}, Source: src(KindBackendTrafficPolicy, "b")},
		}},
		{"the first by name among the Service's", Port{Name: "http", AppProtocol: "http"}, nil, Route{
			RequestTimeout: &Timeout{10 * time.Second, src(KindBackendTrafficPolicy, "a")},
			IdleTimeout:    &Timeout{time.Minute, src(KindBackendTrafficPolicy, "a")},
			Retry:          &Retry{RetryOn: []string{"connect-failure", "refused-stream"}, NumRetries: 2, BackoffBase: 25 * time.Millisecond, BackoffMax: 250 * time.Millisecond, Source: SourceDefault},
			HashPolicy:     &HashPolicy{HashOn: []HashOn{{Header: "x-user"}}, Source: src(KindBackendTrafficPolicy, "b")},
		}},
		{"a Retry wins the retry", Port{Name: "admin", AppProtocol: "grpc"}, retries, Route{
			RequestTimeout: &Timeout{time.Second, src(KindBackendTrafficPolicy, "z")},
			IdleTimeout:    &Timeout{time.Minute, src(KindBackendTrafficPolicy, "a")},
			Retry:          &Retry{RetryOn: []string{"5xx", "reset"}, NumRetries: 3, PerTryTimeout: 2 * time.Second, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, Source: src(KindRetry, "r1")},
			Fault:          &Fault{Abort: &Abort{HTTPStatus: 503, PerMillion: 100000}, Source: src(KindBackendTrafficPolicy, "z")},
			HashPolicy:     &HashPolicy{HashOn: []HashOn{{Header: "x-user"}}, Source: src(KindBackendTrafficPolicy, "b")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MergeRoute(nil, tt.port, policies, tt.retries, gotC.LoadBalancer)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MergeRoute (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInboundRateLimit(t *testing.T) {
	n := &Named[UpstreamTrafficSettingSpec]{Source: "UpstreamTrafficSetting shop/u", Spec: &UpstreamTrafficSettingSpec{Host: "web",
		RateLimit: &RateLimitSpec{Local: &LocalRateLimitSpec{
			TCP:  &TCPLocalRateLimitSpec{Connections: 100, Unit: "minute", Burst: 10},
			HTTP: &HTTPLocalRateLimitSpec{Requests: 50, Unit: "second", ResponseHeadersToAdd: []HTTPHeaderValue{{Name: "retry-after", Value: "1"}}},
		}},
		HTTPRoutes: []HTTPRouteSpec{{Path: "/books/.*", RateLimit: &HTTPPerRouteRateLimitSpec{Local: &HTTPLocalRateLimitSpec{Requests: 5, Unit: "hour", ResponseStatusCode: 503}}}},
	}}
	want := &RateLimit{
		TCP:    &TokenBucket{MaxTokens: 110, TokensPerFill: 100, FillInterval: time.Minute},
		HTTP:   &HTTPRateLimit{TokenBucket: TokenBucket{MaxTokens: 50, TokensPerFill: 50, FillInterval: time.Second}, Status: 429, Headers: []Header{{"retry-after", "1"}}},
		Routes: []RouteRateLimit{{PathRegex: "/books/.*", Limit: HTTPRateLimit{TokenBucket: TokenBucket{MaxTokens: 5, TokensPerFill: 5, FillInterval: time.Hour}, Status: 503}}},
		Source: "UpstreamTrafficSetting shop/u",
	}
	if diff := cmp.Diff(want, InboundRateLimit(n)); diff != "" {
		t.Errorf("InboundRateLimit (-want +got):\n%s", diff)
	}
	if got := InboundRateLimit(&Named[UpstreamTrafficSettingSpec]{Spec: &UpstreamTrafficSettingSpec{Host: "web"}}); got != nil {
		t.Errorf("InboundRateLimit(no limits) = %+v, want nil", got)
	}
}
