package render

// The validation walk of RBAC policies and the matchers they use (see walk.go).

import (
	"strings"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

func (v *validation) wHTTPRBAC(m *rbachttpv3.RBAC) {
	if m == nil {
		return
	}
	v.wRBAC(m.Rules)
	v.wRBAC(m.ShadowRules)
	v.rest(m, tHTTPRBAC, m.Matcher != nil || m.ShadowMatcher != nil)
}

func (v *validation) wNetworkRBAC(m *rbacnetv3.RBAC) {
	if m == nil {
		return
	}
	v.wRBAC(m.Rules)
	v.wRBAC(m.ShadowRules)
	v.rest(m, tNetworkRBAC, m.Matcher != nil || m.ShadowMatcher != nil)
}

func (v *validation) wRBAC(m *rbacv3.RBAC) {
	if m == nil {
		return
	}
	for _, p := range m.Policies {
		v.wPolicy(p)
	}
	v.rest(m, tRBAC, m.AuditLoggingOptions != nil)
}

func (v *validation) wPolicy(m *rbacv3.Policy) {
	if m == nil {
		return
	}
	for _, p := range m.Permissions {
		v.wPermission(p)
	}
	for _, p := range m.Principals {
		v.wPrincipal(p)
	}
	v.rest(m, tPolicy, false)
}

func (v *validation) wPermission(m *rbacv3.Permission) {
	if m == nil {
		return
	}
	switch r := m.Rule.(type) {
	case nil, *rbacv3.Permission_Any, *rbacv3.Permission_DestinationIp, *rbacv3.Permission_DestinationPort, *rbacv3.Permission_DestinationPortRange:
	case *rbacv3.Permission_AndRules:
		v.wPermissionSet(r.AndRules)
	case *rbacv3.Permission_OrRules:
		v.wPermissionSet(r.OrRules)
	case *rbacv3.Permission_Header:
		v.wHeaderMatcher(r.Header)
	case *rbacv3.Permission_UrlPath:
		v.wPathMatcher(r.UrlPath)
	case *rbacv3.Permission_NotRule:
		v.wPermission(r.NotRule)
	default:
		v.other(m, "rule")
	}
	v.rest(m, tPermission, false)
}

func (v *validation) wPermissionSet(m *rbacv3.Permission_Set) {
	if m == nil {
		return
	}
	for _, r := range m.Rules {
		v.wPermission(r)
	}
	v.rest(m, tPermissionSet, false)
}

func (v *validation) wPrincipal(m *rbacv3.Principal) {
	if m == nil {
		return
	}
	switch id := m.Identifier.(type) {
	case nil, *rbacv3.Principal_Any, *rbacv3.Principal_SourceIp, *rbacv3.Principal_DirectRemoteIp, *rbacv3.Principal_RemoteIp:
	case *rbacv3.Principal_AndIds:
		v.wPrincipalSet(id.AndIds)
	case *rbacv3.Principal_OrIds:
		v.wPrincipalSet(id.OrIds)
	case *rbacv3.Principal_Authenticated_:
		v.wAuthenticated(id.Authenticated)
	case *rbacv3.Principal_Header:
		v.wHeaderMatcher(id.Header)
	case *rbacv3.Principal_UrlPath:
		v.wPathMatcher(id.UrlPath)
	case *rbacv3.Principal_NotId:
		v.wPrincipal(id.NotId)
	default:
		v.other(m, "identifier")
	}
	v.rest(m, tPrincipal, false)
}

func (v *validation) wPrincipalSet(m *rbacv3.Principal_Set) {
	if m == nil {
		return
	}
	for _, id := range m.Ids {
		v.wPrincipal(id)
	}
	v.rest(m, tPrincipalSet, false)
}

func (v *validation) wAuthenticated(m *rbacv3.Principal_Authenticated) {
	if m == nil {
		return
	}
	v.wStringMatcher(m.PrincipalName)
	v.rest(m, tAuthenticated, false)
}

func (v *validation) wHeaderMatcher(m *routev3.HeaderMatcher) {
	if m == nil {
		return
	}
	switch s := m.HeaderMatchSpecifier.(type) {
	case nil, *routev3.HeaderMatcher_ExactMatch, *routev3.HeaderMatcher_PresentMatch, *routev3.HeaderMatcher_PrefixMatch, *routev3.HeaderMatcher_SuffixMatch, *routev3.HeaderMatcher_ContainsMatch:
	case *routev3.HeaderMatcher_SafeRegexMatch:
		v.wRegex(s.SafeRegexMatch)
	case *routev3.HeaderMatcher_StringMatch:
		// gRPC C-core before 1.57 (routes) and 1.69 (RBAC) NACKs it.
		v.fail("header matcher %q: string_match is refused by gRPC C-core 1.51 (Debian 12); use exact_match or safe_regex_match", m.GetName())
		v.wStringMatcher(s.StringMatch)
	default:
		v.other(m, "header_match_specifier")
	}
	if v.flavor == GRPC && strings.HasPrefix(m.GetName(), ":") {
		v.fail("header matcher %q: gRPC clients match no pseudo-header", m.GetName())
	}
	v.rest(m, tHeaderMatcher, false)
}

func (v *validation) wPathMatcher(m *matcherv3.PathMatcher) {
	if m == nil {
		return
	}
	switch r := m.Rule.(type) {
	case nil:
	case *matcherv3.PathMatcher_Path:
		v.wStringMatcher(r.Path)
	default:
		v.other(m, "rule")
	}
	v.rest(m, tPathMatcher, false)
}

func (v *validation) wStringMatcher(m *matcherv3.StringMatcher) {
	if m == nil {
		return
	}
	switch p := m.MatchPattern.(type) {
	case nil, *matcherv3.StringMatcher_Exact, *matcherv3.StringMatcher_Prefix, *matcherv3.StringMatcher_Suffix, *matcherv3.StringMatcher_Contains:
	case *matcherv3.StringMatcher_SafeRegex:
		v.wRegex(p.SafeRegex)
	default:
		v.other(m, "match_pattern")
	}
	v.rest(m, tStringMatcher, false)
}

func (v *validation) wRegex(m *matcherv3.RegexMatcher) {
	if m == nil {
		return
	}
	v.regex(m)
	v.rest(m, tRegex, false)
}
