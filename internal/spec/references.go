package spec

import (
	"fmt"
	"slices"
	"strings"
)

// checkReferences validates obj against the state it is applied into:
// missing Services are errors for TrafficSplits, while missing identities
// and route groups are warnings because apply order should not matter.
func checkReferences(v *validator, st *state, obj Object) {
	if w, ok := obj.(interface{ applyWarnings(*validator) }); ok {
		w.applyWarnings(v)
	}
	gatewayReferences(v, st, obj)
	resilienceReferences(v, st, obj)
	checkGatewayNames(v, st, obj)
	switch o := obj.(type) {
	case *Egress:
		checkEgress(v, st, o)
	case *MeshConfig:
		checkMeshConfigEgress(v, st, o)
	case *TrafficSplit:
		ns := o.Metadata.Namespace
		svcs := namesOfKind(st, KindService, ns)
		missing := func(field, name string) {
			if !slices.Contains(svcs, name) {
				v.errorf(field, "service %q not found in namespace %q: apply a Service named %q first or in the same batch%s", name, ns, name, didYouMean(name, svcs))
			}
		}
		missing("spec.service", o.Spec.Service)
		for i, b := range o.Spec.Backends {
			missing(fmt.Sprintf("spec.backends[%d].service", i), b.Service)
		}
		for i, m := range o.Spec.Matches {
			obj, ok := st.objects[Key{Kind: m.Kind, Namespace: ns, Name: m.Name}]
			if !ok {
				v.warnf(fmt.Sprintf("spec.matches[%d]", i), "%s %q not found in namespace %q yet: the split applies to no traffic until it exists%s", m.Kind, m.Name, ns, didYouMean(m.Name, namesOfKind(st, m.Kind, ns)))
				continue
			}
			if g, ok := obj.(*HTTPRouteGroup); ok && hasGRPCPort(st, ns, o.Spec.Service) {
				for _, hm := range g.Spec.Matches {
					if why := grpcNeverMatches(hm); why != "" {
						v.warnf(fmt.Sprintf("spec.matches[%d]", i), "%s %q match %q %s, so gRPC clients of %q never match it: their calls go to %q itself while it has endpoints of its own (and to the split's backends while it has none)", m.Kind, m.Name, hm.Name, why, o.Spec.Service, o.Spec.Service)
					}
				}
			}
		}
	case *TrafficTarget:
		subject := func(field string, s IdentityBindingSubject) {
			accounts := serviceAccounts(st, s.Namespace)
			if _, found := slices.BinarySearch(accounts, s.Name); !found {
				v.warnf(field, "no Service runs as service account %q in namespace %q yet%s", s.Name, s.Namespace, didYouMean(s.Name, accounts))
			}
		}
		subject("spec.destination", o.Spec.Destination)
		for i, s := range o.Spec.Sources {
			subject(fmt.Sprintf("spec.sources[%d]", i), s)
		}
		ns := o.Metadata.Namespace
		for i, r := range o.Spec.Rules {
			f := fmt.Sprintf("spec.rules[%d]", i)
			ro, ok := st.objects[Key{Kind: r.Kind, Namespace: ns, Name: r.Name}]
			if !ok {
				v.warnf(f, "%s %q not found in namespace %q yet: the rule allows nothing until it exists%s", r.Kind, r.Name, ns, didYouMean(r.Name, namesOfKind(st, r.Kind, ns)))
				continue
			}
			var names []string
			switch g := ro.(type) {
			case *HTTPRouteGroup:
				for _, m := range g.Spec.Matches {
					names = append(names, m.Name)
				}
			case *TCPRoute:
				names = append(names, g.Spec.Matches.Name)
			case *GatewayTCPRoute:
				v.warnf(f, "TCPRoute %q is the Gateway API's (%s), not SMI's: a TrafficTarget rule names an SMI TCPRoute (%s), so this rule allows nothing", r.Name, g.APIVersion, APIVersionSpecs)
				continue
			}
			for j, m := range r.Matches {
				if !slices.Contains(names, m) {
					v.warnf(fmt.Sprintf("%s.matches[%d]", f, j), "%s %q has no match named %q%s", r.Kind, r.Name, m, didYouMean(m, names))
				}
			}
		}
	}
}

// hasGRPCPort reports whether the Service ns/name has a gRPC port.
func hasGRPCPort(st *state, ns, name string) bool {
	svc, ok := serviceOf(st.objects[Key{Kind: KindService, Namespace: ns, Name: name}])
	return ok && slices.ContainsFunc(svc.Spec.Ports, func(p ServicePort) bool { return p.AppProtocol == "grpc" })
}

// grpcNeverMatches says why no gRPC call can match hm ("" when one can):
// every gRPC call is a POST, and gRPC clients match no pseudo-header.
func grpcNeverMatches(hm HTTPMatch) string {
	if len(hm.Methods) > 0 && !slices.Contains(hm.Methods, "*") && !slices.ContainsFunc(hm.Methods, func(m string) bool { return strings.EqualFold(m, "POST") }) {
		return fmt.Sprintf("allows only %s, but every gRPC call is a POST", strings.Join(hm.Methods, ", "))
	}
	for name := range hm.Headers {
		if strings.HasPrefix(name, ":") {
			return fmt.Sprintf("matches the pseudo-header %q, which gRPC clients never match", name)
		}
	}
	return ""
}
