package render

// Inbound local rate limits (issue 62): an UpstreamTrafficSetting's
// rateLimit.local, enforced by the Service's own Envoy on its inbound
// listeners, as OSM v1.2 rendered it (pkg/envoy/generator/lds/ratelimit.go,
// rds/route_config.go):
//
//   - tcp: the network local_ratelimit filter on every inbound filter
//     chain, before the HTTP connection manager (HTTP ports) or after the
//     network RBAC filter (TCP ports), with the chain's stat prefix: a
//     token bucket of connections;
//   - http and httpRoutes: the HTTP local_ratelimit filter in the inbound
//     HCM after RBAC, without a bucket of its own (so it limits nothing by
//     itself), and the buckets in the inbound route configuration's
//     typed_per_filter_config: the Service's on the virtual host, each
//     httpRoutes entry's on a route of its own matching the entry's path
//     (before the catch-all), which Envoy takes instead of the virtual
//     host's for the requests it matches (the most specific wins).
//
// A bucket holds requests (or connections) plus burst tokens and gets
// requests more every unit; a request over it is answered with the
// status (Envoy's 429 unless another is set) and the headers to add. A
// limit the policy does not set is not rendered: the filters are present
// only on a Service that has one.
//
// Proxyless gRPC servers get none: gRPC's xDS server has no local rate
// limiting, and an HTTP filter it does not know on a server listener makes
// it refuse the listener.

import (
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	localratelimithttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	localratelimitnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/local_ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Extension names of the local rate limit filters.
const (
	networkRateLimitFilter = "envoy.filters.network.local_ratelimit"
	httpRateLimitFilter    = "envoy.filters.http.local_ratelimit"
)

// envoyRateLimitStatus is the status Envoy answers a limited request with
// when the config sets none.
const envoyRateLimitStatus = 429

// rateLimitKey is a text of everything rendering takes from rl (not its
// source): equal keys render equal inbound listeners and routes.
func rateLimitKey(rl *resilience.RateLimit) string {
	if rl == nil {
		return ""
	}
	var b strings.Builder
	if t := rl.TCP; t != nil {
		fmt.Fprintf(&b, "tcp=%d/%d/%d;", t.MaxTokens, t.TokensPerFill, t.FillInterval)
	}
	writeHTTP := func(l *resilience.HTTPRateLimit) {
		fmt.Fprintf(&b, "%d/%d/%d/%d", l.MaxTokens, l.TokensPerFill, l.FillInterval, l.Status)
		for _, h := range l.Headers {
			fmt.Fprintf(&b, "/%q=%q", h.Name, h.Value)
		}
		b.WriteString(";")
	}
	if rl.HTTP != nil {
		b.WriteString("http=")
		writeHTTP(rl.HTTP)
	}
	for _, r := range rl.Routes {
		fmt.Fprintf(&b, "route=%q/", r.PathRegex)
		writeHTTP(&r.Limit)
	}
	return b.String()
}

// limitsHTTP reports whether rl has request limits (the HTTP filter's).
func limitsHTTP(rl *resilience.RateLimit) bool {
	return rl != nil && (rl.HTTP != nil || len(rl.Routes) > 0)
}

// tokenBucket is b as Envoy's, leaving out a tokens_per_fill of 1 (its
// default).
func tokenBucket(b resilience.TokenBucket) *typev3.TokenBucket {
	tb := &typev3.TokenBucket{MaxTokens: b.MaxTokens, FillInterval: durationpb.New(b.FillInterval)}
	if b.TokensPerFill != 1 {
		tb.TokensPerFill = wrapperspb.UInt32(b.TokensPerFill)
	}
	return tb
}

// tcpRateLimitFilter is the network filter limiting the connections an
// inbound chain accepts to bucket.
func (b *builder) tcpRateLimitFilter(statPrefix string, bucket *resilience.TokenBucket) *listenerv3.Filter {
	return b.networkFilter(networkRateLimitFilter, &localratelimitnetv3.LocalRateLimit{StatPrefix: statPrefix, TokenBucket: tokenBucket(*bucket)})
}

// httpRateLimitHTTPFilter is the HTTP filter of an inbound HCM whose
// routes limit requests: no bucket of its own (its routes' configs have
// them), so it limits nothing by itself.
func (b *builder) httpRateLimitHTTPFilter(statPrefix string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: httpRateLimitFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: b.any(&localratelimithttpv3.LocalRateLimit{StatPrefix: statPrefix})}}
}

// everyRequest is a runtime fraction of 100%: OSM's filter_enabled and
// filter_enforced (Envoy's default is 0%, which limits nothing).
func everyRequest() *corev3.RuntimeFractionalPercent {
	return &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED}}
}

// httpRateLimitConfig is the per-route (or virtual host) config of the
// HTTP local rate limit filter holding l's bucket. On a gRPC port a
// limited call ends RESOURCE_EXHAUSTED, not Envoy's default UNAVAILABLE,
// which callers' retry policies retry (often on another backend, with
// its own bucket) and outlier detection may count.
func httpRateLimitConfig(statPrefix string, l *resilience.HTTPRateLimit, grpc bool) *localratelimithttpv3.LocalRateLimit {
	c := &localratelimithttpv3.LocalRateLimit{
		StatPrefix:                     statPrefix,
		TokenBucket:                    tokenBucket(l.TokenBucket),
		FilterEnabled:                  everyRequest(),
		FilterEnforced:                 everyRequest(),
		RateLimitedAsResourceExhausted: grpc,
	}
	if l.Status != envoyRateLimitStatus && l.Status != 0 {
		c.Status = &typev3.HttpStatus{Code: typev3.StatusCode(l.Status)}
	}
	for _, h := range l.Headers {
		c.ResponseHeadersToAdd = append(c.ResponseHeadersToAdd, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h.Name, Value: h.Value},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return c
}

// rateLimitedRoutes returns the routes an inbound route configuration
// (named name) has for rl before its catch-all: one per httpRoutes entry,
// matching the entry's path, with the action action() gives and the
// entry's bucket. rateLimitHost sets the Service's bucket on the virtual
// host.
func rateLimitedRoutes(name string, rl *resilience.RateLimit, grpc bool, action func() *routev3.Route_Route) []*routev3.Route {
	if rl == nil {
		return nil
	}
	out := make([]*routev3.Route, 0, len(rl.Routes))
	for i := range rl.Routes {
		r := &rl.Routes[i]
		id := "rate-limit-" + strconv.Itoa(i)
		out = append(out, &routev3.Route{
			Name:                 id,
			Match:                &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: r.PathRegex}}},
			Action:               action(),
			TypedPerFilterConfig: map[string]*anypb.Any{httpRateLimitFilter: mustAny(httpRateLimitConfig(name+"|"+id, &r.Limit, grpc))},
		})
	}
	return out
}

// rateLimitHost sets rl's Service-wide request bucket on the inbound
// route configuration rc (named name).
func rateLimitHost(rc *routev3.RouteConfiguration, name string, rl *resilience.RateLimit, grpc bool) {
	if rl != nil && rl.HTTP != nil {
		rc.VirtualHosts[0].TypedPerFilterConfig = map[string]*anypb.Any{httpRateLimitFilter: mustAny(httpRateLimitConfig(name, rl.HTTP, grpc))}
	}
}
