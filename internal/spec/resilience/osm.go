package resilience

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// OSM v1.2's policy.openservicemesh.io/v1alpha1 specs, field for field
// (pkg/apis/policy/v1alpha1 and the CRDs in cmd/osm-bootstrap/crds):
// numbers are ints here so that every one is range-checked with an error
// naming it, and durations are strings parsed by validation.

// UpstreamTrafficSettingSpec is the spec of an UpstreamTrafficSetting:
// the connection settings every caller of the host uses (its circuit
// breaker and connect timeout) and the rate limits the host's own proxy
// enforces on what it receives.
type UpstreamTrafficSettingSpec struct {
	// Host is the Service: its name, or <name>.<namespace>.svc.cluster.local
	// (OSM's form) or <name>.<namespace>.mesh, in the policy's namespace.
	Host               string                  `json:"host"`
	ConnectionSettings *ConnectionSettingsSpec `json:"connectionSettings,omitempty"`
	RateLimit          *RateLimitSpec          `json:"rateLimit,omitempty"`
	HTTPRoutes         []HTTPRouteSpec         `json:"httpRoutes,omitempty"`
}

// ConnectionSettingsSpec holds TCP and HTTP connection settings.
type ConnectionSettingsSpec struct {
	TCP  *TCPConnectionSettings  `json:"tcp,omitempty"`
	HTTP *HTTPConnectionSettings `json:"http,omitempty"`
}

// TCPConnectionSettings: maxConnections defaults to 2^32-1 (no limit),
// connectTimeout to 5s.
type TCPConnectionSettings struct {
	MaxConnections *int   `json:"maxConnections,omitempty"`
	ConnectTimeout string `json:"connectTimeout,omitempty"`
}

// HTTPConnectionSettings: each limit defaults to 2^32-1 (no limit);
// maxRequestsPerConnection to none.
type HTTPConnectionSettings struct {
	MaxRequests              *int `json:"maxRequests,omitempty"`
	MaxRequestsPerConnection *int `json:"maxRequestsPerConnection,omitempty"`
	MaxPendingRequests       *int `json:"maxPendingRequests,omitempty"`
	MaxRetries               *int `json:"maxRetries,omitempty"`
}

// RateLimitSpec holds the local rate limits, which the host's own proxy
// enforces, and a global one, which needs a rate limit service the mesh
// does not run: it is accepted and ignored, with a warning.
type RateLimitSpec struct {
	Local  *LocalRateLimitSpec `json:"local,omitempty"`
	Global any                 `json:"global,omitempty"`
}

// LocalRateLimitSpec is a token bucket per connection (TCP) or request
// (HTTP).
type LocalRateLimitSpec struct {
	TCP  *TCPLocalRateLimitSpec  `json:"tcp,omitempty"`
	HTTP *HTTPLocalRateLimitSpec `json:"http,omitempty"`
}

// TCPLocalRateLimitSpec allows connections per unit, and burst more.
type TCPLocalRateLimitSpec struct {
	Connections int    `json:"connections"`
	Unit        string `json:"unit"`
	Burst       int    `json:"burst,omitempty"`
}

// HTTPLocalRateLimitSpec allows requests per unit, and burst more; the
// rest are answered with responseStatusCode (default 429) and the
// responseHeadersToAdd.
type HTTPLocalRateLimitSpec struct {
	Requests             int               `json:"requests"`
	Unit                 string            `json:"unit"`
	Burst                int               `json:"burst,omitempty"`
	ResponseStatusCode   int               `json:"responseStatusCode,omitempty"`
	ResponseHeadersToAdd []HTTPHeaderValue `json:"responseHeadersToAdd,omitempty"`
}

// HTTPHeaderValue is a header's name and value.
type HTTPHeaderValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPRouteSpec is a rate limit for the requests whose path matches Path
// (an RE2 regular expression, matched against the whole path).
type HTTPRouteSpec struct {
	Path      string                     `json:"path"`
	RateLimit *HTTPPerRouteRateLimitSpec `json:"rateLimit,omitempty"`
}

// HTTPPerRouteRateLimitSpec is a route's rate limit.
type HTTPPerRouteRateLimitSpec struct {
	Local  *HTTPLocalRateLimitSpec `json:"local,omitempty"`
	Global any                     `json:"global,omitempty"`
}

// RetrySpec is the spec of an OSM Retry: the retries of the calls of one
// service account (source) to some Services (destinations).
type RetrySpec struct {
	Source       RetrySrcDstSpec   `json:"source"`
	Destinations []RetrySrcDstSpec `json:"destinations"`
	RetryPolicy  RetryPolicySpec   `json:"retryPolicy"`
}

// RetrySrcDstSpec names a ServiceAccount (source) or Service
// (destinations). An empty namespace is the policy's.
type RetrySrcDstSpec struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// RetryPolicySpec is what is retried and how: retryOn is Envoy's comma
// list of conditions; the backoff's maximum is ten times its base.
type RetryPolicySpec struct {
	RetryOn       string `json:"retryOn"`
	PerTryTimeout string `json:"perTryTimeout"`
	NumRetries    *int   `json:"numRetries"`
	// RetryBackoffBaseInterval is named as OSM's CRD and documentation
	// name it (OSM's Go type tagged it retryBackoffInterval, a field its
	// CRD did not have).
	RetryBackoffBaseInterval string `json:"retryBackoffBaseInterval"`
}

const (
	kindServiceAccount = "ServiceAccount"
	kindService        = "Service"
	// hostSuffixOSM and hostSuffixMesh end the long forms of a host.
	hostSuffixOSM  = ".svc.cluster.local"
	hostSuffixMesh = ".mesh"
)

var rateLimitUnits = []string{"second", "minute", "hour"}

// unitDuration is a rate limit unit's period.
func unitDuration(u string) time.Duration {
	switch u {
	case "minute":
		return time.Minute
	case "hour":
		return time.Hour
	}
	return time.Second
}

// HostService returns the name of the Service host names for a policy in
// namespace: host is the name, or <name>.<namespace> followed by nothing,
// .svc, .svc.cluster.local or .mesh. It returns an error saying how to
// write it otherwise.
func HostService(host, namespace string) (string, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, suffix := range []string{hostSuffixOSM, ".svc", hostSuffixMesh} {
		if strings.HasSuffix(h, suffix) {
			h = strings.TrimSuffix(h, suffix)
			break
		}
	}
	name, ns, qualified := strings.Cut(h, ".")
	if err := mesh.ValidateLabel("service name", name); err != nil || strings.Contains(ns, ".") {
		return "", fmt.Errorf("%q is not a Service's host: want its name, or %s.%s%s or %s.%s%s", host, cmpOr(name, "NAME"), namespace, hostSuffixOSM, cmpOr(name, "NAME"), namespace, hostSuffixMesh)
	}
	if qualified && ns != namespace {
		return "", fmt.Errorf("%q is a Service of namespace %q: an UpstreamTrafficSetting governs Services of its own namespace (%q), as in OSM: create it in namespace %q", host, ns, namespace, ns)
	}
	return name, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ValidateUpstreamTrafficSetting checks an UpstreamTrafficSetting's spec,
// in namespace, by OSM's CRD and webhook and by the data planes' bounds.
func ValidateUpstreamTrafficSetting(c Checker, namespace string, s *UpstreamTrafficSettingSpec) {
	if s.Host == "" {
		c.Errorf("spec.host", "missing: name the Service, such as %q or %q", "bookstore", "bookstore."+namespace+hostSuffixOSM)
	} else if _, err := HostService(s.Host, namespace); err != nil {
		c.Errorf("spec.host", "%v", err)
	}
	if s.ConnectionSettings == nil && s.RateLimit == nil && len(s.HTTPRoutes) == 0 {
		c.Warnf("spec", "sets nothing: add connectionSettings, rateLimit or httpRoutes")
	}
	if cs := s.ConnectionSettings; cs != nil {
		if t := cs.TCP; t != nil {
			checkLimit(c, "spec.connectionSettings.tcp.maxConnections", t.MaxConnections)
			checkDuration(c, "spec.connectionSettings.tcp.connectTimeout", t.ConnectTimeout, "5s", minDuration, maxConnectTimeout, false)
		}
		if h := cs.HTTP; h != nil {
			checkLimit(c, "spec.connectionSettings.http.maxRequests", h.MaxRequests)
			checkIntPtr(c, "spec.connectionSettings.http.maxRequestsPerConnection", h.MaxRequestsPerConnection, 0, maxUint32)
			checkLimit(c, "spec.connectionSettings.http.maxPendingRequests", h.MaxPendingRequests)
			checkLimit(c, "spec.connectionSettings.http.maxRetries", h.MaxRetries)
		}
	}
	if rl := s.RateLimit; rl != nil {
		if l := rl.Local; l != nil {
			if t := l.TCP; t != nil {
				f := "spec.rateLimit.local.tcp"
				checkRange(c, f+".connections", t.Connections, 1, maxUint32)
				checkUnit(c, f+".unit", t.Unit)
				if checkRange(c, f+".burst", t.Burst, 0, maxUint32) && t.Connections+t.Burst > maxUint32 {
					c.Errorf(f+".burst", "connections plus burst is %d, more than %d: lower burst", t.Connections+t.Burst, maxUint32)
				}
			}
			if l.HTTP != nil {
				checkHTTPRateLimit(c, "spec.rateLimit.local.http", l.HTTP)
			}
			if l.TCP == nil && l.HTTP == nil {
				c.Warnf("spec.rateLimit.local", "sets no limit: add tcp or http")
			}
		}
		if rl.Global != nil {
			c.Warnf("spec.rateLimit.global", "ignored: the mesh runs no global rate limit service; use rateLimit.local, which the Service's own proxies enforce")
		}
	}
	if len(s.HTTPRoutes) > maxHTTPRoutes {
		c.Errorf("spec.httpRoutes", "%d routes, more than %d", len(s.HTTPRoutes), maxHTTPRoutes)
	}
	seen := map[string]int{}
	for i, r := range s.HTTPRoutes {
		f := fmt.Sprintf("spec.httpRoutes[%d]", i)
		if r.Path == "" {
			c.Errorf(f+".path", "missing: give the path, a regular expression such as /books/.*")
		} else {
			c.CheckRegex(f+".path", r.Path)
			if j, ok := seen[r.Path]; ok {
				c.Errorf(f+".path", "%q is also spec.httpRoutes[%d]'s: give each path once", r.Path, j)
			}
			seen[r.Path] = i
		}
		if r.RateLimit == nil || r.RateLimit.Local == nil {
			if r.RateLimit == nil || r.RateLimit.Global == nil {
				c.Warnf(f, "sets no rate limit: add rateLimit.local")
			}
		} else {
			checkHTTPRateLimit(c, f+".rateLimit.local", r.RateLimit.Local)
		}
		if r.RateLimit != nil && r.RateLimit.Global != nil {
			c.Warnf(f+".rateLimit.global", "ignored: the mesh runs no global rate limit service; use rateLimit.local")
		}
	}
}

// checkLimit checks a circuit breaker's limit as OSM accepted it (0 to
// 2^32-1), warning of 0, which refuses every call.
func checkLimit(c Checker, field string, n *int) {
	if n == nil {
		return
	}
	if checkRange(c, field, *n, 0, maxUint32) && *n == 0 {
		c.Warnf(field, "0 refuses every connection or request: remove it for no limit, or give a positive limit")
	}
}

func checkUnit(c Checker, field, u string) {
	if !slices.Contains(rateLimitUnits, u) {
		c.Errorf(field, "%q is not a unit: want second, minute or hour%s", u, c.DidYouMean(u, rateLimitUnits))
	}
}

// headerName is what Envoy accepts as a header name to add.
var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_|~` + "`" + `]+$`)

func checkHTTPRateLimit(c Checker, f string, h *HTTPLocalRateLimitSpec) {
	checkRange(c, f+".requests", h.Requests, 1, maxUint32)
	checkUnit(c, f+".unit", h.Unit)
	if checkRange(c, f+".burst", h.Burst, 0, maxUint32) && h.Requests+h.Burst > maxUint32 {
		c.Errorf(f+".burst", "requests plus burst is %d, more than %d: lower burst", h.Requests+h.Burst, maxUint32)
	}
	if h.ResponseStatusCode != 0 {
		checkRange(c, f+".responseStatusCode", h.ResponseStatusCode, 400, 599)
	}
	if len(h.ResponseHeadersToAdd) > maxHeadersToAdd {
		c.Errorf(f+".responseHeadersToAdd", "%d headers, more than %d", len(h.ResponseHeadersToAdd), maxHeadersToAdd)
	}
	for i, hv := range h.ResponseHeadersToAdd {
		hf := fmt.Sprintf("%s.responseHeadersToAdd[%d]", f, i)
		checkHeaderName(c, hf+".name", hv.Name)
		switch {
		case hv.Value == "":
			c.Errorf(hf+".value", "missing: give the header's value")
		case len(hv.Value) > maxHeaderValueLen:
			c.Errorf(hf+".value", "%d bytes, more than %d", len(hv.Value), maxHeaderValueLen)
		case strings.ContainsAny(hv.Value, "\r\n\x00"):
			c.Errorf(hf+".value", "contains a line break or NUL, which no header value may: remove it")
		}
	}
}

func checkHeaderName(c Checker, f, name string) {
	switch {
	case name == "":
		c.Errorf(f, "missing: give the header's name")
	case len(name) > maxHeaderNameLength:
		c.Errorf(f, "%d bytes, more than %d", len(name), maxHeaderNameLength)
	case !headerName.MatchString(name):
		c.Errorf(f, "%q is not a header name: use letters, digits and - (such as x-request-id)", name)
	}
}

// RetryOnList splits OSM's comma list of retry conditions.
func RetryOnList(s string) []string {
	var out []string
	for t := range strings.SplitSeq(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// ValidateRetry checks an OSM Retry's spec, its namespaces defaulted.
func ValidateRetry(c Checker, s *RetrySpec) {
	checkSrcDst(c, "spec.source", s.Source, kindServiceAccount, "service account")
	if len(s.Destinations) == 0 {
		c.Errorf("spec.destinations", "no destinations: add at least one {kind: Service, name: ..., namespace: ...}")
	}
	if len(s.Destinations) > maxDestinations {
		c.Errorf("spec.destinations", "%d destinations, more than %d", len(s.Destinations), maxDestinations)
	}
	seen := map[RetrySrcDstSpec]int{}
	for i, d := range s.Destinations {
		f := fmt.Sprintf("spec.destinations[%d]", i)
		checkSrcDst(c, f, d, kindService, "service name")
		if j, ok := seen[d]; ok {
			c.Errorf(f, "also spec.destinations[%d]: list each destination once", j)
		}
		seen[d] = i
	}
	p := s.RetryPolicy
	const f = "spec.retryPolicy"
	all := slices.Concat(httpRetryOn, grpcRetryOn)
	if strings.TrimSpace(p.RetryOn) == "" {
		c.Errorf(f+".retryOn", "missing: give Envoy's comma-separated conditions, such as \"connect-failure,refused-stream\" or \"5xx\"")
	} else {
		on := RetryOnList(p.RetryOn)
		checkRetryOn(c, f+".retryOn", on, all, false)
		for _, t := range on {
			if t == "retriable-status-codes" || t == "retriable-headers" {
				c.Warnf(f+".retryOn", "%q retries nothing here: a Retry cannot give the status codes or headers it needs; use 5xx or gateway-error", t)
			}
		}
	}
	if p.PerTryTimeout == "" {
		c.Errorf(f+".perTryTimeout", "missing: give the time each attempt may take, such as \"1s\" (0s for no limit)")
	} else {
		checkDuration(c, f+".perTryTimeout", p.PerTryTimeout, "1s", minDuration, maxTimeout, true)
	}
	if p.NumRetries == nil {
		c.Errorf(f+".numRetries", "missing: give the number of retries, such as 3")
	} else {
		checkRange(c, f+".numRetries", *p.NumRetries, 0, maxOSMRetries)
	}
	if p.RetryBackoffBaseInterval == "" {
		c.Errorf(f+".retryBackoffBaseInterval", "missing: give the first backoff, such as \"25ms\" (the longest is ten times it)")
	} else {
		checkDuration(c, f+".retryBackoffBaseInterval", p.RetryBackoffBaseInterval, "25ms", minDuration, maxBackoff/10, false)
	}
}

func checkSrcDst(c Checker, f string, s RetrySrcDstSpec, kind, what string) {
	if s.Kind != kind {
		c.Errorf(f+".kind", "%q is not supported here: want %s", s.Kind, kind)
	}
	if err := mesh.ValidateLabel(what, s.Name); err != nil {
		c.Errorf(f+".name", "%v", err)
	}
	if err := mesh.ValidateLabel("namespace", s.Namespace); err != nil {
		c.Errorf(f+".namespace", "%v", err)
	}
}

// DefaultRetrySpec fills a Retry's empty namespaces with the policy's.
func DefaultRetrySpec(namespace string, s *RetrySpec) {
	if s.Source.Namespace == "" {
		s.Source.Namespace = namespace
	}
	for i := range s.Destinations {
		if s.Destinations[i].Namespace == "" {
			s.Destinations[i].Namespace = namespace
		}
	}
}
