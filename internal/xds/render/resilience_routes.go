package render

// Failure handling of calls (issue 62): what one caller's effective
// policy for a port of a Service (spec's resilience.Route) makes of its
// outbound routes: the request and idle timeouts, the retry, the hash
// policy of a ring hash and fault injection. A Retry (OSM) names a
// caller, so the routes of a caller it governs are another resource,
// named with "|retry=<ns>/<name>"; everything else of a Route is the
// called Service's and every caller's.
//
// An HTTPRoute's or GRPCRoute's own timeouts and retry win over these
// (gatewayRoute). gRPC gets what every proxyless client honours: the
// request timeout a policy sets (not the default) as max_stream_duration, the retry on gRPC status names
// with num_retries >= 1 and no per-try timeout, a header hash policy, and
// the fault filter's config as a bare Any with its percentages.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfaultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Envoy's (and gRPC's) defaults a route leaves out.
const (
	envoyRouteTimeout = 15 * time.Second
	envoyBackoffBase  = 25 * time.Millisecond
)

// grpcRetryOn are the retry conditions proxyless gRPC clients honour
// (gRFC A44); they ignore the others, and retry nothing if none is left.
var grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// setCall sets o's call policy, the key of what it renders, and the
// Retry naming the caller, if one governs the retry.
func (o *outbound) setCall(r resilience.Route) {
	o.call = r
	if r.Retry != nil {
		if name, ok := strings.CutPrefix(string(r.Retry.Source), resilience.KindRetry+" "); ok {
			o.retrySrc = name
		}
	}
	o.callKey = callKeyOf(r, o.retrySrc)
}

// callKeyOf is a text of everything rendering takes from r (not the
// sources): equal keys render equal routes.
func callKeyOf(r resilience.Route, retrySrc string) string {
	if r == (resilience.Route{}) && retrySrc == "" {
		return ""
	}
	var b strings.Builder
	if t := r.RequestTimeout; t != nil {
		fmt.Fprintf(&b, "req=%d/%t;", t.Duration, t.Source == resilience.SourceDefault)
	}
	if t := r.IdleTimeout; t != nil {
		fmt.Fprintf(&b, "idle=%d;", t.Duration)
	}
	if x := r.Retry; x != nil {
		fmt.Fprintf(&b, "retry=%s/%d/%d/%d/%d/%s;", strings.Join(x.RetryOn, ","), x.NumRetries, x.PerTryTimeout, x.BackoffBase, x.BackoffMax, retrySrc)
	}
	if f := r.Fault; f != nil {
		if d := f.Delay; d != nil {
			fmt.Fprintf(&b, "delay=%d/%d;", d.Fixed, d.PerMillion)
		}
		if a := f.Abort; a != nil {
			fmt.Fprintf(&b, "abort=%d/%d/%d;", a.HTTPStatus, a.GRPCStatus, a.PerMillion)
		}
		b.WriteString("fault;")
	}
	if h := r.HashPolicy; h != nil {
		for _, on := range h.HashOn {
			fmt.Fprintf(&b, "hash=%q/%v;", on.Header, on.SourceIP)
			if c := on.Cookie; c != nil {
				fmt.Fprintf(&b, "cookie=%q/%d/%q;", c.Name, c.TTL, c.Path)
			}
		}
	}
	return b.String()
}

// applyCall sets the caller's policy on the route rt and its action a,
// for flavour f, but the timeout and retry when the route has its own
// (ownTimeout, ownRetry: an HTTPRoute's or GRPCRoute's, which win).
func applyCall(rt *routev3.Route, a *routev3.RouteAction, o outbound, f Flavor, ownTimeout, ownRetry bool) {
	r := o.call
	if t := r.RequestTimeout; t != nil && !ownTimeout {
		switch {
		case f == GRPC && t.Source == resilience.SourceDefault:
			// MeshConfig's default (15s on http ports) is Envoy's own
			// route timeout; gRPC has none, and C-core 1.51 ends calls
			// with a max_stream_duration within milliseconds: proxyless
			// callers get a request timeout from a policy only.
		case f == GRPC && t.Duration > 0:
			a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(t.Duration)}
		case f != GRPC && (t.Duration != envoyRouteTimeout || a.Timeout != nil):
			a.Timeout = durationpb.New(t.Duration)
		}
	}
	if t := r.IdleTimeout; t != nil && f != GRPC {
		a.IdleTimeout = durationpb.New(t.Duration)
	}
	if x := r.Retry; x != nil && !ownRetry {
		a.RetryPolicy = retryPolicyOf(x, f)
	}
	if h := r.HashPolicy; h != nil {
		a.HashPolicy = hashPolicyOf(h, f)
	}
	if r.Fault != nil {
		if rt.TypedPerFilterConfig == nil {
			rt.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		rt.TypedPerFilterConfig[faultFilter] = mustAny(faultOf(r.Fault))
	}
}

// retryPolicyOf is x for flavour f; nil when it retries nothing there.
func retryPolicyOf(x *resilience.Retry, f Flavor) *routev3.RetryPolicy {
	on := x.RetryOn
	if f == GRPC {
		on = slices.DeleteFunc(slices.Clone(on), func(t string) bool { return !slices.Contains(grpcRetryOn, t) })
	}
	if x.NumRetries == 0 || len(on) == 0 {
		return nil // gRPC NACKs num_retries 0; no condition left: no retry
	}
	p := &routev3.RetryPolicy{RetryOn: strings.Join(on, ","), NumRetries: wrapperspb.UInt32(x.NumRetries)}
	if x.PerTryTimeout > 0 && f != GRPC {
		p.PerTryTimeout = durationpb.New(x.PerTryTimeout)
	}
	if x.BackoffBase != envoyBackoffBase || x.BackoffMax != 10*x.BackoffBase {
		p.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(x.BackoffBase), MaxInterval: durationpb.New(x.BackoffMax)}
	}
	return p
}

// hashPolicyOf is what a ring hash hashes: Envoy every kind, gRPC the
// headers (it ignores the others).
func hashPolicyOf(h *resilience.HashPolicy, f Flavor) []*routev3.RouteAction_HashPolicy {
	var out []*routev3.RouteAction_HashPolicy
	for _, on := range h.HashOn {
		switch {
		case on.Header != "":
			out = append(out, &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: on.Header}}})
		case f == GRPC:
		case on.SourceIP:
			out = append(out, &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}})
		case on.Cookie != nil:
			c := &routev3.RouteAction_HashPolicy_Cookie{Name: on.Cookie.Name, Path: on.Cookie.Path}
			if on.Cookie.TTL > 0 {
				c.Ttl = durationpb.New(on.Cookie.TTL)
			}
			out = append(out, &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: c}})
		}
	}
	return out
}

// faultOf is the fault filter's per-route config: every delay and abort
// with its percentage (grpc-js NACKs one without).
func faultOf(x *resilience.Fault) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := x.Delay; d != nil {
		out.Delay = &commonfaultv3.FaultDelay{FaultDelaySecifier: &commonfaultv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d.Fixed)}, Percentage: fraction(d.PerMillion)}
	}
	if a := x.Abort; a != nil {
		out.Abort = &faultv3.FaultAbort{Percentage: fraction(a.PerMillion)}
		if a.GRPCStatus != 0 {
			out.Abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: a.GRPCStatus}
		} else {
			out.Abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: a.HTTPStatus}
		}
	}
	return out
}

// fraction is n per million, as a percentage when it is a whole one.
func fraction(n uint32) *typev3.FractionalPercent {
	if n%10000 == 0 {
		return &typev3.FractionalPercent{Numerator: n / 10000, Denominator: typev3.FractionalPercent_HUNDRED}
	}
	return &typev3.FractionalPercent{Numerator: n, Denominator: typev3.FractionalPercent_MILLION}
}

// mustAny packs m (a message render builds, which always marshals).
func mustAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic(fmt.Sprintf("render: marshal %T: %v", m, err))
	}
	return a
}

// faultHTTPFilter is the fault filter of a listener whose routes inject
// faults: empty, each route says what (typed_per_filter_config).
var faultHTTPFilter = &hcmv3.HttpFilter{Name: faultFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: packConstant(&faultv3.HTTPFault{})}}
