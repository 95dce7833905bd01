package gateway

import (
	"fmt"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Attachment is one parentRef of a route resolved: the Service and its
// ports the route serves, or the Gateway and its listeners, or why it
// serves none.
type Attachment struct {
	Parent mesh.MeshService
	Ports  []int
	// Gateway is set when the parent is a Gateway; Listeners then names
	// the listeners the route attaches to.
	Gateway   bool
	Listeners []string
	// Reason and Message explain Accepted=False ("" when accepted).
	Reason, Message string
}

// ResolveParents resolves every parentRef of r against w.
func ResolveParents(w World, r Route) []Attachment {
	ns := r.Name.Namespace
	var out []Attachment
	for _, p := range r.parentRefs() {
		a := Attachment{Parent: mesh.MeshService{Namespace: ns, Name: string(p.Name)}}
		if p.Namespace != nil {
			a.Parent.Namespace = string(*p.Namespace)
		}
		if IsGatewayRef(p) {
			resolveGatewayParent(w, r, p, &a)
			out = append(out, a)
			continue
		}
		switch ports, ok := w.ServicePorts(a.Parent); {
		case p.Group == nil || p.Kind == nil || *p.Group != "" || *p.Kind != kindService:
			a.Reason, a.Message = string(gwv1.RouteReasonNoMatchingParent), "the parent is not a Service"
		case !ok:
			a.Reason, a.Message = string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("no Service %q in namespace %q", a.Parent.Name, a.Parent.Namespace)
		default:
			for _, port := range ports {
				if p.Port != nil && int(*p.Port) != port.Port || p.SectionName != nil && string(*p.SectionName) != port.Name {
					continue
				}
				if r.attachesTo(port.AppProtocol) {
					a.Ports = append(a.Ports, port.Port)
				} else if p.Port != nil || p.SectionName != nil {
					a.Reason, a.Message = string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("port %d of Service %s is %s: a %s attaches to %s ports", port.Port, a.Parent, port.AppProtocol, r.Name.Kind, r.protocols())
				}
			}
			if len(a.Ports) == 0 && a.Reason == "" {
				a.Reason = string(gwv1.RouteReasonNoMatchingParent)
				switch {
				case p.Port != nil:
					a.Message = fmt.Sprintf("Service %s has no port %d", a.Parent, *p.Port)
				case p.SectionName != nil:
					a.Message = fmt.Sprintf("Service %s has no port named %q", a.Parent, *p.SectionName)
				default:
					a.Message = fmt.Sprintf("Service %s has no %s port", a.Parent, r.protocols())
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// resolveGatewayParent attaches r to the listeners of the Gateway p names
// (sectionName, port, allowedRoutes, hostnames), or says why it attaches
// to none.
func resolveGatewayParent(w World, r Route, p gwv1.ParentReference, a *Attachment) {
	a.Gateway = true
	g, ok := w.Gateway(a.Parent)
	if !ok {
		a.Reason, a.Message = string(gwv1.RouteReasonNoMatchingParent), fmt.Sprintf("no Gateway %q in namespace %q", a.Parent.Name, a.Parent.Namespace)
		return
	}
	reason, msg := string(gwv1.RouteReasonNoMatchingParent), ""
	for _, l := range g.Listeners {
		if p.SectionName != nil && *p.SectionName != l.Name || p.Port != nil && *p.Port != l.Port {
			continue
		}
		if ok, why, m := listenerAllows(l, a.Parent.Namespace, r.Name); !ok {
			reason, msg = why, m
			continue
		}
		if len(intersectHosts(l.Hostname, r.hostnames())) == 0 {
			reason, msg = string(gwv1.RouteReasonNoMatchingListenerHostname), fmt.Sprintf("no hostname of the route matches listener %s's hostname %s", l.Name, *l.Hostname)
			continue
		}
		a.Listeners = append(a.Listeners, string(l.Name))
	}
	if len(a.Listeners) > 0 {
		return
	}
	if msg == "" {
		switch {
		case p.SectionName != nil:
			msg = fmt.Sprintf("Gateway %s has no listener named %q", a.Parent, *p.SectionName)
		case p.Port != nil:
			msg = fmt.Sprintf("Gateway %s has no listener on port %d", a.Parent, *p.Port)
		default:
			msg = fmt.Sprintf("Gateway %s has no listener", a.Parent)
		}
	}
	a.Reason, a.Message = reason, msg
}

// listenerAllows reports whether l admits route k of a Gateway in gwNS,
// and why not.
func listenerAllows(l gwv1.Listener, gwNS string, k RouteName) (bool, string, string) {
	switch *l.AllowedRoutes.Namespaces.From {
	case gwv1.NamespacesFromNone:
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits no routes (allowedRoutes.namespaces.from: None)", l.Name)
	case gwv1.NamespacesFromSame:
		if k.Namespace != gwNS {
			return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits routes of namespace %q only (allowedRoutes.namespaces.from: Same; set All to admit others)", l.Name, gwNS)
		}
	}
	if !slices.Contains(RouteKinds(l.Protocol), gwv1.Kind(k.Kind)) {
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s is %s: it admits %s", l.Name, l.Protocol, KindList(RouteKinds(l.Protocol)))
	}
	if len(l.AllowedRoutes.Kinds) > 0 && !slices.ContainsFunc(l.AllowedRoutes.Kinds, func(rk gwv1.RouteGroupKind) bool { return string(rk.Kind) == k.Kind }) {
		return false, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("listener %s admits no %s (allowedRoutes.kinds)", l.Name, k.Kind)
	}
	return true, "", ""
}

// hostMatches reports whether the precise or wildcard name a covers b
// (a "*.example.com" covers "x.example.com" and "y.x.example.com").
func hostMatches(a, b string) bool {
	if a == b {
		return true
	}
	if rest, ok := strings.CutPrefix(a, "*"); ok {
		return strings.HasSuffix(b, rest) && len(b) > len(rest)
	}
	return false
}

// intersectHosts returns the host names a route serves on a listener:
// the Gateway API's intersection of the listener's hostname and the
// route's hostnames ("*" for any); none when they do not intersect.
func intersectHosts(listener *gwv1.Hostname, route []gwv1.Hostname) []string {
	if len(route) == 0 {
		if listener == nil {
			return []string{"*"}
		}
		return []string{string(*listener)}
	}
	var out []string
	for _, h := range route {
		switch {
		case listener == nil:
			out = append(out, string(h))
		case hostMatches(string(*listener), string(h)):
			out = append(out, string(h))
		case hostMatches(string(h), string(*listener)):
			out = append(out, string(*listener))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// RefProblem is a backendRef that does not resolve.
type RefProblem struct {
	Field, Reason, Message string
}

// ResolveBackends checks every backendRef of r against w: the Service
// and its port exist, and a reference into another namespace is allowed
// by a ReferenceGrant there (or names a parent of the route: a consumer
// route may send calls on to the Service it is attached to).
func ResolveBackends(w World, r Route) []RefProblem {
	ns := r.Name.Namespace
	var out []RefProblem
	for _, fr := range r.backendRefs() {
		b := fr.ref
		if b.Group == nil || b.Kind == nil || *b.Group != "" || *b.Kind != kindService {
			out = append(out, RefProblem{fr.field, string(gwv1.RouteReasonInvalidKind), "a backendRef names a Service"})
			continue
		}
		target := BackendService(ns, b)
		if target.Namespace != ns && !isParent(r, target) && !granted(w, r.Name, target) {
			out = append(out, RefProblem{fr.field, string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf(
				"Service %s is in another namespace and no ReferenceGrant in namespace %q allows %ss from namespace %q to refer to it: apply one (from: [{group: %s, kind: %s, namespace: %s}], to: [{group: \"\", kind: Service}])",
				target, target.Namespace, r.Name.Kind, ns, Group, r.Name.Kind, ns)})
			continue
		}
		ports, ok := w.ServicePorts(target)
		if !ok {
			out = append(out, RefProblem{fr.field, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("service %q not found in namespace %q: apply a Service named %q first or in the same batch%s",
				target.Name, target.Namespace, target.Name, w.ServiceHint(target))})
			continue
		}
		if b.Port != nil && !slices.ContainsFunc(ports, func(p Port) bool { return p.Port == int(*b.Port) }) {
			var list []string
			for _, p := range ports {
				list = append(list, fmt.Sprint(p.Port))
			}
			out = append(out, RefProblem{fr.field + ".port", string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s has no port %d: want one of %s", target, *b.Port, strings.Join(list, ", "))})
		}
	}
	return out
}

// BackendService is the Service a backendRef of a route in namespace ns
// names.
func BackendService(ns string, b gwv1.BackendObjectReference) mesh.MeshService {
	s := mesh.MeshService{Namespace: ns, Name: string(b.Name)}
	if b.Namespace != nil {
		s.Namespace = string(*b.Namespace)
	}
	return s
}

// IsParent reports whether r is attached to Service s (a parentRef names
// it).
func IsParent(r Route, s mesh.MeshService) bool { return isParent(r, s) }

func isParent(r Route, s mesh.MeshService) bool {
	for _, p := range r.parentRefs() {
		if IsGatewayRef(p) {
			continue
		}
		ns := r.Name.Namespace
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		if ns == s.Namespace && string(p.Name) == s.Name {
			return true
		}
	}
	return false
}

// granted reports whether a ReferenceGrant in target's namespace allows
// routes of from's kind in from's namespace to refer to target.
func granted(w World, from RouteName, target mesh.MeshService) bool {
	for g := range w.ReferenceGrants(target.Namespace) {
		fromOK := slices.ContainsFunc(g.From, func(f gwv1.ReferenceGrantFrom) bool {
			return string(f.Group) == Group && string(f.Kind) == from.Kind && string(f.Namespace) == from.Namespace
		})
		toOK := slices.ContainsFunc(g.To, func(t gwv1.ReferenceGrantTo) bool {
			return string(t.Group) == "" && string(t.Kind) == kindService && (t.Name == nil || string(*t.Name) == target.Name)
		})
		if fromOK && toOK {
			return true
		}
	}
	return false
}
