// Package resilienceview answers "what governs a call": a Service's
// effective failure handling as `osm-server get resilience` and the
// dashboard show it. It owns the wire type of that answer (the body of
// GET /api/v1/spec/services/{namespace}/{name}/resilience, shared by the
// server and the CLI), its construction from a spec snapshot (Of) and its
// table (WriteTable).
//
// It reads spec's queries (ServiceResilience, CallResilience, the
// Upstreams of each caller, GatewayRoutes) and never works out a policy
// itself: precedence is package resilience's. It must not import the xDS
// server, rendering, the HTTP edge or any client: the server's handler and
// the CLI import it, not the other way.
package resilienceview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Service is a Service's effective failure handling: what every caller
// shares (Cluster) and what each caller gets on each port (Calls).
type Service struct {
	// Service is namespace/name.
	Service string `json:"service"`
	// Version is the specification's version this was worked out from.
	Version uint64 `json:"version"`
	// Cluster are the parts every caller's proxy shares: the connect
	// timeout, circuit breaker, retry budget, outlier detection and load
	// balancer.
	Cluster []Part `json:"cluster"`
	// Calls are, for each Service that may call this one and each port,
	// the parts of those calls: timeouts, retry, fault injection and the
	// hash policy. Ordered by caller, then port.
	Calls []Call `json:"calls"`
	// CallsTruncated is set when there were more than MaxCalls.
	CallsTruncated bool `json:"callsTruncated,omitempty"`
}

// Part is one part of the effective policy: its name as the policies
// spell it, what it is in words, and the policy that set it ("MeshConfig
// default", "BackendTrafficPolicy shop/slow", ...). Source is empty when
// nothing sets the part: the data plane's own default applies.
type Part struct {
	Part    string `json:"part"`
	Setting string `json:"setting"`
	Source  string `json:"source,omitempty"`
}

// Call is the failure handling of one caller Service's calls to one port.
type Call struct {
	// Caller is the calling Service's namespace/name, ServiceAccount the
	// account its workloads run as (policies such as OSM's Retry name
	// the account).
	Caller         string `json:"caller"`
	ServiceAccount string `json:"serviceAccount"`
	Port           int    `json:"port"`
	PortName       string `json:"portName,omitempty"`
	AppProtocol    string `json:"appProtocol"`
	// Parts are empty on a tcp port: a connection has no per-call
	// failure handling; the Cluster's parts apply.
	Parts []Part `json:"parts"`
	// Routes are the HTTPRoutes or GRPCRoutes routing these calls that
	// set their own timeouts or retry: for the calls a rule matches, the
	// rule's win over Parts.
	Routes []string `json:"routes,omitempty"`
}

// MaxCalls bounds the calls in one answer: a permissive mesh of 1,000
// Services with 3 ports each has 3,000 for every Service.
const MaxCalls = 2000

// The parts, as the policies name them.
const (
	PartConnectTimeout   = "connectTimeout"
	PartCircuitBreaker   = "circuitBreaker"
	PartRetryBudget      = "retryBudget"
	PartOutlierDetection = "outlierDetection"
	PartLoadBalancer     = "loadBalancer"
	PartRequestTimeout   = "requestTimeout"
	PartIdleTimeout      = "idleTimeout"
	PartRetry            = "retry"
	PartFault            = "faultInjection"
	PartHashPolicy       = "hashPolicy"
)

// Of returns the effective failure handling of svc in snap; false when
// snap has no such Service.
func Of(snap *spec.Snapshot, svc mesh.MeshService) (Service, bool) {
	info, ok := snap.Service(svc)
	if !ok {
		return Service{}, false
	}
	out := Service{Service: svc.String(), Version: snap.Version(), Cluster: ClusterParts(snap.ServiceResilience(svc)), Calls: []Call{}}
	for _, caller := range Callers(snap, svc) {
		for _, p := range info.Ports {
			if len(out.Calls) == MaxCalls {
				out.CallsTruncated = true
				return out, true
			}
			c := Call{Caller: caller.Service.String(), ServiceAccount: caller.ServiceAccount.Namespace + "/" + caller.ServiceAccount.Name,
				Port: p.Port, PortName: p.Name, AppProtocol: p.AppProtocol, Parts: []Part{}}
			if p.AppProtocol != "tcp" {
				c.Parts = RouteParts(snap.CallResilience(caller.ServiceAccount, svc, p.Port))
				c.Routes = overridingRoutes(snap, svc, p.Port, caller.Service.Namespace)
			}
			out.Calls = append(out.Calls, c)
		}
	}
	return out, true
}

// Callers returns the Services that may call svc (those whose account's
// Upstreams include it), ordered by namespace and name.
func Callers(snap *spec.Snapshot, svc mesh.MeshService) []spec.ServiceInfo {
	target, ok := snap.Service(svc)
	if !ok {
		return nil
	}
	calls := map[mesh.ServiceAccount]bool{}
	var out []spec.ServiceInfo
	for _, info := range snap.Services() {
		sa := info.ServiceAccount
		if sa == target.ServiceAccount {
			continue // a Service's own workloads reach it directly
		}
		may, seen := calls[sa]
		if !seen {
			// Permissive: every other account may (Upstreams would list
			// every Service for each of them).
			may = snap.Permissive() || slices.Contains(snap.Upstreams(sa), svc)
			calls[sa] = may
		}
		if may {
			out = append(out, info)
		}
	}
	return out
}

// overridingRoutes names the routes on port of svc, as callers in callerNS
// see them, whose rules set their own timeouts or retry.
func overridingRoutes(snap *spec.Snapshot, svc mesh.MeshService, port int, callerNS string) []string {
	rs, ok := snap.GatewayRoutes(svc, port, callerNS)
	if !ok {
		return nil
	}
	var out []string
	for _, r := range rs.Rules {
		if r.Timeouts != nil || r.Retry != nil {
			out = append(out, r.Route.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ClusterParts describes c, every part in a fixed order.
func ClusterParts(c resilience.Cluster) []Part {
	return []Part{
		timeoutPart(PartConnectTimeout, c.ConnectTimeout, "unset (Envoy 5s, gRPC 20s)"),
		part(PartCircuitBreaker, c.CircuitBreaker, circuitBreaker, "unset (1024 concurrent requests)", func(b *resilience.CircuitBreaker) resilience.Source { return b.Source }),
		part(PartRetryBudget, c.RetryBudget, retryBudget, "none", func(b *resilience.RetryBudget) resilience.Source { return b.Source }),
		part(PartOutlierDetection, c.OutlierDetection, outlierDetection, "off", func(o *resilience.OutlierDetection) resilience.Source { return o.Source }),
		part(PartLoadBalancer, c.LoadBalancer, loadBalancer, "RoundRobin", func(l *resilience.LoadBalancer) resilience.Source { return l.Source }),
	}
}

// RouteParts describes r, every part in a fixed order.
func RouteParts(r resilience.Route) []Part {
	return []Part{
		timeoutPart(PartRequestTimeout, r.RequestTimeout, "unset (Envoy 15s)"),
		timeoutPart(PartIdleTimeout, r.IdleTimeout, "unset (Envoy 5m)"),
		part(PartRetry, r.Retry, retry, "none", func(x *resilience.Retry) resilience.Source { return x.Source }),
		part(PartFault, r.Fault, fault, "none", func(f *resilience.Fault) resilience.Source { return f.Source }),
		part(PartHashPolicy, r.HashPolicy, func(h *resilience.HashPolicy) string { return hashOn(h.HashOn) }, "none", func(h *resilience.HashPolicy) resilience.Source { return h.Source }),
	}
}

// part describes v (unset: the data plane's default, in words).
func part[T any](name string, v *T, describe func(*T) string, unset string, source func(*T) resilience.Source) Part {
	if v == nil {
		return Part{Part: name, Setting: unset}
	}
	return Part{Part: name, Setting: describe(v), Source: string(source(v))}
}

func timeoutPart(name string, t *resilience.Timeout, unset string) Part {
	return part(name, t, func(t *resilience.Timeout) string {
		if t.Duration == 0 {
			return "none"
		}
		return dur(t.Duration)
	}, unset, func(t *resilience.Timeout) resilience.Source { return t.Source })
}

// dur writes d as time does, without its zero tails: 5m, not 5m0s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func limit(n uint32) string {
	if n == resilience.Unlimited {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func circuitBreaker(b *resilience.CircuitBreaker) string {
	s := "unlimited"
	if b.MaxConnections != resilience.Unlimited || b.MaxPendingRequests != resilience.Unlimited || b.MaxRequests != resilience.Unlimited || b.MaxRetries != resilience.Unlimited {
		s = fmt.Sprintf("maxConnections %s, maxPendingRequests %s, maxRequests %s, maxRetries %s",
			limit(b.MaxConnections), limit(b.MaxPendingRequests), limit(b.MaxRequests), limit(b.MaxRetries))
	}
	if b.MaxRequestsPerConnection > 0 {
		s += fmt.Sprintf(", maxRequestsPerConnection %d", b.MaxRequestsPerConnection)
	}
	return s
}

func retryBudget(b *resilience.RetryBudget) string {
	return fmt.Sprintf("%v%% of requests in flight, at least %d", b.Percent, b.MinRetryConcurrency)
}

func outlierDetection(o *resilience.OutlierDetection) string {
	var on []string
	for _, d := range []struct {
		n    uint32
		what string
	}{{o.Consecutive5xx, "consecutive 5xx"}, {o.ConsecutiveGatewayErrors, "consecutive gateway errors"}, {o.ConsecutiveLocalOriginFailures, "consecutive local failures"}} {
		if d.n > 0 {
			on = append(on, fmt.Sprintf("%d %s", d.n, d.what))
		}
	}
	if s := o.SuccessRate; s != nil {
		on = append(on, fmt.Sprintf("success rate below mean - %v stdev (%d hosts, %d requests)", float64(s.StdevFactor)/1000, s.MinHosts, s.RequestVolume))
	}
	if f := o.FailurePercentage; f != nil {
		on = append(on, fmt.Sprintf("failures over %d%% (%d hosts, %d requests)", f.Threshold, f.MinHosts, f.RequestVolume))
	}
	if len(on) == 0 {
		on = append(on, "no detector")
	}
	return fmt.Sprintf("%s; every %s, ejected %s (at most %s), at most %d%% of backends",
		strings.Join(on, ", "), dur(o.Interval), dur(o.BaseEjectionTime), dur(o.MaxEjectionTime), o.MaxEjectionPercent)
}

func loadBalancer(l *resilience.LoadBalancer) string {
	switch l.Type {
	case resilience.LeastRequest:
		return fmt.Sprintf("LeastRequest (best of %d)", l.ChoiceCount)
	case resilience.RingHash:
		s := fmt.Sprintf("RingHash (ring %d to %d)", l.MinimumRingSize, l.MaximumRingSize)
		if len(l.HashOn) > 0 {
			s += " on " + hashOn(l.HashOn)
		}
		return s
	}
	return l.Type
}

func hashOn(hs []resilience.HashOn) string {
	var out []string
	for _, h := range hs {
		switch {
		case h.Header != "":
			out = append(out, "header "+h.Header)
		case h.SourceIP:
			out = append(out, "source IP")
		case h.Cookie != nil:
			out = append(out, "cookie "+h.Cookie.Name)
		}
	}
	return strings.Join(out, ", ")
}

func retry(r *resilience.Retry) string {
	if r.NumRetries == 0 {
		return "none (numRetries 0)"
	}
	s := fmt.Sprintf("%d on %s, backoff %s to %s", r.NumRetries, strings.Join(r.RetryOn, ","), dur(r.BackoffBase), dur(r.BackoffMax))
	if r.PerTryTimeout > 0 {
		s += ", each try " + dur(r.PerTryTimeout)
	}
	return s
}

func percent(perMillion uint32) string {
	return fmt.Sprintf("%v%%", float64(perMillion)/10000)
}

func fault(f *resilience.Fault) string {
	var out []string
	if d := f.Delay; d != nil {
		out = append(out, fmt.Sprintf("delay %s on %s", dur(d.Fixed), percent(d.PerMillion)))
	}
	if a := f.Abort; a != nil {
		status := fmt.Sprintf("HTTP %d", a.HTTPStatus)
		if a.GRPCStatus != 0 || a.HTTPStatus == 0 {
			status = fmt.Sprintf("gRPC status %d", a.GRPCStatus)
		}
		out = append(out, fmt.Sprintf("abort with %s on %s", status, percent(a.PerMillion)))
	}
	return cmp.Or(strings.Join(out, "; "), "none")
}
