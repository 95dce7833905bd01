package gateway

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// wildcardHostPattern is the upstream Hostname pattern (a precise name,
// or "*." and one).
var wildcardHostPattern = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func checkGatewayHostname(v Checker, f string, h gwv1.Hostname) {
	if len(h) > 253 || !wildcardHostPattern.MatchString(string(h)) {
		v.Errorf(f, "%q: Hostname value must only contain valid characters (matching ^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$): want lower-case DNS labels, optionally after \"*.\" (such as shop.example.com or *.example.com)", h)
	}
}

// ValidateGateway checks a Gateway's spec (defaulted).
func ValidateGateway(v Checker, spec *gwv1.GatewaySpec) {
	s := *spec
	if s.GatewayClassName != ClassName {
		v.Errorf("spec.gatewayClassName", "%q is not a class osm-vm implements: set gatewayClassName: %s (its controller is %s)", s.GatewayClassName, ClassName, ControllerName)
	}
	unsupported := func(field string, set bool) {
		if set {
			v.Errorf(field, "not supported: osm-vm's gateways listen on their machines' own addresses; remove it")
		}
	}
	unsupported("spec.addresses", len(s.Addresses) > 0)
	unsupported("spec.infrastructure", s.Infrastructure != nil)
	unsupported("spec.allowedListeners", s.AllowedListeners != nil)
	unsupported("spec.tls", s.TLS != nil)
	unsupported("spec.defaultScope", s.DefaultScope != "")
	if len(s.Listeners) == 0 || len(s.Listeners) > maxGatewayListen {
		v.Errorf("spec.listeners", "want 1 to %d listeners, got %d", maxGatewayListen, len(s.Listeners))
	}
	names := map[string]int{}
	type phk struct {
		port  int
		proto gwv1.ProtocolType
		host  string
	}
	seen := map[phk]int{}
	protoOfPort := map[int]gwv1.ProtocolType{}
	for i, l := range s.Listeners {
		f := fmt.Sprintf("spec.listeners[%d]", i)
		if !sectionNamePattern.MatchString(string(l.Name)) || len(l.Name) > 253 {
			v.Errorf(f+".name", "%q is not a listener name: want lower-case letters, digits, '-' and '.'", l.Name)
		}
		if j, dup := names[string(l.Name)]; dup {
			v.Errorf(f+".name", "Listener name must be unique within the Gateway (also spec.listeners[%d])", j)
		}
		names[string(l.Name)] = i
		v.CheckPort(f+".port", int(l.Port))
		host := ""
		if l.Hostname != nil {
			host = string(*l.Hostname)
			checkGatewayHostname(v, f+".hostname", *l.Hostname)
		}
		k := phk{int(l.Port), l.Protocol, host}
		if j, dup := seen[k]; dup {
			v.Errorf(f, "Combination of port, protocol and hostname must be unique for each listener (also spec.listeners[%d])", j)
		}
		seen[k] = i
		if p, ok := protoOfPort[int(l.Port)]; ok && p != l.Protocol {
			v.Errorf(f+".protocol", "port %d is %s in another listener: osm-vm serves one protocol per port; use another port", l.Port, p)
		}
		protoOfPort[int(l.Port)] = l.Protocol
		switch l.Protocol {
		case gwv1.HTTPProtocolType:
			if l.TLS != nil {
				v.Errorf(f+".tls", "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']: use protocol HTTPS")
			}
		case gwv1.HTTPSProtocolType:
			checkListenerTLS(v, f+".tls", l.TLS)
		case gwv1.TLSProtocolType, gwv1.TCPProtocolType:
			checkL4Listener(v, f, l)
		case gwv1.UDPProtocolType:
			v.Errorf(f+".protocol", "protocol UDP is not supported: it takes UDPRoutes, which osm-vm does not implement (the mesh carries TCP only); use TCP, TLS, HTTP or HTTPS")
		default:
			v.Errorf(f+".protocol", "unsupported protocol %q: want HTTP, HTTPS, TLS or TCP%s", l.Protocol, v.DidYouMean(string(l.Protocol), []string{"HTTP", "HTTPS", "TLS", "TCP"}))
		}
		ar := l.AllowedRoutes
		switch *ar.Namespaces.From {
		case gwv1.NamespacesFromSame, gwv1.NamespacesFromAll, gwv1.NamespacesFromNone:
		case gwv1.NamespacesFromSelector:
			v.Errorf(f+".allowedRoutes.namespaces.from", "Selector is not supported: osm-vm's namespaces have no labels; use Same or All")
		default:
			v.Errorf(f+".allowedRoutes.namespaces.from", "unsupported value %q: want Same, All or None", *ar.Namespaces.From)
		}
		if ar.Namespaces.Selector != nil {
			v.Errorf(f+".allowedRoutes.namespaces.selector", "not supported: osm-vm's namespaces have no labels; remove it")
		}
		for j, rk := range ar.Kinds {
			if ok := RouteKinds(l.Protocol); string(*rk.Group) != Group || !slices.Contains(ok, rk.Kind) {
				v.Errorf(fmt.Sprintf("%s.allowedRoutes.kinds[%d]", f, j), "kind %s (group %q) cannot attach to an %s listener: want %s of group %s", rk.Kind, *rk.Group, l.Protocol, KindList(ok), Group)
			}
		}
	}
}

func checkListenerTLS(v Checker, f string, t *gwv1.ListenerTLSConfig) {
	if t == nil {
		v.Errorf(f, "an HTTPS listener needs tls: {certificateRefs: [{name: <secret>}]} (the certificate's files on the gateway machines; see docs/mesh-spec.md)")
		return
	}
	if *t.Mode != gwv1.TLSModeTerminate {
		v.Errorf(f+".mode", "tls mode must be Terminate for protocol HTTPS (mode %s takes TLSRoutes: use protocol TLS)", *t.Mode)
	}
	switch len(t.CertificateRefs) {
	case 0:
		v.Errorf(f+".certificateRefs", "certificateRefs or options must be specified when mode is Terminate: give one certificateRef (a Secret, whose PEM files are on the gateway machines)")
	case 1:
	default:
		v.Errorf(f+".certificateRefs", "%d certificateRefs: osm-vm wants exactly one (a Secret, whose PEM files are on the gateway machines)", len(t.CertificateRefs))
	}
	for i, r := range t.CertificateRefs {
		rf := fmt.Sprintf("%s.certificateRefs[%d]", f, i)
		if *r.Group != "" || *r.Kind != "Secret" {
			v.Errorf(rf, "kind %s (group %q) is not supported: refer to a Secret (group \"\", kind Secret)", *r.Kind, *r.Group)
		}
		if err := mesh.ValidateLabel("secret name", string(r.Name)); err != nil {
			v.Errorf(rf+".name", "%v", err)
		}
		if r.Namespace != nil {
			if err := mesh.ValidateLabel("namespace", string(*r.Namespace)); err != nil {
				v.Errorf(rf+".namespace", "%v", err)
			}
		}
	}
	if len(t.Options) > 0 {
		v.Errorf(f+".options", "not supported: remove them")
	}
}

// ValidateTCPRoute checks a Gateway API TCPRoute's spec (defaulted).
func ValidateTCPRoute(v Checker, s *gwv1.TCPRouteSpec) {
	validateL4Route(v, KindTCPRoute, s.ParentRefs, s.UseDefaultGateways, s.Rules, "TCP")
}

// ValidateTLSRoute checks a TLSRoute's spec (defaulted).
func ValidateTLSRoute(v Checker, s *gwv1.TLSRouteSpec) {
	rules := make([]gwv1.TCPRouteRule, len(s.Rules))
	for i, rule := range s.Rules {
		rules[i] = gwv1.TCPRouteRule(rule)
	}
	validateL4Route(v, KindTLSRoute, s.ParentRefs, s.UseDefaultGateways, rules, "TLS")
	hs := s.Hostnames
	if len(hs) == 0 || len(hs) > maxTLSRouteHostnames {
		v.Errorf("spec.hostnames", "want 1 to %d host names (the SNI names the route serves), got %d", maxTLSRouteHostnames, len(hs))
	}
	for i, h := range hs {
		f := fmt.Sprintf("spec.hostnames[%d]", i)
		switch {
		case isIPName(string(h)):
			v.Errorf(f, "%q: Hostnames cannot contain an IP (SNI carries names only, RFC 6066)", h)
		case strings.Contains(string(h), "*") && (!strings.HasPrefix(string(h), "*.") || !preciseHostPattern.MatchString(string(h)[2:])):
			v.Errorf(f, "%q: Wildcards on hostnames must be the first label, and the rest of hostname must be valid based on RFC-1123 (such as *.example.com)", h)
		case !strings.Contains(string(h), "*") && !preciseHostPattern.MatchString(string(h)):
			v.Errorf(f, "%q: Hostnames must be valid based on RFC-1123: want lower-case DNS labels (such as db.example.com)", h)
		case len(h) > 253:
			v.Errorf(f, "%d characters, more than 253", len(h))
		}
	}
}

func isIPName(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// validateL4Route applies the CRD's rules TCPRoute and TLSRoute share:
// Gateway parents only, exactly one rule of 1 to 16 backendRefs.
func validateL4Route(v Checker, kind string, parents []gwv1.ParentReference, useDefault gwv1.GatewayDefaultScope, rules []gwv1.TCPRouteRule, proto string) {
	routeParents(v, parents)
	for i, p := range parents {
		if !IsGatewayRef(p) && string(*p.Group) == "" && string(*p.Kind) == kindService {
			v.Errorf(fmt.Sprintf("spec.parentRefs[%d]", i), "a %s attaches to a Gateway's %s listeners ({name: <gateway>, sectionName: <listener>}), not to a Service: the mesh's own TCP traffic is routed by SMI TrafficSplits", kind, proto)
		}
	}
	if useDefault != "" {
		v.Errorf("spec.useDefaultGateways", "not supported: a route attaches to the Gateways its parentRefs name")
	}
	if len(rules) != 1 {
		v.Errorf("spec.rules", "want exactly 1 rule (the CRD's bounds), got %d: put every backend into one rule's backendRefs", len(rules))
	}
	names := map[string]int{}
	for i, rule := range rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		checkRuleName(v, f, rule.Name, names, i)
		if len(rule.BackendRefs) == 0 || len(rule.BackendRefs) > maxRuleBackends {
			v.Errorf(f+".backendRefs", "want 1 to %d backendRefs, got %d", maxRuleBackends, len(rule.BackendRefs))
		}
		total := 0
		for j, b := range rule.BackendRefs {
			bf := fmt.Sprintf("%s.backendRefs[%d]", f, j)
			checkBackendRef(v, bf, b.BackendObjectReference)
			checkWeight(v, bf+".weight", *b.Weight)
			total += max(int(*b.Weight), 0)
		}
		if len(rule.BackendRefs) > 0 && total == 0 {
			v.Warnf(f+".backendRefs", "weights sum to 0: every connection of this rule is refused (give a backend a positive weight)")
		}
	}
}

// l4References checks a layer-4 route's backends against st (apply):
// the gateway carries raw connections, so each backend port must be a tcp

// routeKinds returns the route kinds a listener of protocol p admits.
func RouteKinds(p gwv1.ProtocolType) []gwv1.Kind {
	switch p {
	case gwv1.TCPProtocolType:
		return []gwv1.Kind{KindTCPRoute}
	case gwv1.TLSProtocolType:
		return []gwv1.Kind{KindTLSRoute}
	}
	return []gwv1.Kind{KindHTTPRoute, KindGRPCRoute}
}

// checkL4Listener checks a TCP or TLS listener (Gateway.validate).
func checkL4Listener(v Checker, f string, l gwv1.Listener) {
	switch l.Protocol {
	case gwv1.TCPProtocolType:
		if l.TLS != nil {
			v.Errorf(f+".tls", "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']: use protocol TLS")
		}
		if l.Hostname != nil && *l.Hostname != "" {
			v.Errorf(f+".hostname", "hostname must not be specified for protocols ['TCP', 'UDP']: a TCP connection carries no host name (use protocol TLS to route by SNI)")
		}
	case gwv1.TLSProtocolType:
		t := l.TLS
		if t == nil {
			v.Errorf(f+".tls", "tls mode must be set for protocol TLS: give tls: {mode: Passthrough} (or mode: Terminate with one certificateRef)")
			return
		}
		switch *t.Mode {
		case gwv1.TLSModePassthrough:
			if len(t.CertificateRefs) > 0 {
				v.Errorf(f+".tls.certificateRefs", "a Passthrough listener holds no certificate (the backends terminate the clients' TLS): remove them")
			}
			if len(t.Options) > 0 {
				v.Errorf(f+".tls.options", "not supported: remove them")
			}
		case gwv1.TLSModeTerminate:
			checkListenerTLS(v, f+".tls", t)
		default:
			v.Errorf(f+".tls.mode", "unsupported mode %q: want Passthrough or Terminate", *t.Mode)
		}
	}
}

func KindList(ks []gwv1.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, " or ")
}
