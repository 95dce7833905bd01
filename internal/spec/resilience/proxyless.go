package resilience

// What proxyless gRPC clients do with each field of the policies: the
// support matrix, as data. Rendering's gRPC flavour sends a field when
// a client honours it and none would refuse it (a NACK would drop the
// whole cluster or route configuration); render's tests check that it
// agrees with this table. apply warns, per field, of what the
// proxyless callers of a Service's grpc ports ignore or replace, and
// docs/operator-guide.md's matrix is this table (a test compares them).
//
// The verdicts are the clients' as the mesh configures them: read from
// their sources (gRPC-Go 1.85, the C-core 1.51.1 of Debian 12's
// python3-grpcio, grpc-js-xds 1.14), and for the request timeout seen by
// running them (e2e TestPolyglotResilience).

import (
	"fmt"
	"slices"
	"strings"
)

// Client is a proxyless gRPC xDS client the mesh supports.
type Client int

// The proxyless clients, in the order of Support.Verdicts.
const (
	GRPCGo Client = iota // gRPC-Go 1.85
	CCore                // gRPC C-core 1.51 (Debian 12's python3-grpcio)
	GRPCJS               // grpc-js-xds 1.14
	numClients
)

// Clients are the proxyless clients, in the order of Support.Verdicts.
var Clients = [numClients]Client{GRPCGo, CCore, GRPCJS}

func (c Client) String() string {
	return [...]string{"gRPC-Go 1.85", "C-core 1.51", "grpc-js 1.14"}[c]
}

// Verdict is what a proxyless client does with a field the mesh's
// policy sets.
type Verdict int

const (
	// Honoured: the client applies the field as Envoy does.
	Honoured Verdict = iota + 1
	// Ignored: the field would have no effect; rendering leaves it out.
	Ignored
	// Replaced: a client would refuse the field (NACK the cluster), so
	// rendering sends it to none, and the client does Notes instead.
	Replaced
	// Misapplied: rendering sends the field, which other clients
	// honour, and this client gets it wrong (Notes says how).
	Misapplied
)

func (v Verdict) String() string {
	switch v {
	case Honoured:
		return "honoured"
	case Ignored:
		return "ignored"
	case Replaced:
		return "replaced"
	case Misapplied:
		return "misapplied"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Support is what the proxyless clients do with one field of a
// BackendTrafficPolicy's spec (the other kinds' fields map to these).
type Support struct {
	// Field is the field's path under spec, and what it is when the
	// path alone does not say (the docs' first column).
	Field string
	// Verdicts are gRPC-Go's, C-core's and grpc-js's.
	Verdicts [numClients]Verdict
	// Notes qualify a client's verdict: what it does instead (Replaced,
	// Misapplied), or a limit of what it honours.
	Notes [numClients]string
	// Proxyless is what apply's warning says the proxyless callers do,
	// after "proxyless gRPC callers of <ports> " (empty: no warning).
	Proxyless string
	// Envoy is what the warning says Envoy callers do, after "Envoy
	// callers ".
	Envoy string
}

// Rendered reports whether rendering sends the field to proxyless gRPC
// clients: when a client honours it and none refuses it.
func (s Support) Rendered() bool {
	return slices.ContainsFunc(s.Verdicts[:], func(v Verdict) bool { return v == Honoured || v == Misapplied }) &&
		!slices.Contains(s.Verdicts[:], Replaced)
}

// Cell is what the docs' matrix says of client c.
func (s Support) Cell(c Client) string {
	n := s.Notes[c]
	switch s.Verdicts[c] {
	case Honoured:
		if n != "" {
			return "yes (" + n + ")"
		}
		return "yes"
	case Ignored:
		return "ignored"
	}
	return n
}

// The fields of the matrix.
const (
	FieldConnectTimeout           = "timeouts.connect"
	FieldRequestTimeout           = "timeouts.request"
	FieldIdleTimeout              = "timeouts.idle"
	FieldRetryAttempts            = "retry.attempts"
	FieldRetryOnGRPC              = "retry.retryOn: gRPC status names"
	FieldRetryOnOther             = "retry.retryOn: the other conditions"
	FieldPerTryTimeout            = "retry.perTryTimeout"
	FieldBackoff                  = "retry.backoff"
	FieldRetryBudget              = "retry.budget"
	FieldMaxConnections           = "circuitBreaker.maxConnections"
	FieldMaxPendingRequests       = "circuitBreaker.maxPendingRequests"
	FieldMaxRequests              = "circuitBreaker.maxRequests"
	FieldMaxRetries               = "circuitBreaker.maxRetries"
	FieldMaxRequestsPerConnection = "circuitBreaker.maxRequestsPerConnection"
	FieldConsecutiveErrors        = "outlierDetection.consecutiveErrors"
	FieldConsecutiveGatewayErrors = "outlierDetection.consecutiveGatewayErrors"
	FieldConsecutiveLocalOrigin   = "outlierDetection.consecutiveLocalOriginFailures"
	FieldEjection                 = "outlierDetection.interval, baseEjectionTime, maxEjectionTime, maxEjectionPercent"
	FieldSuccessRate              = "outlierDetection.successRate"
	FieldFailurePercentage        = "outlierDetection.failurePercentage"
	FieldLeastRequest             = "loadBalancer.type: LeastRequest, leastRequest"
	FieldRingHash                 = "loadBalancer.type: RingHash, ringHash"
	FieldHashOnHeader             = "loadBalancer.hashOn[].header"
	FieldHashOnSourceIP           = "loadBalancer.hashOn[].sourceIP"
	FieldHashOnCookie             = "loadBalancer.hashOn[].cookie"
	FieldFaultDelay               = "faultInjection.delay"
	FieldFaultAbort               = "faultInjection.abort"
)

func all(v Verdict) [numClients]Verdict { return [numClients]Verdict{v, v, v} }

const (
	ignoreIt       = "ignore it"
	onlyEjectors   = "ignore it: they eject by successRate and failurePercentage only (gRFC A50)"
	onlyAttempts   = "ignore it: only attempts bounds their retries"
	hashHeaders    = "ignore it: they hash headers only, and a call with no header to hash goes to a random backend"
	grpcRetryNames = "cancelled, deadline-exceeded, internal, resource-exhausted, unavailable"
)

var proxylessSupport = []Support{
	{Field: FieldConnectTimeout, Verdicts: all(Ignored), Proxyless: "ignore it: gRPC's own connect timeout (20s) applies"},
	{Field: FieldRequestTimeout, Verdicts: [numClients]Verdict{Honoured, Misapplied, Honoured},
		Notes:     [numClients]string{CCore: "ends every call within milliseconds (DEADLINE_EXCEEDED)"},
		Proxyless: "get it as max_stream_duration: gRPC-Go and grpc-js end a call at it, but C-core 1.51 (Debian 12's python3-grpcio) ends every call far sooner, within milliseconds, with DEADLINE_EXCEEDED: give a Service that C-core callers call no request timeout",
		Envoy:     "end a call at it"},
	{Field: FieldIdleTimeout, Verdicts: all(Ignored), Proxyless: "ignore it: gRPC has no idle timeout for a call"},
	{Field: FieldRetryAttempts, Verdicts: all(Honoured), Notes: [numClients]string{"at most 4", "at most 4", "at most 4"},
		Proxyless: "make at most 5 attempts (4 retries): gRPC caps a call's attempts at 5", Envoy: "make every retry"},
	{Field: FieldRetryOnGRPC, Verdicts: all(Honoured)},
	{Field: FieldRetryOnOther, Verdicts: all(Ignored),
		Proxyless: "ignore them: they retry on gRPC status names only (" + grpcRetryNames + "), and gRPC itself retries a call that never left the client",
		Envoy:     "honour them"},
	{Field: FieldPerTryTimeout, Verdicts: all(Ignored), Proxyless: "ignore it: a retry may take what is left of the call's deadline"},
	{Field: FieldBackoff, Verdicts: all(Honoured)},
	{Field: FieldRetryBudget, Verdicts: all(Ignored), Proxyless: onlyAttempts},
	{Field: FieldMaxConnections, Verdicts: all(Ignored), Proxyless: "ignore it: a gRPC client keeps one connection to each backend"},
	{Field: FieldMaxPendingRequests, Verdicts: all(Ignored), Proxyless: "ignore it: only maxRequests limits their calls"},
	{Field: FieldMaxRequests, Verdicts: all(Honoured)},
	{Field: FieldMaxRetries, Verdicts: all(Ignored), Proxyless: onlyAttempts},
	{Field: FieldMaxRequestsPerConnection, Verdicts: all(Ignored), Proxyless: "ignore it: a gRPC client keeps its connection to a backend however many calls it carried"},
	{Field: FieldConsecutiveErrors, Verdicts: all(Ignored), Proxyless: onlyEjectors},
	{Field: FieldConsecutiveGatewayErrors, Verdicts: all(Ignored), Proxyless: onlyEjectors},
	{Field: FieldConsecutiveLocalOrigin, Verdicts: all(Ignored), Proxyless: onlyEjectors},
	{Field: FieldEjection, Verdicts: all(Honoured), Notes: [numClients]string{"with a detector they honour", "with a detector they honour", "with a detector they honour"}},
	{Field: FieldSuccessRate, Verdicts: all(Honoured)},
	{Field: FieldFailurePercentage, Verdicts: all(Honoured)},
	{Field: FieldLeastRequest, Verdicts: all(Replaced), Notes: [numClients]string{"round robin", "round robin", "round robin"},
		Proxyless: "use round robin (C-core 1.51 and grpc-js refuse least request, so no proxyless client is sent it)", Envoy: "use least request"},
	{Field: FieldRingHash, Verdicts: all(Honoured), Notes: [numClients]string{GRPCGo: "a ring of at most 4096", GRPCJS: "a ring of at most 4096"}},
	{Field: FieldHashOnHeader, Verdicts: all(Honoured)},
	{Field: FieldHashOnSourceIP, Verdicts: all(Ignored), Proxyless: hashHeaders},
	{Field: FieldHashOnCookie, Verdicts: all(Ignored), Proxyless: hashHeaders},
	// grpc-js-xds 1.14.1 drops a route update that only adds keys to
	// the one it holds (seen running: TestPolyglotResilience).
	{Field: FieldFaultDelay, Verdicts: all(Honoured), Notes: [numClients]string{GRPCJS: "a fault added to a route without one applies at its next other change"}},
	{Field: FieldFaultAbort, Verdicts: all(Honoured), Notes: [numClients]string{GRPCJS: "a fault added to a route without one applies at its next other change"}},
}

// ProxylessSupport returns the support matrix, one Support per field.
func ProxylessSupport() []Support { return slices.Clone(proxylessSupport) }

// SupportOf returns the Support of field (one of the Field constants).
func SupportOf(field string) Support {
	i := slices.IndexFunc(proxylessSupport, func(s Support) bool { return s.Field == field })
	if i < 0 {
		panic("resilience: no support row " + field)
	}
	return proxylessSupport[i]
}

// proxylessWarner warns of what the proxyless gRPC callers of callers
// (such as `Service web's grpc port "rpc"`) do not honour.
type proxylessWarner struct {
	c       Checker
	callers string
}

// say warns, at field (a path of the policy) set to value ("" for a
// structure), with row's texts.
func (w proxylessWarner) say(field, value, row string) {
	s := SupportOf(row)
	w.sayf(field, value, s.Proxyless, cmpOr(s.Envoy, "honour it"))
}

func (w proxylessWarner) sayf(field, value, proxyless, envoy string) {
	msg := fmt.Sprintf("proxyless gRPC callers of %s %s; Envoy callers %s", w.callers, proxyless, envoy)
	if value != "" {
		msg = value + ": " + msg
	}
	w.c.Warnf(field, "%s", msg)
}

// maxProxylessRetries is gRPC's cap: 5 attempts (gRFC A6), the first
// and 4 retries.
const maxProxylessRetries = 4

// retryOn warns of the retry conditions on (at field, the list as the
// policy writes it: value) that proxyless callers ignore, and reports
// whether any is left for them.
func (w proxylessWarner) retryOn(field, value string, on []string) bool {
	var other []string
	for _, t := range on {
		if !slices.Contains(grpcRetryOn, t) {
			other = append(other, t)
		}
	}
	switch {
	case len(other) == len(on):
		w.sayf(field, value, "retry nothing: they retry on gRPC status names only ("+grpcRetryNames+"), and gRPC itself retries a call that never left the client; add unavailable to retry their calls too", "honour them")
		return false
	case len(other) > 0:
		w.say(field, strings.Join(other, ", "), FieldRetryOnOther)
	}
	return true
}

// attempts warns of more retries than proxyless callers make.
func (w proxylessWarner) attempts(field string, n int) {
	if n > maxProxylessRetries {
		w.say(field, fmt.Sprint(n), FieldRetryAttempts)
	}
}

// WarnProxyless warns, once per field, of what the proxyless gRPC
// callers of callers (the grpc ports the policy governs, such as
// `Service web's grpc port "rpc"`) ignore or replace of a
// BackendTrafficPolicy's spec.
func WarnProxyless(c Checker, s *BackendTrafficPolicySpec, callers string) {
	w := proxylessWarner{c: c, callers: callers}
	if t := s.Timeouts; t != nil {
		if t.Connect != "" {
			w.say("spec.timeouts.connect", t.Connect, FieldConnectTimeout)
		}
		if duration(t.Request) > 0 {
			w.say("spec.timeouts.request", t.Request, FieldRequestTimeout)
		}
		if duration(t.Idle) > 0 {
			w.say("spec.timeouts.idle", t.Idle, FieldIdleTimeout)
		}
	}
	if r := s.Retry; r != nil {
		retries := r.Attempts != nil || r.RetryOn != nil || r.PerTryTimeout != "" || r.Backoff != nil
		left := true
		if r.RetryOn != nil {
			left = w.retryOn("spec.retry.retryOn", strings.Join(r.RetryOn, ", "), r.RetryOn)
		} else if retries {
			d := builtinRetry().RetryOn
			w.sayf("spec.retry", "", "retry nothing: retryOn is "+strings.Join(d, ", ")+" unless set, and they retry on gRPC status names only ("+grpcRetryNames+"); add unavailable to retryOn to retry their calls", "retry on "+strings.Join(d, ", "))
			left = false
		}
		if r.Attempts != nil && left {
			w.attempts("spec.retry.attempts", *r.Attempts)
		}
		if r.PerTryTimeout != "" && left {
			w.say("spec.retry.perTryTimeout", r.PerTryTimeout, FieldPerTryTimeout)
		}
		if r.Budget != nil {
			w.say("spec.retry.budget", "", FieldRetryBudget)
		}
	}
	if b := s.CircuitBreaker; b != nil {
		w.limits("spec.circuitBreaker.", map[string]*int{"maxConnections": b.MaxConnections, "maxPendingRequests": b.MaxPendingRequests,
			"maxRetries": b.MaxRetries, "maxRequestsPerConnection": b.MaxRequestsPerConnection})
	}
	if o := s.OutlierDetection; o != nil && !o.Disabled {
		w.outlierDetection("spec.outlierDetection", o)
	}
	if l := s.LoadBalancer; l != nil {
		if l.Type == LeastRequest {
			w.say("spec.loadBalancer.type", l.Type, FieldLeastRequest)
		}
		for i, h := range l.HashOn {
			f := fmt.Sprintf("spec.loadBalancer.hashOn[%d]", i)
			if h.SourceIP {
				w.say(f+".sourceIP", "", FieldHashOnSourceIP)
			}
			if h.Cookie != nil {
				w.say(f+".cookie", "", FieldHashOnCookie)
			}
		}
	}
}

// limits warns of the circuit breaker limits (by name under prefix)
// proxyless callers ignore, in the order of the matrix.
func (w proxylessWarner) limits(prefix string, set map[string]*int) {
	for _, name := range []string{"maxConnections", "maxPendingRequests", "maxRetries", "maxRequestsPerConnection"} {
		if n := set[name]; n != nil && *n != 0 {
			w.say(prefix+name, fmt.Sprint(*n), "circuitBreaker."+name)
		}
	}
}

// consecutiveDetectors names the consecutive detectors o sets, with
// their rows.
func consecutiveDetectors(o *OutlierDetectionSettings) (names, rows []string) {
	for _, d := range []struct {
		name, row string
		n         *int
	}{
		{"consecutiveErrors", FieldConsecutiveErrors, o.ConsecutiveErrors},
		{"consecutiveGatewayErrors", FieldConsecutiveGatewayErrors, o.ConsecutiveGatewayErrors},
		{"consecutiveLocalOriginFailures", FieldConsecutiveLocalOrigin, o.ConsecutiveLocalOriginFailures},
	} {
		if d.n != nil {
			names, rows = append(names, d.name), append(rows, d.row)
		}
	}
	return names, rows
}

// outlierDetection warns of the consecutive detectors of o (at field):
// proxyless callers ignore each, and eject nothing when o has no other.
func (w proxylessWarner) outlierDetection(field string, o *OutlierDetectionSettings) {
	names, rows := consecutiveDetectors(o)
	if len(names) == 0 {
		return
	}
	if o.SuccessRate == nil && o.FailurePercentage == nil {
		w.sayf(field, strings.Join(names, ", ")+" only",
			"eject no backend: they eject by successRate and failurePercentage only (gRFC A50), counting every failed call; add failurePercentage, such as {threshold: 50, minHosts: 2} (minHosts: how many backends must have had requestVolume calls), to eject for them too",
			"eject by "+strings.Join(names, ", "))
		return
	}
	for i, n := range names {
		w.say(field+"."+n, "", rows[i])
	}
}

// WarnProxylessUpstream warns of what the proxyless gRPC callers of
// callers ignore of an UpstreamTrafficSetting's spec, and of the rate
// limits that proxyless gRPC servers of the same ports do not enforce.
func WarnProxylessUpstream(c Checker, s *UpstreamTrafficSettingSpec, callers string) {
	w := proxylessWarner{c: c, callers: callers}
	if cs := s.ConnectionSettings; cs != nil {
		if t := cs.TCP; t != nil {
			if t.ConnectTimeout != "" {
				w.say("spec.connectionSettings.tcp.connectTimeout", t.ConnectTimeout, FieldConnectTimeout)
			}
			w.limits("spec.connectionSettings.tcp.", map[string]*int{"maxConnections": t.MaxConnections})
		}
		if h := cs.HTTP; h != nil {
			w.limits("spec.connectionSettings.http.", map[string]*int{"maxPendingRequests": h.MaxPendingRequests, "maxRetries": h.MaxRetries,
				"maxRequestsPerConnection": h.MaxRequestsPerConnection})
		}
	}
	server := func(field string) {
		c.Warnf(field, "proxyless gRPC servers of %s do not enforce it: gRPC servers have no local rate limit", callers)
	}
	if rl := s.RateLimit; rl != nil && rl.Local != nil && (rl.Local.TCP != nil || rl.Local.HTTP != nil) {
		server("spec.rateLimit.local")
	}
	for i, r := range s.HTTPRoutes {
		if r.RateLimit != nil && r.RateLimit.Local != nil {
			server(fmt.Sprintf("spec.httpRoutes[%d].rateLimit.local", i))
		}
	}
}

// WarnProxylessRetry warns of what the proxyless gRPC callers of
// callers ignore of an OSM Retry's spec (when its source calls them
// without a proxy).
func WarnProxylessRetry(c Checker, s *RetrySpec, callers string) {
	w := proxylessWarner{c: c, callers: callers}
	p := s.RetryPolicy
	if p.NumRetries != nil && *p.NumRetries == 0 {
		return // no retry for anyone
	}
	on := RetryOnList(p.RetryOn)
	if len(on) == 0 || !w.retryOn("spec.retryPolicy.retryOn", p.RetryOn, on) {
		return
	}
	if p.NumRetries != nil {
		w.attempts("spec.retryPolicy.numRetries", *p.NumRetries)
	}
	if duration(p.PerTryTimeout) > 0 {
		w.say("spec.retryPolicy.perTryTimeout", p.PerTryTimeout, FieldPerTryTimeout)
	}
}

// WarnProxylessDefaults warns of the MeshConfig defaults d (at field)
// that matter to the proxyless gRPC callers of callers (the mesh's grpc
// ports) and that they ignore: outlier detection given with no detector
// they honour. The built-in default (consecutive gateway errors) is
// documented instead: proxyless callers get no default outlier
// detection.
func WarnProxylessDefaults(c Checker, field string, d *Defaults, callers string) {
	if d == nil || d.OutlierDetection == nil || d.OutlierDetection.Disabled {
		return
	}
	if o := d.Resolve().OutlierDetection; o.SuccessRate == nil && o.FailurePercentage == nil {
		proxylessWarner{c: c, callers: callers}.outlierDetection(field+".outlierDetection", o)
	}
}
