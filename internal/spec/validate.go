package spec

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

var appProtocols = []string{"http", "tcp", "grpc"}

// Bounds of the numbers in the documents (ports are 1-maxPort).
const (
	// maxWeight bounds each TrafficSplit weight and their sum: Envoy's
	// weighted clusters and gRPC's weighted targets carry uint32 weights
	// and refuse a total that does not fit one.
	maxWeight = math.MaxUint32
	// Certificate lifetimes: at least a second, and at most a year, well
	// within the mesh root's ten years (a leaf must not outlive its root).
	minLifetime = time.Second
	maxLifetime = 365 * 24 * time.Hour
	// The VIP range is a /8 (16 M addresses) to a /30 (two).
	minVIPBits, maxVIPBits = 8, 30
)

func checkPort(v *validator, field string, p int) {
	if p < 1 || p > maxPort {
		v.errorf(field, "port %d is out of range: want 1-65535", p)
	}
}

func (s *Service) validate(v *validator) {
	if len(s.Spec.Ports) == 0 {
		v.errorf("spec.ports", "a Service needs at least one port: add one such as {name: http, port: 8080, appProtocol: http}")
	}
	seenPort := map[int]int{}
	seenName := map[string]int{}
	for i, p := range s.Spec.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		checkPort(v, f+".port", p.Port)
		if p.TargetPort != p.Port {
			checkPort(v, f+".targetPort", p.TargetPort)
		}
		if j, ok := seenPort[p.Port]; ok {
			v.errorf(f+".port", "duplicate port %d (also spec.ports[%d]): give each port once", p.Port, j)
		} else {
			seenPort[p.Port] = i
		}
		if p.Name != "" {
			if err := mesh.ValidateLabel("port name", p.Name); err != nil {
				v.errorf(f+".name", "%v", err)
			}
			if j, ok := seenName[p.Name]; ok {
				v.errorf(f+".name", "duplicate port name %q (also spec.ports[%d]): give each port its own name", p.Name, j)
			} else {
				seenName[p.Name] = i
			}
		}
		if !slices.Contains(appProtocols, p.AppProtocol) {
			v.errorf(f+".appProtocol", "unsupported appProtocol %q: want http, tcp or grpc%s", p.AppProtocol, didYouMean(p.AppProtocol, appProtocols))
		}
	}
	validateExternalDNSName(v, s.Metadata.Annotations)
	if s.Spec.ServiceAccount != s.Metadata.Name { // the name is checked already
		if err := mesh.ValidateLabel("service account", s.Spec.ServiceAccount); err != nil {
			v.errorf("spec.serviceAccount", "%v", err)
		}
	}
}

func validateSubject(v *validator, field string, s IdentityBindingSubject) {
	if s.Kind != serviceAccountKindSMI {
		v.errorf(field+".kind", "unsupported kind %q: want ServiceAccount", s.Kind)
	}
	if err := mesh.ValidateLabel("service account", s.Name); err != nil {
		v.errorf(field+".name", "%v", err)
	}
	if err := mesh.ValidateLabel("namespace", s.Namespace); err != nil {
		v.errorf(field+".namespace", "%v", err)
	}
	if s.Port != nil {
		checkPort(v, field+".port", *s.Port)
	}
}

var ruleKinds = []string{KindHTTPRouteGroup, KindTCPRoute}

func (t *TrafficTarget) validate(v *validator) {
	validateSubject(v, "spec.destination", t.Spec.Destination)
	if len(t.Spec.Sources) == 0 {
		v.errorf("spec.sources", "no sources: add at least one {kind: ServiceAccount, name: ...}")
	}
	for i, s := range t.Spec.Sources {
		validateSubject(v, fmt.Sprintf("spec.sources[%d]", i), s)
	}
	if len(t.Spec.Rules) == 0 {
		v.errorf("spec.rules", "no rules: add at least one {kind: HTTPRouteGroup or TCPRoute, name: ...}")
	}
	for i, r := range t.Spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		if !slices.Contains(ruleKinds, r.Kind) {
			v.errorf(f+".kind", "unsupported rule kind %q: want HTTPRouteGroup or TCPRoute%s", r.Kind, didYouMean(r.Kind, ruleKinds))
		}
		if err := mesh.ValidateLabel("rule name", r.Name); err != nil {
			v.errorf(f+".name", "%v", err)
		}
	}
}

var httpMethods = []string{"*", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE"}

func (g *HTTPRouteGroup) validate(v *validator) {
	if len(g.Spec.Matches) == 0 {
		v.errorf("spec.matches", "no matches: add at least one {name: ..., pathRegex: ..., methods: [...]}")
	}
	seen := map[string]int{}
	for i, m := range g.Spec.Matches {
		f := fmt.Sprintf("spec.matches[%d]", i)
		if m.Name == "" {
			v.errorf(f+".name", "missing: name the match so TrafficTarget rules can refer to it")
		} else if j, ok := seen[m.Name]; ok {
			v.errorf(f+".name", "duplicate match name %q (also spec.matches[%d]): give each match its own name", m.Name, j)
		} else {
			seen[m.Name] = i
		}
		checkRegex(v, f+".pathRegex", m.PathRegex)
		for j, meth := range m.Methods {
			if !slices.Contains(httpMethods, meth) {
				v.errorf(fmt.Sprintf("%s.methods[%d]", f, j), "unsupported method %q: want one of %s%s", meth, strings.Join(httpMethods, ", "), didYouMean(meth, httpMethods))
			}
		}
		for _, h := range sortedKeys(m.Headers) {
			if h == "" {
				v.errorf(f+".headers", "empty header name: remove it")
			}
			checkRegex(v, f+".headers."+h, m.Headers[h])
		}
	}
}

// regexErr strips the "error parsing regexp: " prefix Go adds.
func regexErr(err error) string {
	return strings.TrimPrefix(err.Error(), "error parsing regexp: ")
}

func (r *TCPRoute) validate(v *validator) {
	for i, p := range r.Spec.Matches.Ports {
		checkPort(v, fmt.Sprintf("spec.matches.ports[%d]", i), p)
	}
}

func (s *TrafficSplit) validate(v *validator) {
	if err := mesh.ValidateLabel("service name", s.Spec.Service); err != nil {
		v.errorf("spec.service", "%v", err)
	}
	if len(s.Spec.Backends) == 0 {
		v.errorf("spec.backends", "no backends: add at least one {service: ..., weight: ...}")
	}
	total := 0
	seen := map[string]int{}
	for i, b := range s.Spec.Backends {
		f := fmt.Sprintf("spec.backends[%d]", i)
		if err := mesh.ValidateLabel("service name", b.Service); err != nil {
			v.errorf(f+".service", "%v", err)
		} else if j, ok := seen[b.Service]; ok {
			v.errorf(f+".service", "duplicate backend %q (also spec.backends[%d]): list each backend once", b.Service, j)
		} else {
			seen[b.Service] = i
		}
		switch {
		case b.Weight < 0:
			v.errorf(f+".weight", "negative weight %d: want 0 or more", b.Weight)
		case b.Weight > maxWeight:
			v.errorf(f+".weight", "weight %d is out of range: want 0-%d", b.Weight, maxWeight)
		default:
			total += b.Weight // at most len(backends) * 2^32: no overflow
		}
	}
	switch {
	case len(s.Spec.Backends) > 0 && total == 0:
		v.errorf("spec.backends", "weights sum to 0: give at least one backend a positive weight")
	case total > maxWeight:
		v.errorf("spec.backends", "weights sum to %d, more than %d (Envoy and gRPC refuse larger totals): scale the weights down, such as to percentages", total, maxWeight)
	}
	for i, m := range s.Spec.Matches {
		f := fmt.Sprintf("spec.matches[%d]", i)
		if !slices.Contains(ruleKinds, m.Kind) {
			v.errorf(f+".kind", "unsupported kind %q: want HTTPRouteGroup or TCPRoute%s", m.Kind, didYouMean(m.Kind, ruleKinds))
		}
		if err := mesh.ValidateLabel("name", m.Name); err != nil {
			v.errorf(f+".name", "%v", err)
		}
	}
}

// applyWarnings adds the warnings of the field rules (spec.resilience's),
// which parsing drops.
func (c *MeshConfig) applyWarnings(v *validator) { validateWarnings(v, c) }

func (c *MeshConfig) validate(v *validator) {
	if c.Metadata.Name != MeshConfigName {
		v.errorf("metadata.name", "MeshConfig is a singleton named %q, not %q: rename it", MeshConfigName, c.Metadata.Name)
	}
	p, err := netip.ParsePrefix(c.Spec.Outbound.VIPRange)
	switch {
	case err != nil:
		v.errorf("spec.outbound.vipRange", "%q is not a CIDR: want a range such as %s", c.Spec.Outbound.VIPRange, DefaultVIPRange)
	case !p.Addr().Is4():
		v.errorf("spec.outbound.vipRange", "%q is not an IPv4 range: want a range such as %s", c.Spec.Outbound.VIPRange, DefaultVIPRange)
	case p.Bits() > maxVIPBits:
		v.errorf("spec.outbound.vipRange", "%q is too small: want /%d or larger, such as %s", c.Spec.Outbound.VIPRange, maxVIPBits, DefaultVIPRange)
	case p.Bits() < minVIPBits:
		v.errorf("spec.outbound.vipRange", "%q is too large: want /%d or smaller, such as %s", c.Spec.Outbound.VIPRange, minVIPBits, DefaultVIPRange)
	case p.Masked() != p:
		v.errorf("spec.outbound.vipRange", "%q has host bits set: write %s", c.Spec.Outbound.VIPRange, p.Masked())
	}
	validateEgressConfig(v, c.Spec.Egress)
	resilience.ValidateDefaults(v, "spec.resilience", c.Spec.Resilience)
	for _, l := range []struct {
		field, example string
		d              Duration
	}{
		{"spec.certificate.serviceLifetime", "24h", c.Spec.Certificate.ServiceLifetime},
		{"spec.certificate.proxyLifetime", "168h", c.Spec.Certificate.ProxyLifetime},
	} {
		switch {
		case l.d < 0:
			v.errorf(l.field, "negative duration: want a positive value such as %q", l.example)
		case l.d > 0 && time.Duration(l.d) < minLifetime:
			v.errorf(l.field, "%s is too short: want at least 1s, such as %q", time.Duration(l.d), l.example)
		case time.Duration(l.d) > maxLifetime:
			v.errorf(l.field, "%s is too long: want at most 8760h (a year), such as %q", time.Duration(l.d), l.example)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
