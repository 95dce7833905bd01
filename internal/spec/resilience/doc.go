// Package resilience is failure handling in the mesh specification: the
// wire types of the specs of OSM's UpstreamTrafficSetting and Retry
// (policy.openservicemesh.io/v1alpha1, as OSM v1.2 defined them), of
// osm-vm's BackendTrafficPolicy (osm-vm.io/v1alpha1) and of MeshConfig's
// spec.resilience defaults; their defaults and field validation; and the
// effective policy rendering reads, with the Merge functions that work
// it out and the source of each part; and what proxyless gRPC clients do
// with each field (ProxylessSupport, the support matrix), with the
// warnings apply gives of what they ignore or replace.
//
// It must not import spec or anything of ours but internal/mesh: spec
// imports it, holds the documents that carry these specs, registers them
// as kinds, checks their references to Services and service accounts,
// indexes them per snapshot and calls Merge for its queries
// (ServiceResilience, CallResilience, InboundRateLimit). Validation
// reports through Checker, which spec's validator implements.
//
// # Effective policy
//
// Rendering reads two things. A Cluster is what every caller of a
// Service shares, because callers share one cluster per Service and
// flavor: the connect timeout, the circuit breaker's limits, the retry
// budget, outlier detection and the load balancer. A Route is what one
// caller gets for its calls to one port of a Service: the request and
// idle timeouts, retries, fault injection and the hash policy of a
// ring-hash load balancer. A part left nil is one the mesh does not set:
// the data plane's own default applies.
//
// # Precedence
//
// Each part is taken whole from the first of these that sets it:
//
//  1. (render, not here) the HTTPRoute or GRPCRoute the call matches, for
//     what it says itself: its timeouts and its retry;
//  2. Retry (OSM), for the retry of the calls of its source service
//     account to its destinations; when several name the same pair, the
//     first by namespace and name;
//  3. a BackendTrafficPolicy whose targetRef names the Service and the
//     port's name (sectionName), then one whose targetRef names the whole
//     Service; among equals, the first by name (the specification keeps
//     no creation time, so "oldest" cannot break ties; apply warns of
//     the overlap);
//  4. the UpstreamTrafficSetting whose host is the Service (its
//     connection settings: connect timeout and circuit breaker);
//  5. MeshConfig's spec.resilience defaults, each part of which can be
//     turned off (disabled: true), and the built-in defaults for a part
//     MeshConfig does not mention.
//
// A part is not merged field by field: a policy that sets a circuit
// breaker with maxRequests only gets the other limits' defaults, not
// those of a lower policy. What a part says is then visible as one
// policy's, which is what `osm-server get` and the dashboard show.
package resilience

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Checker is what validation reports to; spec's validator is one.
type Checker interface {
	// Errorf refuses the document for field.
	Errorf(field, format string, args ...any)
	// Warnf accepts it with a warning about field.
	Warnf(field, format string, args ...any)
	// CheckRegex checks a regular expression as every regex of the
	// specification is checked (RE2 syntax, Envoy's program size).
	CheckRegex(field, re string)
	// DidYouMean returns ` (did you mean "x"?)` for the candidate closest
	// to s, or "".
	DidYouMean(s string, candidates []string) string
}

// Source names where a part of the effective policy comes from, as
// `osm-server get` and the dashboard show it: "MeshConfig default",
// "BackendTrafficPolicy shop/slow", "UpstreamTrafficSetting shop/db",
// "Retry shop/orders".
type Source string

// SourceDefault is the source of a part MeshConfig's defaults set.
const SourceDefault Source = "MeshConfig default"

// Kinds of the policies, as their sources name them.
const (
	KindUpstreamTrafficSetting = "UpstreamTrafficSetting"
	KindRetry                  = "Retry"
	KindBackendTrafficPolicy   = "BackendTrafficPolicy"
)

// SourceOf returns the source naming the policy kind namespace/name.
func SourceOf(kind, namespace, name string) Source {
	return Source(kind + " " + namespace + "/" + name)
}

// Bounds of the numbers. Envoy and gRPC carry limits and counts as
// uint32.
const (
	maxUint32         = math.MaxUint32
	minDuration       = time.Millisecond
	maxConnectTimeout = 5 * time.Minute
	maxTimeout        = 24 * time.Hour
	maxBackoff        = time.Hour
	maxEjectionTime   = 24 * time.Hour
	maxRetries        = 10
	// maxOSMRetries bounds OSM's numRetries, which OSM did not bound:
	// wider than maxRetries so files written for OSM apply.
	maxOSMRetries       = 100
	maxTargetRefs       = 16
	maxDestinations     = 64
	maxHashOn           = 8
	maxRetryOn          = 16
	maxHTTPRoutes       = 64
	maxHeadersToAdd     = 10 // Envoy's bound on a local rate limit's response_headers_to_add
	maxHeaderNameLength = 256
	maxHeaderValueLen   = 4096
	maxChoiceCount      = 100
	maxRingSize         = 8 * 1024 * 1024 // Envoy's bound
	maxStdevFactor      = 100.0
)

// duration parses a duration the validation accepted (0 when empty).
func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// checkDuration checks the duration s of field: set, and between lo and
// hi, or 0 when zeroOK. It returns false when s is empty or invalid.
func checkDuration(c Checker, field, s, example string, lo, hi time.Duration, zeroOK bool) bool {
	if s == "" {
		return false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		c.Errorf(field, "%q is not a duration: want a value such as %q", s, example)
		return false
	}
	if d == 0 && zeroOK {
		return true
	}
	if d < lo || d > hi {
		zero := ""
		if zeroOK {
			zero = ", or 0s to turn it off"
		}
		c.Errorf(field, "%s is out of range: want %s to %s%s, such as %q", d, lo, hi, zero, example)
		return false
	}
	return true
}

// checkRange checks the number n of field is within lo-hi.
func checkRange(c Checker, field string, n, lo, hi int) bool {
	if n < lo || n > hi {
		c.Errorf(field, "%d is out of range: want %d to %d", n, lo, hi)
		return false
	}
	return true
}

// checkIntPtr checks an optional number.
func checkIntPtr(c Checker, field string, n *int, lo, hi int) {
	if n != nil {
		checkRange(c, field, *n, lo, hi)
	}
}

// checkPercent checks a percentage (0-100, up to four decimals: Envoy's
// fractions are per million).
func checkPercent(c Checker, field string, p float64) {
	if math.IsNaN(p) || p < 0 || p > 100 {
		c.Errorf(field, "%v is out of range: want a percentage from 0 to 100, such as 10 or 0.5", p)
		return
	}
	if m := p * 10000; math.Abs(m-math.Round(m)) > 1e-6 {
		c.Warnf(field, "%v is finer than the data planes' one in a million: it is rounded to %v", p, math.Round(m)/10000)
	}
}

// perMillion converts a checked percentage.
func perMillion(p float64) uint32 { return uint32(math.Round(p * 10000)) }

// uintOr returns *n as a uint32, or def when n is nil.
func uintOr(n *int, def uint32) uint32 {
	if n == nil {
		return def
	}
	return uint32(*n)
}

// Retry conditions (retryOn). Envoy's, for HTTP
// (x-envoy-retry-on), and gRPC's status names (x-envoy-retry-grpc-on,
// and the only ones proxyless gRPC clients honour, gRFC A44).
var (
	httpRetryOn = []string{"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited",
		"retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure"}
	grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
	// policyRetryOn are the conditions BackendTrafficPolicy and MeshConfig
	// accept: those needing no further settings.
	policyRetryOn = []string{"connect-failure", "refused-stream", "reset", "reset-before-request", "5xx", "gateway-error",
		"retriable-4xx", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
	// unsafeRetryOn may retry a call the application already received:
	// a non-idempotent call (a POST that pays) may then run twice.
	unsafeRetryOn = []string{"5xx", "gateway-error", "reset", "retriable-4xx", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}
)

// checkRetryOn checks retry conditions against allowed; indexed names
// each by its index in field (a list), else field is one string.
func checkRetryOn(c Checker, field string, on []string, allowed []string, indexed bool) {
	if len(on) == 0 {
		c.Errorf(field, "no retry condition: give at least one, such as connect-failure")
		return
	}
	if len(on) > maxRetryOn {
		c.Errorf(field, "%d conditions, more than %d", len(on), maxRetryOn)
	}
	seen := map[string]bool{}
	for i, t := range on {
		f := field
		if indexed {
			f = fmt.Sprintf("%s[%d]", field, i)
		}
		switch {
		case !slices.Contains(allowed, t):
			c.Errorf(f, "unknown retry condition %q: want one of %s%s", t, strings.Join(allowed, ", "), c.DidYouMean(t, allowed))
		case seen[t]:
			c.Errorf(f, "%q is given twice: give each condition once", t)
		}
		seen[t] = true
	}
}
