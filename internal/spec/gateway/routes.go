package gateway

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Patterns of the upstream CRDs.
var (
	headerNamePattern  = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_` + "`" + `|~]+$`)
	pathPattern        = regexp.MustCompile(`^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$`)
	preciseHostPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	gwDurationPattern  = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)
	grpcServicePattern = regexp.MustCompile(`(?i)^\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`)
	grpcMethodPattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*$`)
	sectionNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// IsGatewayRef reports whether p names a Gateway.
func IsGatewayRef(p gwv1.ParentReference) bool {
	return p.Group != nil && p.Kind != nil && string(*p.Group) == Group && string(*p.Kind) == KindGateway
}

func HasGatewayParent(refs []gwv1.ParentReference) bool {
	return slices.ContainsFunc(refs, IsGatewayRef)
}

// routeParents checks parentRefs: each names a Service (GAMMA) or a
// Gateway, and
// several refs to one parent need distinct sectionNames or ports.
func routeParents(v Checker, refs []gwv1.ParentReference) {
	if len(refs) == 0 {
		v.Errorf("spec.parentRefs", "no parentRefs: attach the route to a Service with {group: \"\", kind: Service, name: ...} or to a Gateway with {name: ...}")
	}
	if len(refs) > maxRouteParentRefs {
		v.Errorf("spec.parentRefs", "%d parentRefs, more than %d", len(refs), maxRouteParentRefs)
	}
	type parent struct{ group, kind, ns, name string }
	seen := map[parent][]int{}
	for i, p := range refs {
		f := fmt.Sprintf("spec.parentRefs[%d]", i)
		isGateway := IsGatewayRef(p)
		if !isGateway && (string(*p.Group) != "" || string(*p.Kind) != kindService) {
			g := string(*p.Group)
			v.Errorf(f, "parent %s (group %q) is not supported: a route attaches to a Service (group: \"\", kind: Service; the mesh profile, GAMMA) or to a Gateway (group: %s, kind: Gateway)", *p.Kind, g, Group)
			continue
		}
		what := "service name"
		if isGateway {
			what = "gateway name"
		}
		if err := mesh.ValidateLabel(what, string(p.Name)); err != nil {
			v.Errorf(f+".name", "%v", err)
		}
		ns := ""
		if p.Namespace != nil {
			ns = string(*p.Namespace)
			if err := mesh.ValidateLabel("namespace", ns); err != nil {
				v.Errorf(f+".namespace", "%v", err)
			}
		}
		if p.SectionName != nil && !sectionNamePattern.MatchString(string(*p.SectionName)) {
			v.Errorf(f+".sectionName", "%q is not a port or listener name: want a DNS-1123 label, the name of one of the Service's ports or the Gateway's listeners", *p.SectionName)
		}
		if p.Port != nil {
			v.CheckPort(f+".port", int(*p.Port))
		}
		k := parent{string(*p.Group), string(*p.Kind), ns, string(p.Name)}
		seen[k] = append(seen[k], i)
	}
	for _, idx := range seen {
		if len(idx) < 2 {
			continue
		}
		names := map[string]int{}
		for _, i := range idx {
			p := refs[i]
			if p.SectionName == nil {
				v.Errorf(fmt.Sprintf("spec.parentRefs[%d].sectionName", i), "sectionName must be specified when parentRefs includes 2 or more references to the same parent")
				continue
			}
			if j, dup := names[string(*p.SectionName)]; dup {
				v.Errorf(fmt.Sprintf("spec.parentRefs[%d].sectionName", i), "sectionName must be unique when parentRefs includes 2 or more references to the same parent (also spec.parentRefs[%d])", j)
			}
			names[string(*p.SectionName)] = i
		}
	}
}

func checkHeaderName(v Checker, field, name string) {
	switch {
	case name == "":
		v.Errorf(field, "empty header name")
	case len(name) > 256:
		v.Errorf(field, "header name is %d characters, more than 256", len(name))
	case !headerNamePattern.MatchString(name):
		v.Errorf(field, "%q is not a header name: want letters, digits and !#$%%&'*+-.^_`|~ (an HTTP token)", name)
	}
}

func checkHeaderMatches(v Checker, field string, n int, name func(int) string, typ func(int) string, value func(int) string, foldCase bool, what string) {
	if n > maxMatchHeaders {
		v.Errorf(field, "%d %s, more than %d", n, what, maxMatchHeaders)
	}
	seen := map[string]int{}
	for i := range n {
		f := fmt.Sprintf("%s[%d]", field, i)
		checkHeaderName(v, f+".name", name(i))
		key := name(i)
		if foldCase {
			key = strings.ToLower(key)
		}
		if j, dup := seen[key]; dup {
			v.Errorf(f+".name", "%q is matched twice (also %s[%d]): combine them into one match", name(i), field, j)
		}
		seen[key] = i
		switch typ(i) {
		case "Exact":
		case "RegularExpression":
			v.CheckRegex(f+".value", value(i))
		default:
			v.Errorf(f+".type", "unsupported type %q: want Exact or RegularExpression", typ(i))
		}
		if len(value(i)) > maxHeaderValueLength {
			v.Errorf(f+".value", "%d characters, more than %d", len(value(i)), maxHeaderValueLength)
		}
		if value(i) == "" {
			v.Errorf(f+".value", "empty value: give the value to match")
		}
	}
}

// checkPathValue applies the CRD's rules for an Exact or PathPrefix path.
func checkPathValue(v Checker, field, val string) {
	switch {
	case !strings.HasPrefix(val, "/"):
		v.Errorf(field, "value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']")
	case len(val) > maxPathLength:
		v.Errorf(field, "%d characters, more than %d", len(val), maxPathLength)
	case !pathPattern.MatchString(val):
		v.Errorf(field, "must only contain valid characters (matching ^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%%][0-9a-fA-F]{2})+$) for types ['Exact', 'PathPrefix']")
	}
	for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F", "#"} {
		if strings.Contains(val, bad) {
			v.Errorf(field, "must not contain '%s' when type one of ['Exact', 'PathPrefix']", bad)
		}
	}
	for _, bad := range []string{"/..", "/."} {
		if strings.HasSuffix(val, bad) {
			v.Errorf(field, "must not end with '%s' when type one of ['Exact', 'PathPrefix']", bad)
		}
	}
}

var httpMethodsGW = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

func checkHTTPMatch(v Checker, f string, m gwv1.HTTPRouteMatch) {
	switch t := *m.Path.Type; t {
	case gwv1.PathMatchExact, gwv1.PathMatchPathPrefix:
		checkPathValue(v, f+".path.value", *m.Path.Value)
	case gwv1.PathMatchRegularExpression:
		if len(*m.Path.Value) > maxPathLength {
			v.Errorf(f+".path.value", "%d characters, more than %d", len(*m.Path.Value), maxPathLength)
		}
		v.CheckRegex(f+".path.value", *m.Path.Value)
	default:
		v.Errorf(f+".path.type", "type must be one of ['Exact', 'PathPrefix', 'RegularExpression'], not %q", t)
	}
	checkHeaderMatches(v, f+".headers", len(m.Headers), func(i int) string { return string(m.Headers[i].Name) },
		func(i int) string { return string(*m.Headers[i].Type) }, func(i int) string { return m.Headers[i].Value }, true, "header matches")
	checkHeaderMatches(v, f+".queryParams", len(m.QueryParams), func(i int) string { return string(m.QueryParams[i].Name) },
		func(i int) string { return string(*m.QueryParams[i].Type) }, func(i int) string { return m.QueryParams[i].Value }, false, "query parameter matches")
	if m.Method != nil && !slices.Contains(httpMethodsGW, string(*m.Method)) {
		v.Errorf(f+".method", "unsupported method %q: want one of %s%s", *m.Method, strings.Join(httpMethodsGW, ", "), v.DidYouMean(string(*m.Method), httpMethodsGW))
	}
}

func checkGRPCMatch(v Checker, f string, m gwv1.GRPCRouteMatch) {
	if mm := m.Method; mm != nil {
		if mm.Service == nil && mm.Method == nil {
			v.Errorf(f+".method", "One or both of 'service' or 'method' must be specified")
		}
		exact := *mm.Type == gwv1.GRPCMethodMatchExact
		for _, p := range []struct {
			name string
			val  *string
			re   *regexp.Regexp
		}{{"service", mm.Service, grpcServicePattern}, {"method", mm.Method, grpcMethodPattern}} {
			if p.val == nil {
				continue
			}
			switch {
			case len(*p.val) > maxGRPCNameLength:
				v.Errorf(f+".method."+p.name, "%d characters, more than %d", len(*p.val), maxGRPCNameLength)
			case exact && !p.re.MatchString(*p.val):
				v.Errorf(f+".method."+p.name, "%s must only contain valid characters (matching %s)", p.name, p.re)
			case !exact:
				v.CheckRegex(f+".method."+p.name, *p.val)
			}
		}
		if t := *mm.Type; t != gwv1.GRPCMethodMatchExact && t != gwv1.GRPCMethodMatchRegularExpression {
			v.Errorf(f+".method.type", "unsupported type %q: want Exact or RegularExpression", t)
		}
	}
	checkHeaderMatches(v, f+".headers", len(m.Headers), func(i int) string { return string(m.Headers[i].Name) },
		func(i int) string { return string(*m.Headers[i].Type) }, func(i int) string { return m.Headers[i].Value }, true, "header matches")
}

// checkBackendRef checks a reference to a Service (the only backend kind).
func checkBackendRef(v Checker, f string, b gwv1.BackendObjectReference) {
	if string(*b.Group) != "" || string(*b.Kind) != kindService {
		v.Errorf(f, "backend %s (group %q) is not supported: a backendRef names a Service (group: \"\", kind: Service)", *b.Kind, *b.Group)
		return
	}
	if err := mesh.ValidateLabel("service name", string(b.Name)); err != nil {
		v.Errorf(f+".name", "%v", err)
	}
	if b.Namespace != nil {
		if err := mesh.ValidateLabel("namespace", string(*b.Namespace)); err != nil {
			v.Errorf(f+".namespace", "%v", err)
		}
	}
	if b.Port == nil {
		v.Errorf(f+".port", "Must have port for Service reference: give the port of %q to call", b.Name)
	} else {
		v.CheckPort(f+".port", int(*b.Port))
	}
}

// checkGWDuration checks a Gateway API duration ("1h", "500ms", "1m30s").
func checkGWDuration(v Checker, f string, d *gwv1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	if !gwDurationPattern.MatchString(string(*d)) {
		v.Errorf(f, "%q is not a Gateway API duration: want up to four of a number (up to 5 digits) and h, m, s or ms, such as \"10s\" or \"1m30s\"", *d)
		return 0
	}
	t, err := time.ParseDuration(string(*d))
	if err != nil {
		v.Errorf(f, "%q: %v", *d, err)
	}
	return t
}

// ruleView is what the validation of HTTPRoute and GRPCRoute rules shares.
type ruleView struct {
	name       *gwv1.SectionName
	matches    int
	checkMatch func(v Checker, f string, j int)
	filters    []gwv1.HTTPRouteFilter
	backends   []gwv1.BackendRef
	// backendFilters are each backendRef's filters.
	backendFilters [][]gwv1.HTTPRouteFilter
	// redirects is set when the rule redirects (then it has no backends).
	redirects bool
	// extra checks what only one kind has.
	extra func(v Checker, f string)
}

// validateRoute applies the rules HTTPRoute and GRPCRoute share.
func validateRoute(v Checker, parents []gwv1.ParentReference, useDefault gwv1.GatewayDefaultScope, hostnames []gwv1.Hostname, rules []ruleView, grpc bool) {
	routeParents(v, parents)
	// The CRD's bounds: at most 16, each a Hostname (a precise name or
	// "*." and one), checked whether or not a Gateway parent uses them.
	if len(hostnames) > 16 {
		v.Errorf("spec.hostnames", "%d host names, more than 16", len(hostnames))
	}
	for i, h := range hostnames {
		checkGatewayHostname(v, fmt.Sprintf("spec.hostnames[%d]", i), h)
	}
	if useDefault != "" {
		v.Errorf("spec.useDefaultGateways", "not supported: a mesh route attaches to the Services its parentRefs name")
	}
	if len(rules) > maxRouteRules {
		v.Errorf("spec.rules", "%d rules, more than %d", len(rules), maxRouteRules)
	}
	total := 0
	names := map[string]int{}
	for i, rule := range rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		checkRuleName(v, f, rule.name, names, i)
		total += rule.matches
		if rule.matches > maxRuleMatches {
			v.Errorf(f+".matches", "%d matches, more than %d", rule.matches, maxRuleMatches)
		}
		for j := range rule.matches {
			rule.checkMatch(v, fmt.Sprintf("%s.matches[%d]", f, j), j)
		}
		checkFilters(v, f+".filters", rule.filters, ruleFilters, grpc)
		if rule.redirects && len(rule.backends) > 0 {
			v.Errorf(f, "RequestRedirect filter must not be used together with backendRefs")
		}
		if !rule.redirects && len(rule.backends) == 0 {
			v.Warnf(f+".backendRefs", "no backendRefs: every call this rule matches fails with 500 (name the Services to send them to)")
		}
		if len(rule.backends) > maxRuleBackends {
			v.Errorf(f+".backendRefs", "%d backendRefs, more than %d", len(rule.backends), maxRuleBackends)
		}
		for j, b := range rule.backends {
			bf := fmt.Sprintf("%s.backendRefs[%d]", f, j)
			checkBackendRef(v, bf, b.BackendObjectReference)
			checkWeight(v, bf+".weight", *b.Weight)
			checkFilters(v, bf+".filters", rule.backendFilters[j], backendFilters, grpc)
		}
		checkWeightSum(v, f+".backendRefs", len(rule.backends), func(j int) int32 { return *rule.backends[j].Weight })
		rule.extra(v, f)
	}
	if total > maxRouteMatches {
		v.Errorf("spec.rules", "While 16 rules and 64 matches per rule are allowed, the total number of matches across all rules in a route must be less than 128 (this route has %d)", total)
	}
}

// ValidateHTTPRoute checks an HTTPRoute's spec (defaulted) by the CRD's
// rules and what the mesh supports.
func ValidateHTTPRoute(v Checker, s *gwv1.HTTPRouteSpec) {
	rules := make([]ruleView, len(s.Rules))
	for i, rule := range s.Rules {
		rv := ruleView{name: rule.Name, matches: len(rule.Matches), filters: rule.Filters,
			checkMatch: func(v Checker, f string, j int) { checkHTTPMatch(v, f, rule.Matches[j]) },
			redirects:  slices.ContainsFunc(rule.Filters, func(fl gwv1.HTTPRouteFilter) bool { return fl.Type == gwv1.HTTPRouteFilterRequestRedirect }),
			extra:      func(v Checker, f string) { checkHTTPRuleExtras(v, f, rule) }}
		for _, b := range rule.BackendRefs {
			rv.backends, rv.backendFilters = append(rv.backends, b.BackendRef), append(rv.backendFilters, b.Filters)
		}
		rules[i] = rv
	}
	validateRoute(v, s.ParentRefs, s.UseDefaultGateways, s.Hostnames, rules, false)
}

// checkHTTPRuleExtras checks what only HTTPRoute rules have: path
// modifiers against the matches, timeouts, and the experimental fields.
func checkHTTPRuleExtras(v Checker, f string, rule gwv1.HTTPRouteRule) {
	for _, fl := range rule.Filters {
		var pm *gwv1.HTTPPathModifier
		what := ""
		switch {
		case fl.RequestRedirect != nil && fl.RequestRedirect.Path != nil:
			pm, what = fl.RequestRedirect.Path, "RequestRedirect"
		case fl.URLRewrite != nil && fl.URLRewrite.Path != nil:
			pm, what = fl.URLRewrite.Path, "URLRewrite"
		}
		if pm != nil && pm.Type == gwv1.PrefixMatchHTTPPathModifier && pm.ReplacePrefixMatch != nil &&
			(len(rule.Matches) != 1 || *rule.Matches[0].Path.Type != gwv1.PathMatchPathPrefix) {
			v.Errorf(f, "When using %s filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified", what)
		}
	}
	if t := rule.Timeouts; t != nil {
		req := checkGWDuration(v, f+".timeouts.request", t.Request)
		be := checkGWDuration(v, f+".timeouts.backendRequest", t.BackendRequest)
		if t.Request != nil && t.BackendRequest != nil && req != 0 && be > req {
			v.Errorf(f+".timeouts", "backendRequest timeout cannot be longer than request timeout")
		}
	}
	if rt := rule.Retry; rt != nil {
		// The experimental channel's field, supported: its bounds.
		for i, c := range rt.Codes {
			if c < 400 || c > 599 {
				v.Errorf(fmt.Sprintf("%s.retry.codes[%d]", f, i), "status code %d is out of range: want 400-599", c)
			}
		}
		if rt.Attempts != nil && *rt.Attempts < 1 {
			v.Errorf(f+".retry.attempts", "%d: want 1 or more (leave retry out for none)", *rt.Attempts)
		}
		checkGWDuration(v, f+".retry.backoff", rt.Backoff)
	}
	checkSessionPersistence(v, f, rule.SessionPersistence)
}

func checkSessionPersistence(v Checker, f string, sp *gwv1.SessionPersistence) {
	if sp != nil {
		v.Errorf(f+".sessionPersistence", "not supported: session persistence is in the Gateway API's experimental channel and the mesh balances every call round robin")
	}
}

func checkRuleName(v Checker, f string, name *gwv1.SectionName, names map[string]int, i int) {
	if name == nil {
		return
	}
	if !sectionNamePattern.MatchString(string(*name)) || len(*name) > 253 {
		v.Errorf(f+".name", "%q is not a rule name: want lower-case letters, digits, '-' and '.'", *name)
	}
	if j, dup := names[string(*name)]; dup {
		v.Errorf(f+".name", "Rule name must be unique within the route (also spec.rules[%d])", j)
	}
	names[string(*name)] = i
}

func checkWeight(v Checker, f string, w int32) {
	if w < 0 || w > maxBackendWeight {
		v.Errorf(f, "weight %d is out of range: want 0-%d", w, maxBackendWeight)
	}
}

func checkWeightSum(v Checker, f string, n int, w func(int) int32) {
	total := 0
	for i := range n {
		if w(i) > 0 {
			total += int(w(i))
		}
	}
	if n > 0 && total == 0 {
		v.Warnf(f, "weights sum to 0: every call of this rule fails with 500 (give a backend a positive weight)")
	}
}

// ValidateGRPCRoute checks a GRPCRoute's spec (defaulted).
func ValidateGRPCRoute(v Checker, s *gwv1.GRPCRouteSpec) {
	rules := make([]ruleView, len(s.Rules))
	for i, rule := range s.Rules {
		rv := ruleView{name: rule.Name, matches: len(rule.Matches), filters: GRPCFilters(rule.Filters),
			checkMatch: func(v Checker, f string, j int) { checkGRPCMatch(v, f, rule.Matches[j]) },
			extra:      func(v Checker, f string) { checkSessionPersistence(v, f, rule.SessionPersistence) }}
		for _, b := range rule.BackendRefs {
			rv.backends, rv.backendFilters = append(rv.backends, b.BackendRef), append(rv.backendFilters, GRPCFilters(b.Filters))
		}
		rules[i] = rv
	}
	validateRoute(v, s.ParentRefs, s.UseDefaultGateways, s.Hostnames, rules, true)
}

// grpcFilters converts GRPCRoute filters to the HTTPRoute filters they
// share their fields with.
func GRPCFilters(fs []gwv1.GRPCRouteFilter) []gwv1.HTTPRouteFilter {
	out := make([]gwv1.HTTPRouteFilter, len(fs))
	for i, f := range fs {
		out[i] = gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterType(f.Type), RequestHeaderModifier: f.RequestHeaderModifier,
			ResponseHeaderModifier: f.ResponseHeaderModifier, RequestMirror: f.RequestMirror, ExtensionRef: f.ExtensionRef}
	}
	return out
}

// ValidateReferenceGrant checks a ReferenceGrant's spec.
func ValidateReferenceGrant(v Checker, s *gwv1.ReferenceGrantSpec) {
	if len(s.From) == 0 || len(s.From) > maxReferenceGrantEntries {
		v.Errorf("spec.from", "want 1 to %d entries, got %d", maxReferenceGrantEntries, len(s.From))
	}
	if len(s.To) == 0 || len(s.To) > maxReferenceGrantEntries {
		v.Errorf("spec.to", "want 1 to %d entries, got %d", maxReferenceGrantEntries, len(s.To))
	}
	for i, f := range s.From {
		ff := fmt.Sprintf("spec.from[%d]", i)
		if string(f.Group) != Group || !slices.Contains([]gwv1.Kind{KindHTTPRoute, KindGRPCRoute, KindTCPRoute, KindTLSRoute}, f.Kind) {
			v.Warnf(ff, "grants to %s (group %q), which osm-vm does not have: it allows nothing here (routes are group %s, kind HTTPRoute, GRPCRoute, TCPRoute or TLSRoute)", f.Kind, f.Group, Group)
		}
		if err := mesh.ValidateLabel("namespace", string(f.Namespace)); err != nil {
			v.Errorf(ff+".namespace", "%v", err)
		}
	}
	for i, t := range s.To {
		tf := fmt.Sprintf("spec.to[%d]", i)
		if string(t.Group) != "" || t.Kind != kindService {
			v.Warnf(tf, "grants access to %s (group %q), which osm-vm does not have: it allows nothing here (routes refer to group \"\", kind Service)", t.Kind, t.Group)
		}
		if t.Name != nil {
			if err := mesh.ValidateLabel("name", string(*t.Name)); err != nil {
				v.Errorf(tf+".name", "%v", err)
			}
		}
	}
}
