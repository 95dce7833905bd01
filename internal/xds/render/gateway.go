package render

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// Gateway API routes (HTTPRoute, GRPCRoute attached to a Service: see
// gateway.Routes) replace the outbound route configuration of the
// Service's port for the callers they apply to. Its name is
//
//	outbound|<ns>/<svc>|<port>|gw[=<consumer ns>][|to=<ns>/<b1>,...][|grpc]
//
// "gw=<ns>" when the consumer routes of the callers' namespace decide,
// "to=" listing the backends the caller may reach when it may not reach
// them all (as for a TrafficSplit: TrafficTargets still decide who may
// call whom, and a backend the caller may not call gets none of its calls).
//
// One Envoy route per match of each rule, in the Gateway API's precedence
// order. Envoy gets every supported filter; gRPC clients get what they
// honour (matches on path, headers; weighted clusters; max stream
// duration for the request timeout; a redirect fails the call) and apply
// warns of the rest, which gRPC output leaves out.

// gatewayPlan is the part of an outbound that Gateway API routes decide.
type gatewayPlan struct {
	routes gateway.Routes
	// allowed lists the route's services the caller may call (sorted);
	// subset is set when that is not all of them.
	allowed []mesh.MeshService
	subset  bool
}

// gatewayPort sets o's gateway plan when routes decide the calls from
// src's proxy to o's port, and reports whether they do.
func gatewayPort(m Mesh, p Proxy, src mesh.ServiceAccount, o *outbound) bool {
	g, ok := m.Spec().GatewayRoutes(o.info.Service, o.port.Port, p.Service.Namespace)
	if !ok {
		return false
	}
	gp := &gatewayPlan{routes: g}
	exist := 0
	for _, svc := range g.Services() {
		if _, ok := m.Spec().Service(svc); !ok {
			continue // an invalid backendRef: no cluster
		}
		exist++
		if m.Spec().Allows(src, svc) {
			gp.allowed = append(gp.allowed, svc)
		}
	}
	gp.subset = len(gp.allowed) < exist
	o.gw, o.direct, o.split, o.subset, o.splitMatches = gp, false, nil, false, nil
	return true
}

func (g *gatewayPlan) routeName(o outbound, f Flavor) string {
	var b strings.Builder
	b.WriteString("outbound|" + o.info.Service.String() + "|" + strconv.Itoa(o.port.Port) + "|gw")
	if g.routes.Consumer != "" {
		b.WriteString("=" + g.routes.Consumer)
	}
	if g.subset {
		names := make([]string, len(g.allowed))
		for i, s := range g.allowed {
			names[i] = s.String()
		}
		b.WriteString("|to=" + strings.Join(names, ","))
	}
	if o.retrySrc != "" {
		b.WriteString("|retry=" + o.retrySrc)
	}
	if f == GRPC {
		b.WriteString("|grpc")
	}
	return b.String()
}

func gatewayPlanEqual(a, b *gatewayPlan) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.routes.Fingerprint == b.routes.Fingerprint && a.subset == b.subset && slices.Equal(a.allowed, b.allowed)
}

func (g *gatewayPlan) may(svc mesh.MeshService) bool {
	_, ok := slices.BinarySearchFunc(g.allowed, svc, mesh.MeshService.Compare)
	return ok
}

// gatewayRouteConfig renders o's routes.
func gatewayRouteConfig(o outbound, f Flavor) *routev3.RouteConfiguration {
	var routes []*routev3.Route
	for _, r := range o.gw.routes.Rules {
		if rt := gatewayRoute(o, r, f); rt != nil {
			routes = append(routes, rt)
		}
	}
	return routeConfig(o.routeName(f), routes...)
}

// gatewayRouteName names an Envoy route after the rule and match it is.
func gatewayRouteName(r gateway.Rule) string {
	s := fmt.Sprintf("%s/%s/rule%d", r.Route.Namespace, r.Route.Name, r.Rule)
	if r.Name != "" {
		s += "/" + r.Name
	}
	return s + fmt.Sprintf("/match%d", r.Match)
}

// gatewayRoute renders one match of one rule; nil when no call of
// flavour f can match it.
func gatewayRoute(o outbound, r gateway.Rule, f Flavor) *routev3.Route {
	match := gatewayMatch(r, f)
	if match == nil {
		return nil
	}
	rt := &routev3.Route{Name: gatewayRouteName(r), Match: match}
	action := &routev3.RouteAction{}
	redirected := false
	h := headerFilters(r.Filters, f)
	rt.RequestHeadersToAdd, rt.RequestHeadersToRemove, rt.ResponseHeadersToAdd, rt.ResponseHeadersToRemove = h.reqAdd, h.reqRemove, h.respAdd, h.respRemove
	for _, flt := range r.Filters {
		switch flt.Type {
		case gwv1.HTTPRouteFilterRequestMirror:
			target := mirrorService(r, flt.RequestMirror)
			if f == GRPC || !o.gw.may(target) {
				continue // gRPC does not mirror; the caller may not call it
			}
			action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, &routev3.RouteAction_RequestMirrorPolicy{
				Cluster: ClusterName(target, f), RuntimeFraction: mirrorFraction(flt.RequestMirror),
			})
		case gwv1.HTTPRouteFilterRequestRedirect:
			rt.Action = &routev3.Route_Redirect{Redirect: redirectAction(flt.RequestRedirect, r)}
			redirected = true
		case gwv1.HTTPRouteFilterURLRewrite:
			if f == Envoy { // gRPC does not rewrite
				rewrite(action, flt.URLRewrite, r)
			}
		}
	}
	if redirected {
		return rt
	}
	var ws []*routev3.WeightedCluster_ClusterWeight
	valid, reachable := 0, 0
	for _, b := range r.Backends {
		if !b.Valid || b.Weight <= 0 {
			continue
		}
		valid++
		if !o.gw.may(b.Service) {
			continue
		}
		reachable++
		h := headerFilters(b.Filters, f)
		ws = append(ws, &routev3.WeightedCluster_ClusterWeight{Name: ClusterName(b.Service, f), Weight: wrapperspb.UInt32(uint32(b.Weight)),
			RequestHeadersToAdd: h.reqAdd, RequestHeadersToRemove: h.reqRemove, ResponseHeadersToAdd: h.respAdd, ResponseHeadersToRemove: h.respRemove})
	}
	switch {
	case valid == 0:
		// The Gateway API: a rule without a valid backend fails its
		// calls with 500 (gRPC clients fail them: not a route action
		// they take).
		rt.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 500}}
		return rt
	case reachable == 0:
		rt.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 403}}
		return rt
	case len(ws) == 1 && ws[0].RequestHeadersToAdd == nil && ws[0].RequestHeadersToRemove == nil && ws[0].ResponseHeadersToAdd == nil && ws[0].ResponseHeadersToRemove == nil:
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: ws[0].Name}
	default:
		action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: ws}}
	}
	routeAction(o.port, action)
	applyCall(rt, action, o, f, r.Timeouts != nil, r.Retry != nil)
	if f == Envoy && r.Retry != nil {
		action.RetryPolicy = retryPolicy(r.Retry, r.Timeouts)
	}
	if t := r.Timeouts; t != nil {
		if d, ok := routeTimeout(t, r.Retry != nil && f == Envoy); ok {
			if f == GRPC {
				action.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(d)}
			} else {
				action.Timeout = durationpb.New(d)
			}
		}
	}
	rt.Action = &routev3.Route_Route{Route: action}
	return rt
}

// routeTimeout is the request timeout, or, without retries (one attempt
// per call), the backend request timeout when only it is set or it is
// shorter. With retries the backend request timeout is each attempt's
// (retryPolicy). 0 disables the timeout.
func routeTimeout(t *gwv1.HTTPRouteTimeouts, retries bool) (time.Duration, bool) {
	req, hasReq := gwDuration(t.Request)
	be, hasBE := gwDuration(t.BackendRequest)
	switch {
	case retries && hasReq:
		return req, true
	case retries:
		return 0, false
	case hasReq && hasBE && be != 0 && (req == 0 || be < req):
		return be, true
	case hasReq:
		return req, true
	case hasBE:
		return be, true
	}
	return 0, false
}

func gwDuration(d *gwv1.Duration) (time.Duration, bool) {
	if d == nil {
		return 0, false
	}
	v, err := time.ParseDuration(string(*d))
	return v, err == nil
}

// retryPolicy retries on the listed status codes (any 5xx when none are
// listed), attempts times (Envoy's default, one, when unset), backoff
// apart, each attempt bounded by the backend request timeout.
func retryPolicy(r *gwv1.HTTPRouteRetry, t *gwv1.HTTPRouteTimeouts) *routev3.RetryPolicy {
	p := &routev3.RetryPolicy{RetryOn: "5xx"}
	for _, c := range r.Codes {
		p.RetriableStatusCodes = append(p.RetriableStatusCodes, uint32(c))
	}
	if len(p.RetriableStatusCodes) > 0 {
		p.RetryOn = "retriable-status-codes"
	}
	if r.Attempts != nil {
		p.NumRetries = wrapperspb.UInt32(uint32(*r.Attempts))
	}
	if b, ok := gwDuration(r.Backoff); ok && b > 0 {
		p.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(b)}
	}
	if t != nil {
		if be, ok := gwDuration(t.BackendRequest); ok && be > 0 {
			p.PerTryTimeout = durationpb.New(be)
		}
	}
	return p
}

func mirrorService(r gateway.Rule, m *gwv1.HTTPRequestMirrorFilter) mesh.MeshService {
	s := mesh.MeshService{Namespace: r.Route.Namespace, Name: string(m.BackendRef.Name)}
	if m.BackendRef.Namespace != nil {
		s.Namespace = string(*m.BackendRef.Namespace)
	}
	return s
}

func mirrorFraction(m *gwv1.HTTPRequestMirrorFilter) *corev3.RuntimeFractionalPercent {
	switch {
	case m.Percent != nil:
		return &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: uint32(*m.Percent), Denominator: typev3.FractionalPercent_HUNDRED}}
	case m.Fraction != nil:
		d := int64(100)
		if m.Fraction.Denominator != nil {
			d = int64(*m.Fraction.Denominator)
		}
		return &corev3.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: uint32(int64(m.Fraction.Numerator) * 1_000_000 / d), Denominator: typev3.FractionalPercent_MILLION}}
	}
	return nil // every request
}

// mutations are the header changes of a route or a weighted backend.
type mutations struct {
	reqAdd, respAdd       []*corev3.HeaderValueOption
	reqRemove, respRemove []string
}

// headerFilters gathers the header modifier filters of fs (none for
// gRPC, which does not modify headers).
func headerFilters(fs []gwv1.HTTPRouteFilter, f Flavor) mutations {
	var m mutations
	if f == GRPC {
		return m
	}
	for _, flt := range fs {
		switch flt.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			m.reqAdd, m.reqRemove = headerMutations(flt.RequestHeaderModifier)
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			m.respAdd, m.respRemove = headerMutations(flt.ResponseHeaderModifier)
		}
	}
	return m
}

func headerMutations(h *gwv1.HTTPHeaderFilter) ([]*corev3.HeaderValueOption, []string) {
	var add []*corev3.HeaderValueOption
	for _, s := range h.Set {
		add = append(add, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: strings.ToLower(string(s.Name)), Value: s.Value}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
	}
	for _, a := range h.Add {
		add = append(add, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: strings.ToLower(string(a.Name)), Value: a.Value}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD})
	}
	var remove []string
	for _, r := range h.Remove {
		remove = append(remove, strings.ToLower(r))
	}
	return add, remove
}

var redirectCodes = map[int]routev3.RedirectAction_RedirectResponseCode{
	301: routev3.RedirectAction_MOVED_PERMANENTLY, 302: routev3.RedirectAction_FOUND, 303: routev3.RedirectAction_SEE_OTHER,
	307: routev3.RedirectAction_TEMPORARY_REDIRECT, 308: routev3.RedirectAction_PERMANENT_REDIRECT,
}

func redirectAction(rd *gwv1.HTTPRequestRedirectFilter, r gateway.Rule) *routev3.RedirectAction {
	a := &routev3.RedirectAction{ResponseCode: redirectCodes[*rd.StatusCode]}
	if rd.Scheme != nil {
		a.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: *rd.Scheme}
	}
	if rd.Hostname != nil {
		a.HostRedirect = string(*rd.Hostname)
	}
	if rd.Port != nil {
		a.PortRedirect = uint32(*rd.Port)
	}
	if p := rd.Path; p != nil {
		switch p.Type {
		case gwv1.FullPathHTTPPathModifier:
			a.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: *p.ReplaceFullPath}
		case gwv1.PrefixMatchHTTPPathModifier:
			if rep := *p.ReplacePrefixMatch; rep == "/" || strings.HasSuffix(rep, "/") {
				a.PathRewriteSpecifier = &routev3.RedirectAction_RegexRewrite{RegexRewrite: prefixRegexRewrite(r, rep)}
			} else {
				a.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: rep}
			}
		}
	}
	return a
}

func rewrite(a *routev3.RouteAction, rw *gwv1.HTTPURLRewriteFilter, r gateway.Rule) {
	if rw.Hostname != nil {
		a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: string(*rw.Hostname)}
	}
	if p := rw.Path; p != nil {
		switch p.Type {
		case gwv1.FullPathHTTPPathModifier:
			a.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^.*$"}, Substitution: *p.ReplaceFullPath}
		case gwv1.PrefixMatchHTTPPathModifier:
			if rep := *p.ReplacePrefixMatch; rep == "/" || strings.HasSuffix(rep, "/") {
				a.RegexRewrite = prefixRegexRewrite(r, rep)
			} else {
				a.PrefixRewrite = rep
			}
		}
	}
}

// prefixRegexRewrite replaces the matched prefix (with the slashes after
// it) by rep ending in "/": /strip-prefix/three with rep "/" is /three.
func prefixRegexRewrite(r gateway.Rule, rep string) *matcherv3.RegexMatchAndSubstitute {
	prefix := "/"
	if r.HTTP != nil && *r.HTTP.Path.Type == gwv1.PathMatchPathPrefix {
		prefix = strings.TrimSuffix(*r.HTTP.Path.Value, "/")
	}
	return &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^" + regexp.QuoteMeta(prefix) + "/*"}, Substitution: rep}
}

// gatewayMatch renders a rule's match; nil when no call of flavour f can
// match it (gRPC clients: a method other than POST, query parameters).
func gatewayMatch(r gateway.Rule, f Flavor) *routev3.RouteMatch {
	rm := prefixMatch()
	switch {
	case r.HTTP != nil:
		m := r.HTTP
		v := *m.Path.Value
		switch *m.Path.Type {
		case gwv1.PathMatchExact:
			rm.PathSpecifier = &routev3.RouteMatch_Path{Path: v}
		case gwv1.PathMatchPathPrefix:
			// Element-wise: /v2 matches /v2 and /v2/x, not /v2x; a
			// trailing slash is ignored.
			if p := strings.TrimSuffix(v, "/"); p != "" {
				if f == GRPC { // gRPC knows no path_separated_prefix
					rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "^" + regexp.QuoteMeta(p) + "(/.*)?$"}}
				} else {
					rm.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: p}
				}
			}
		case gwv1.PathMatchRegularExpression:
			rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}
		}
		if m.Method != nil {
			if f == GRPC {
				if *m.Method != gwv1.HTTPMethodPost {
					return nil // every gRPC call is a POST
				}
			} else {
				rm.Headers = append(rm.Headers, exactHeader(":method", string(*m.Method)))
			}
		}
		for _, h := range m.Headers {
			rm.Headers = append(rm.Headers, headerMatcher(string(h.Name), string(*h.Type), h.Value))
		}
		if len(m.QueryParams) > 0 && f == GRPC {
			return nil // gRPC calls carry no query
		}
		for _, q := range m.QueryParams {
			sm := &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: q.Value}}
			if *q.Type == gwv1.QueryParamMatchRegularExpression {
				sm.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: q.Value}}
			}
			rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{
				Name: string(q.Name), QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm},
			})
		}
	case r.GRPC != nil:
		m := r.GRPC
		if mm := m.Method; mm != nil {
			svc, meth := "", ""
			if mm.Service != nil {
				svc = *mm.Service
			}
			if mm.Method != nil {
				meth = *mm.Method
			}
			switch {
			case *mm.Type == gwv1.GRPCMethodMatchExact && svc != "" && meth != "":
				rm.PathSpecifier = &routev3.RouteMatch_Path{Path: "/" + svc + "/" + meth}
			case *mm.Type == gwv1.GRPCMethodMatchExact && meth == "":
				rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: "/" + svc + "/"}
			default:
				re := func(s string, exact bool) string {
					switch {
					case s == "":
						return "[^/]+"
					case exact:
						return regexp.QuoteMeta(s)
					}
					return s
				}
				exact := *mm.Type == gwv1.GRPCMethodMatchExact
				rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "^/" + re(svc, exact) + "/" + re(meth, exact) + "$"}}
			}
		}
		for _, h := range m.Headers {
			rm.Headers = append(rm.Headers, headerMatcher(string(h.Name), string(*h.Type), h.Value))
		}
	}
	return rm
}

func headerMatcher(name, typ, value string) *routev3.HeaderMatcher {
	if typ == string(gwv1.HeaderMatchRegularExpression) {
		return regexHeader(name, value)
	}
	return exactHeader(name, value)
}
