package render

import (
	"maps"
	"slices"
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// inboundRBAC returns the ALLOW rules of one port of the proxy's service:
// one policy per TrafficTarget that allows something on this port (none:
// everything is denied), or one policy allowing any peer of the trust
// domain in permissive mode.
func inboundRBAC(m Mesh, svc mesh.MeshService, port spec.ServicePort, f Flavor) *rbacv3.RBAC {
	rules := &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{}}
	if m.Spec().Permissive() {
		rules.Policies["permissive"] = &rbacv3.Policy{
			Permissions: []*rbacv3.Permission{anyPermission},
			Principals: []*rbacv3.Principal{{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
				PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + m.TrustDomain() + "/"}},
			}}}},
		}
		return rules
	}
	for _, p := range inboundPolicies(m, svc, port, f) {
		rules.Policies[p.name] = &rbacv3.Policy{Permissions: p.perms, Principals: p.principals}
	}
	return rules
}

// anyPermission allows every request or connection (shared: not to be
// modified).
var anyPermission = &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}

// inboundPolicy is one policy of inboundRBAC's rules outside permissive
// mode: its permissions and principals are never empty.
type inboundPolicy struct {
	name       string
	perms      []*rbacv3.Permission
	principals []*rbacv3.Principal
}

// inboundPolicies returns the policies of inboundRBAC's rules outside
// permissive mode, sorted by name (unique: one per TrafficTarget).
func inboundPolicies(m Mesh, svc mesh.MeshService, port spec.ServicePort, f Flavor) []inboundPolicy {
	var out []inboundPolicy
	for _, r := range m.Spec().Inbound(svc) {
		if r.Port != 0 && r.Port != port.Port || len(r.Sources) == 0 {
			continue
		}
		tcpAllowed := r.TCPAllPorts || slices.Contains(r.TCPPorts, port.Port)
		var perms []*rbacv3.Permission
		switch {
		case !isHTTP(port):
			if tcpAllowed {
				perms = append(perms, anyPermission)
			}
		case tcpAllowed:
			// A TCPRoute allowing this port allows every request on it.
			perms = append(perms, anyPermission)
		default:
			for _, hm := range r.HTTP {
				if perm, ok := rbacPermission(m, r.Policy.Namespace, hm, f); ok {
					perms = append(perms, perm)
				}
			}
		}
		if len(perms) == 0 {
			continue
		}
		accounts := slices.Clone(r.Sources)
		slices.SortFunc(accounts, func(a, b mesh.ServiceAccount) int { return mesh.MeshService(a).Compare(mesh.MeshService(b)) })
		accounts = slices.Compact(accounts)
		out = append(out, inboundPolicy{name: r.Policy.Namespace + "/" + r.Policy.Name, perms: perms, principals: rbacPrincipals(m, accounts)})
	}
	// Inbound has one rule per TrafficTarget, named by its namespace and
	// name: the names are unique.
	slices.SortFunc(out, func(a, b inboundPolicy) int { return strings.Compare(a.name, b.name) })
	return out
}

// principal is the peer presenting account's SPIFFE ID.
func principal(trustDomain string, account mesh.ServiceAccount) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{
		PrincipalName: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: account.SPIFFEID(trustDomain)}},
	}}}
}

// httpPermission allows the requests one HTTPRouteGroup match describes;
// false when no request of flavour f can match it.
func httpPermission(hm spec.HTTPRouteMatch, f Flavor) (*rbacv3.Permission, bool) {
	var and []*rbacv3.Permission
	if hm.PathRegex != "" {
		and = append(and, &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
			Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: hm.PathRegex}}}},
		}}})
	}
	methods, ok := methodsFor(hm, f)
	if !ok {
		return nil, false
	}
	if len(methods) > 0 {
		var or []*rbacv3.Permission
		for _, meth := range methods {
			or = append(or, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: exactHeader(":method", meth)}})
		}
		and = append(and, &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: or}}})
	}
	for _, name := range slices.Sorted(maps.Keys(hm.Headers)) {
		and = append(and, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: regexHeader(name, hm.Headers[name])}})
	}
	if len(and) == 0 {
		return &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}, true
	}
	return &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: and}}}, true
}

// methodsFor returns the methods a match's :method matcher lists for
// flavour f (none: any method), and false when no request of f can match.
// gRPC clients match no pseudo-header, and every gRPC call is a POST: for
// them the matcher is decided here, left out when it allows POST, and the
// whole match dropped when it does not or when it names a pseudo-header in
// its headers (apply warns of such matches in a TrafficSplit).
func methodsFor(hm spec.HTTPRouteMatch, f Flavor) ([]string, bool) {
	if f == GRPC && slices.ContainsFunc(slices.Collect(maps.Keys(hm.Headers)), func(name string) bool { return strings.HasPrefix(name, ":") }) {
		return nil, false // a pseudo-header gRPC never matches
	}
	methods := methodsOf(hm)
	if f != GRPC || len(methods) == 0 {
		return methods, true
	}
	return nil, slices.Contains(methods, "POST")
}

// methodsOf returns the match's methods, sorted; none when any is allowed.
func methodsOf(hm spec.HTTPRouteMatch) []string {
	if len(hm.Methods) == 0 || slices.Contains(hm.Methods, "*") {
		return nil
	}
	out := make([]string, len(hm.Methods))
	for i, meth := range hm.Methods {
		out[i] = strings.ToUpper(meth)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Header matchers use exact_match and safe_regex_match, which every client
// takes: Envoy (deprecated there for string_match, still supported),
// gRPC-Go, grpc-js and gRPC C-core before 1.57 (routes) and 1.69 (RBAC),
// which know no string_match and NACK it (Debian 12's python3-grpcio is
// 1.51).
func regexHeader(name, regex string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name:                 strings.ToLower(name),
		HeaderMatchSpecifier: &routev3.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcherv3.RegexMatcher{Regex: regex}},
	}
}

func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name:                 strings.ToLower(name),
		HeaderMatchSpecifier: &routev3.HeaderMatcher_ExactMatch{ExactMatch: value},
	}
}
