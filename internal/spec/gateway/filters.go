package gateway

// The checks of HTTPRoute and GRPCRoute filters (header modifiers, path
// modifiers, redirects, rewrites, mirrors), by where a filter sits.

import (
	"fmt"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func checkHeaderFilter(v Checker, f string, h *gwv1.HTTPHeaderFilter) {
	seen := map[string]string{}
	for _, list := range []struct {
		name string
		hs   []gwv1.HTTPHeader
	}{{"set", h.Set}, {"add", h.Add}} {
		if len(list.hs) > maxHeaderModifiers {
			v.Errorf(f+"."+list.name, "%d headers, more than %d", len(list.hs), maxHeaderModifiers)
		}
		for i, hd := range list.hs {
			hf := fmt.Sprintf("%s.%s[%d]", f, list.name, i)
			checkHeaderName(v, hf+".name", string(hd.Name))
			key := list.name + "/" + strings.ToLower(string(hd.Name))
			if _, dup := seen[key]; dup {
				v.Errorf(hf+".name", "header %q is listed twice in %s: give it once", hd.Name, list.name)
			}
			seen[key] = hf
			if len(hd.Value) > maxHeaderValueLength {
				v.Errorf(hf+".value", "%d characters, more than %d", len(hd.Value), maxHeaderValueLength)
			}
		}
	}
	if len(h.Remove) > maxHeaderModifiers {
		v.Errorf(f+".remove", "%d headers, more than %d", len(h.Remove), maxHeaderModifiers)
	}
	for i, name := range h.Remove {
		checkHeaderName(v, fmt.Sprintf("%s.remove[%d]", f, i), name)
	}
	if len(h.Set)+len(h.Add)+len(h.Remove) == 0 {
		v.Errorf(f, "empty: give set, add or remove")
	}
}

func checkPathModifier(v Checker, f string, p *gwv1.HTTPPathModifier) {
	switch p.Type {
	case gwv1.FullPathHTTPPathModifier:
		if p.ReplaceFullPath == nil {
			v.Errorf(f, "replaceFullPath must be specified when type is set to 'ReplaceFullPath'")
		}
		if p.ReplacePrefixMatch != nil {
			v.Errorf(f, "type must be 'ReplacePrefixMatch' when replacePrefixMatch is set")
		}
	case gwv1.PrefixMatchHTTPPathModifier:
		if p.ReplacePrefixMatch == nil {
			v.Errorf(f, "replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'")
		}
		if p.ReplaceFullPath != nil {
			v.Errorf(f, "type must be 'ReplaceFullPath' when replaceFullPath is set")
		}
	default:
		v.Errorf(f+".type", "unsupported type %q: want ReplaceFullPath or ReplacePrefixMatch", p.Type)
	}
	for _, s := range []*string{p.ReplaceFullPath, p.ReplacePrefixMatch} {
		if s != nil && len(*s) > maxPathLength {
			v.Errorf(f, "%d characters, more than %d", len(*s), maxPathLength)
		}
		if s != nil && !strings.HasPrefix(*s, "/") {
			v.Errorf(f, "%q is not an absolute path: start it with '/'", *s)
		}
	}
}

// filterContext says where a filter list is.
type filterContext int

const (
	ruleFilters filterContext = iota
	backendFilters
)

// checkFilters applies the CRD's rules to a filter list and refuses the
// filters the mesh does not implement.
func checkFilters(v Checker, field string, fs []gwv1.HTTPRouteFilter, where filterContext, grpc bool) {
	if len(fs) > maxRuleFilters {
		v.Errorf(field, "%d filters, more than %d", len(fs), maxRuleFilters)
	}
	count := map[gwv1.HTTPRouteFilterType]int{}
	for i, flt := range fs {
		f := fmt.Sprintf("%s[%d]", field, i)
		count[flt.Type]++
		present := map[gwv1.HTTPRouteFilterType]bool{
			gwv1.HTTPRouteFilterRequestHeaderModifier:  flt.RequestHeaderModifier != nil,
			gwv1.HTTPRouteFilterResponseHeaderModifier: flt.ResponseHeaderModifier != nil,
			gwv1.HTTPRouteFilterRequestMirror:          flt.RequestMirror != nil,
			gwv1.HTTPRouteFilterRequestRedirect:        flt.RequestRedirect != nil,
			gwv1.HTTPRouteFilterURLRewrite:             flt.URLRewrite != nil,
			gwv1.HTTPRouteFilterCORS:                   flt.CORS != nil,
			gwv1.HTTPRouteFilterExternalAuth:           flt.ExternalAuth != nil,
			gwv1.HTTPRouteFilterExtensionRef:           flt.ExtensionRef != nil,
		}
		for _, t := range []gwv1.HTTPRouteFilterType{gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
			gwv1.HTTPRouteFilterRequestMirror, gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite,
			gwv1.HTTPRouteFilterCORS, gwv1.HTTPRouteFilterExternalAuth, gwv1.HTTPRouteFilterExtensionRef} {
			sub := strings.ToLower(string(t[:1])) + string(t[1:])
			if t == gwv1.HTTPRouteFilterCORS {
				sub = "cors"
			} else if t == gwv1.HTTPRouteFilterURLRewrite {
				sub = "urlRewrite"
			}
			if present[t] && flt.Type != t {
				v.Errorf(f+"."+sub, "filter.%s must be nil if the filter.type is not %s", sub, t)
			}
			if !present[t] && flt.Type == t {
				v.Errorf(f+"."+sub, "filter.%s must be specified for %s filter.type", sub, t)
			}
		}
		if !present[flt.Type] {
			continue // said above (or an unknown type, said below)
		}
		supported := []gwv1.HTTPRouteFilterType{gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
			gwv1.HTTPRouteFilterRequestMirror, gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite}
		if grpc {
			supported = supported[:3]
		}
		if where == backendFilters {
			// Envoy modifies headers per weighted backend, nothing else.
			supported = supported[:2]
		}
		if !slices.Contains(supported, flt.Type) {
			names := make([]string, len(supported))
			for i, s := range supported {
				names[i] = string(s)
			}
			place := "a rule"
			if where == backendFilters {
				place = "a backendRef"
			}
			v.Errorf(f+".type", "filter %s is not supported on %s: osm-vm supports %s there", flt.Type, place, strings.Join(names, ", "))
			continue
		}
		switch flt.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			checkHeaderFilter(v, f+".requestHeaderModifier", flt.RequestHeaderModifier)
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			checkHeaderFilter(v, f+".responseHeaderModifier", flt.ResponseHeaderModifier)
		case gwv1.HTTPRouteFilterRequestMirror:
			m := flt.RequestMirror
			checkBackendRef(v, f+".requestMirror.backendRef", m.BackendRef)
			if m.Percent != nil && m.Fraction != nil {
				v.Errorf(f+".requestMirror", "Only one of percent or fraction may be specified in HTTPRequestMirrorFilter")
			}
			if m.Percent != nil && (*m.Percent < 0 || *m.Percent > 100) {
				v.Errorf(f+".requestMirror.percent", "%d is out of range: want 0-100", *m.Percent)
			}
			if fr := m.Fraction; fr != nil {
				switch {
				case fr.Numerator < 0:
					v.Errorf(f+".requestMirror.fraction.numerator", "negative: want 0 or more")
				case *fr.Denominator < 1:
					v.Errorf(f+".requestMirror.fraction.denominator", "want 1 or more")
				case fr.Numerator > *fr.Denominator:
					v.Errorf(f+".requestMirror.fraction", "numerator must be less than or equal to denominator")
				}
			}
		case gwv1.HTTPRouteFilterRequestRedirect:
			r := flt.RequestRedirect
			if r.Scheme != nil && *r.Scheme != "http" && *r.Scheme != "https" {
				v.Errorf(f+".requestRedirect.scheme", "unsupported scheme %q: want http or https", *r.Scheme)
			}
			if r.Hostname != nil && !preciseHostPattern.MatchString(string(*r.Hostname)) {
				v.Errorf(f+".requestRedirect.hostname", "%q is not a host name", *r.Hostname)
			}
			if r.Path != nil {
				checkPathModifier(v, f+".requestRedirect.path", r.Path)
			}
			if r.Port != nil {
				v.CheckPort(f+".requestRedirect.port", int(*r.Port))
			}
			if !slices.Contains([]int{301, 302, 303, 307, 308}, *r.StatusCode) {
				v.Errorf(f+".requestRedirect.statusCode", "unsupported status code %d: want 301, 302, 303, 307 or 308", *r.StatusCode)
			}
		case gwv1.HTTPRouteFilterURLRewrite:
			r := flt.URLRewrite
			if r.Hostname != nil && !preciseHostPattern.MatchString(string(*r.Hostname)) {
				v.Errorf(f+".urlRewrite.hostname", "%q is not a host name", *r.Hostname)
			}
			if r.Path != nil {
				checkPathModifier(v, f+".urlRewrite.path", r.Path)
			}
		}
	}
	for _, t := range []gwv1.HTTPRouteFilterType{gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
		gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite, gwv1.HTTPRouteFilterCORS} {
		if count[t] > 1 {
			v.Errorf(field, "%s filter cannot be repeated", t)
		}
	}
	if count[gwv1.HTTPRouteFilterRequestRedirect] > 0 && count[gwv1.HTTPRouteFilterURLRewrite] > 0 {
		v.Errorf(field, "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both")
	}
}
