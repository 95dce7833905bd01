package gateway

import (
	"fmt"
	"strings"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// CheckReferences checks a route of a batch against the specification it
// is applied into: its parents resolve and are not the root of an SMI
// TrafficSplit, its backends resolve (a missing Service is a warning, as
// in Kubernetes), a layer-4 route's backend ports are tcp ports, and it
// warns of what proxyless gRPC clients of its grpc ports ignore.
func CheckReferences(v Checker, w World, r Route) {
	for i, a := range ResolveParents(w, r) {
		if a.Reason != "" {
			v.Errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "%s: the route would attach to nothing there%s", a.Message, parentHint(w, a))
			continue
		}
		if a.Gateway {
			continue
		}
		if k, ok := w.SplitOf(a.Parent); ok {
			v.Errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "Service %s is the root of the SMI %s: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both; delete the TrafficSplit (its backends become this route's weighted backendRefs) or attach the route elsewhere", a.Parent, k)
		}
	}
	grpcIgnored(v, w, r)
	if r.l4() {
		l4References(v, w, r)
	}
	for _, p := range ResolveBackends(w, r) {
		if p.Reason == string(gwv1.RouteReasonBackendNotFound) {
			// As in Kubernetes: the route stands, its status says
			// ResolvedRefs=False, and the backend gets no calls.
			v.Warnf(p.Field, "%s; until then the route's status reports ResolvedRefs=False and this backend's share of calls goes to the rule's other backends (a rule with none fails its calls with 500)", p.Message)
			continue
		}
		v.Errorf(p.Field, "%s", p.Message)
	}
}

func parentHint(w World, a Attachment) string {
	if a.Reason == string(gwv1.RouteReasonNoMatchingParent) && !strings.Contains(a.Message, "port") {
		return w.ServiceHint(a.Parent)
	}
	return ""
}

// l4References checks a layer-4 route's backends (apply): the gateway
// carries raw connections, so each backend port must be a tcp port (an
// http or grpc port's inbound listener speaks HTTP).
func l4References(v Checker, w World, r Route) {
	ns := r.Name.Namespace
	for _, fr := range r.backendRefs() {
		b := fr.ref
		if b.Port == nil {
			continue
		}
		svc := BackendService(ns, b)
		ports, ok := w.ServicePorts(svc)
		if !ok {
			continue // ResolveBackends says so
		}
		for _, p := range ports {
			if p.Port == int(*b.Port) && p.AppProtocol != "tcp" {
				v.Errorf(fr.field+".port", "port %d of Service %s is %s: a %s carries raw connections, which that port's inbound listener does not accept; name a port with appProtocol: tcp", p.Port, svc, p.AppProtocol, r.Name.Kind)
			}
		}
	}
}

// grpcIgnored warns of what proxyless gRPC clients calling a grpc port
// the route attaches to do not honour (Envoy proxies do).
func grpcIgnored(v Checker, w World, r Route) {
	grpcPort := false
	for _, a := range ResolveParents(w, r) {
		ports, _ := w.ServicePorts(a.Parent)
		for _, p := range a.Ports {
			for _, sp := range ports {
				grpcPort = grpcPort || sp.Port == p && sp.AppProtocol == "grpc"
			}
		}
	}
	if !grpcPort {
		return
	}
	say := func(field, what string) {
		v.Warnf(field, "%s: proxyless gRPC clients of the route's grpc ports do not honour it (Envoy proxies do)", what)
	}
	filters := func(field string, fs []gwv1.HTTPRouteFilter) {
		for i, f := range fs {
			ff := fmt.Sprintf("%s[%d]", field, i)
			switch f.Type {
			case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier:
				say(ff, string(f.Type)+" is not applied")
			case gwv1.HTTPRouteFilterRequestMirror:
				say(ff, "RequestMirror mirrors nothing")
			case gwv1.HTTPRouteFilterURLRewrite:
				say(ff, "URLRewrite does not rewrite: the call goes to the backends unchanged")
			case gwv1.HTTPRouteFilterRequestRedirect:
				say(ff, "RequestRedirect fails the call (UNAVAILABLE) instead of redirecting")
			}
		}
	}
	switch {
	case r.HTTP != nil:
		for i, rule := range r.HTTP.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			filters(f+".filters", rule.Filters)
			for j, b := range rule.BackendRefs {
				filters(fmt.Sprintf("%s.backendRefs[%d].filters", f, j), b.Filters)
			}
			for j, m := range rule.Matches {
				mf := fmt.Sprintf("%s.matches[%d]", f, j)
				if m.Method != nil && *m.Method != gwv1.HTTPMethodPost {
					say(mf+".method", fmt.Sprintf("method %s never matches a gRPC call (every one is a POST)", *m.Method))
				}
				if len(m.QueryParams) > 0 {
					say(mf+".queryParams", "a query match never matches a gRPC call (gRPC calls carry no query)")
				}
			}
			if rule.Retry != nil {
				say(f+".retry", "retry on HTTP status codes is not applied (gRPC clients retry by gRPC status)")
			}
			if t := rule.Timeouts; t != nil && (nonZero(t.Request) || nonZero(t.BackendRequest)) {
				v.Warnf(f+".timeouts", "proxyless gRPC clients of the route's grpc ports get it as max_stream_duration: gRPC-Go and grpc-js end a call at it, but C-core 1.51 (Debian 12's python3-grpcio) ends every call far sooner, within milliseconds, with DEADLINE_EXCEEDED: give a route that C-core clients call no timeout")
			}
		}
	case r.GRPC != nil:
		for i, rule := range r.GRPC.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			filters(f+".filters", GRPCFilters(rule.Filters))
			for j, b := range rule.BackendRefs {
				filters(fmt.Sprintf("%s.backendRefs[%d].filters", f, j), GRPCFilters(b.Filters))
			}
		}
	}
}

// nonZero reports whether d is a duration other than 0 (validation
// checked its syntax).
func nonZero(d *gwv1.Duration) bool {
	if d == nil {
		return false
	}
	v, err := time.ParseDuration(string(*d))
	return err == nil && v != 0
}
