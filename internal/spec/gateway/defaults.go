package gateway

import gwv1 "sigs.k8s.io/gateway-api/apis/v1"

func ptr[T any](v T) *T { return &v }

// setDefaults applies the CRD's defaults, as the API server would.
func defaultParentRefs(refs []gwv1.ParentReference) {
	for i := range refs {
		p := &refs[i]
		if p.Group == nil {
			p.Group = ptr(gwv1.Group(Group))
		}
		if p.Kind == nil {
			p.Kind = ptr(gwv1.Kind(KindGateway))
		}
	}
}

func defaultBackendRef(b *gwv1.BackendObjectReference) {
	if b.Group == nil {
		b.Group = ptr(gwv1.Group(""))
	}
	if b.Kind == nil {
		b.Kind = ptr(gwv1.Kind(kindService))
	}
}

func defaultFilters(fs []gwv1.HTTPRouteFilter) {
	for i := range fs {
		f := &fs[i]
		if f.RequestMirror != nil {
			defaultBackendRef(&f.RequestMirror.BackendRef)
			if fr := f.RequestMirror.Fraction; fr != nil && fr.Denominator == nil {
				fr.Denominator = ptr(int32(100))
			}
		}
		if f.RequestRedirect != nil && f.RequestRedirect.StatusCode == nil {
			f.RequestRedirect.StatusCode = ptr(302)
		}
	}
}

// DefaultHTTPRoute applies the HTTPRoute CRD's defaults to s, as the API
// server would.
func DefaultHTTPRoute(s *gwv1.HTTPRouteSpec) {
	defaultParentRefs(s.ParentRefs)
	if len(s.Rules) == 0 {
		s.Rules = []gwv1.HTTPRouteRule{{}}
	}
	for i := range s.Rules {
		rule := &s.Rules[i]
		if len(rule.Matches) == 0 {
			rule.Matches = []gwv1.HTTPRouteMatch{{}}
		}
		for j := range rule.Matches {
			m := &rule.Matches[j]
			if m.Path == nil {
				m.Path = &gwv1.HTTPPathMatch{}
			}
			if m.Path.Type == nil {
				m.Path.Type = ptr(gwv1.PathMatchPathPrefix)
			}
			if m.Path.Value == nil {
				m.Path.Value = ptr("/")
			}
			for k := range m.Headers {
				if m.Headers[k].Type == nil {
					m.Headers[k].Type = ptr(gwv1.HeaderMatchExact)
				}
			}
			for k := range m.QueryParams {
				if m.QueryParams[k].Type == nil {
					m.QueryParams[k].Type = ptr(gwv1.QueryParamMatchExact)
				}
			}
		}
		defaultFilters(rule.Filters)
		for j := range rule.BackendRefs {
			b := &rule.BackendRefs[j]
			defaultBackendRef(&b.BackendObjectReference)
			if b.Weight == nil {
				b.Weight = ptr(int32(1))
			}
			defaultFilters(b.Filters)
		}
	}
}

// DefaultGRPCRoute applies the GRPCRoute CRD's defaults to s.
func DefaultGRPCRoute(s *gwv1.GRPCRouteSpec) {
	defaultParentRefs(s.ParentRefs)
	if len(s.Rules) == 0 {
		s.Rules = []gwv1.GRPCRouteRule{{}}
	}
	for i := range s.Rules {
		rule := &s.Rules[i]
		for j := range rule.Matches {
			m := &rule.Matches[j]
			if m.Method != nil && m.Method.Type == nil {
				m.Method.Type = ptr(gwv1.GRPCMethodMatchExact)
			}
			for k := range m.Headers {
				if m.Headers[k].Type == nil {
					m.Headers[k].Type = ptr(gwv1.GRPCHeaderMatchExact)
				}
			}
		}
		for j := range rule.Filters {
			defaultGRPCFilter(&rule.Filters[j])
		}
		for j := range rule.BackendRefs {
			b := &rule.BackendRefs[j]
			defaultBackendRef(&b.BackendObjectReference)
			if b.Weight == nil {
				b.Weight = ptr(int32(1))
			}
			for k := range b.Filters {
				defaultGRPCFilter(&b.Filters[k])
			}
		}
	}
}

func defaultGRPCFilter(f *gwv1.GRPCRouteFilter) {
	if f.RequestMirror != nil {
		defaultBackendRef(&f.RequestMirror.BackendRef)
		if fr := f.RequestMirror.Fraction; fr != nil && fr.Denominator == nil {
			fr.Denominator = ptr(int32(100))
		}
	}
}

// DefaultL4Route applies the TCPRoute and TLSRoute CRDs' defaults to a
// route's parentRefs and rules (a TLSRoute's in the TCPRoute form).
func DefaultL4Route(parents []gwv1.ParentReference, rules []gwv1.TCPRouteRule) {
	defaultParentRefs(parents)
	defaultL4Rules(rules)
}

func defaultL4Rules(rules []gwv1.TCPRouteRule) {
	for _, rule := range rules {
		for j := range rule.BackendRefs {
			b := &rule.BackendRefs[j]
			defaultBackendRef(&b.BackendObjectReference)
			if b.Weight == nil {
				b.Weight = ptr(int32(1))
			}
		}
	}
}

// DefaultGateway applies the Gateway CRD's defaults to s.
func DefaultGateway(s *gwv1.GatewaySpec) {
	for i := range s.Listeners {
		l := &s.Listeners[i]
		if l.AllowedRoutes == nil {
			l.AllowedRoutes = &gwv1.AllowedRoutes{}
		}
		if l.AllowedRoutes.Namespaces == nil {
			l.AllowedRoutes.Namespaces = &gwv1.RouteNamespaces{}
		}
		if l.AllowedRoutes.Namespaces.From == nil {
			l.AllowedRoutes.Namespaces.From = ptr(gwv1.NamespacesFromSame)
		}
		for j := range l.AllowedRoutes.Kinds {
			if l.AllowedRoutes.Kinds[j].Group == nil {
				l.AllowedRoutes.Kinds[j].Group = ptr(gwv1.Group(Group))
			}
		}
		if l.TLS != nil {
			if l.TLS.Mode == nil {
				l.TLS.Mode = ptr(gwv1.TLSModeTerminate)
			}
			for j := range l.TLS.CertificateRefs {
				r := &l.TLS.CertificateRefs[j]
				if r.Group == nil {
					r.Group = ptr(gwv1.Group(""))
				}
				if r.Kind == nil {
					r.Kind = ptr(gwv1.Kind("Secret"))
				}
			}
		}
	}
}
