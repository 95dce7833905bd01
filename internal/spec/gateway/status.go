package gateway

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// MeshControllerName is the controllerName of the status osm-server
// reports for a route's Service parents (GAMMA).
const MeshControllerName = "osm-vm.io/mesh"

// RouteStatus is the status a controller would report for r: per
// parentRef, Accepted and ResolvedRefs.
func RouteStatus(w World, r Route) *gwv1.RouteStatus {
	status := &gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{}}
	probs := ResolveBackends(w, r)
	for i, a := range ResolveParents(w, r) {
		ps := gwv1.RouteParentStatus{ParentRef: r.parentRefs()[i], ControllerName: MeshControllerName}
		accepted := metav1.Condition{Type: string(gwv1.RouteConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.RouteReasonAccepted),
			Message: fmt.Sprintf("serves calls to %s on port %s", a.Parent, joinInts(a.Ports))}
		if a.Gateway {
			ps.ControllerName = ControllerName
			accepted.Message = fmt.Sprintf("attached to listener %s of Gateway %s", strings.Join(a.Listeners, ", "), a.Parent)
		}
		if a.Reason != "" {
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, a.Reason, a.Message
		} else if k, ok := w.SplitOf(a.Parent); ok && !a.Gateway {
			accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(gwv1.RouteReasonNotAllowedByListeners), fmt.Sprintf("%s routes the calls to %s", k, a.Parent)
		}
		resolved := metav1.Condition{Type: string(gwv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gwv1.RouteReasonResolvedRefs), Message: "every backendRef resolves"}
		if len(probs) > 0 {
			var msgs []string
			for _, p := range probs {
				msgs = append(msgs, p.Field+": "+p.Message)
			}
			resolved.Status, resolved.Reason, resolved.Message = metav1.ConditionFalse, probs[0].Reason, strings.Join(msgs, "; ")
		}
		ps.Conditions = []metav1.Condition{accepted, resolved}
		status.Parents = append(status.Parents, ps)
	}
	return status
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// GatewayStatus is the status a controller would report for Gateway gw
// of spec g: Accepted and Programmed, and each listener's attached
// routes. ProgramStatus then says what its machines did with it.
func GatewayStatus(w World, gw mesh.MeshService, g *gwv1.GatewaySpec) *gwv1.GatewayStatus {
	attached := map[string]int32{}
	for r := range w.Routes() {
		for _, a := range ResolveParents(w, r) {
			if a.Gateway && a.Parent == gw {
				for _, l := range a.Listeners {
					attached[l]++
				}
			}
		}
	}
	status := &gwv1.GatewayStatus{Conditions: []metav1.Condition{
		{Type: string(gwv1.GatewayConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.GatewayReasonAccepted),
			Message: fmt.Sprintf("accepted by %s; its machines enroll as service %s (osm-agent install --gateway ingress)", ControllerName, gw)},
		{Type: string(gwv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gwv1.GatewayReasonProgrammed),
			Message: "rendered for every connected gateway machine"},
	}}
	for _, l := range g.Listeners {
		kinds := l.AllowedRoutes.Kinds
		if len(kinds) == 0 {
			for _, k := range RouteKinds(l.Protocol) {
				kinds = append(kinds, gwv1.RouteGroupKind{Group: ptr(gwv1.Group(Group)), Kind: k})
			}
		}
		status.Listeners = append(status.Listeners, gwv1.ListenerStatus{Name: l.Name, SupportedKinds: kinds, AttachedRoutes: attached[string(l.Name)],
			Conditions: []metav1.Condition{
				{Type: string(gwv1.ListenerConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonAccepted), Message: "accepted"},
				{Type: string(gwv1.ListenerConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonProgrammed), Message: "programmed"},
				{Type: string(gwv1.ListenerConditionResolvedRefs), Status: metav1.ConditionTrue, Reason: string(gwv1.ListenerReasonResolvedRefs), Message: "resolved"},
			}})
	}
	return status
}

// Machine is what the control plane knows of one machine connected as a
// Gateway (its proxy's node ID), for the Gateway's Programmed status.
type Machine struct {
	Node string
	// ACKed: the proxy acknowledged every response sent to it, the last
	// of each type included.
	ACKed bool
	// Rejected is the error detail of the proxy's rejection (NACK) when its
	// last answer to a type was one.
	Rejected string
	// Certificates are the problems the machine's agent reported with the
	// certificate files of the Gateway's listeners, by listener name.
	Certificates map[string]string
}

// Machines says which machines are connected as a Gateway and how their
// proxies answered the configuration sent. The xDS server implements it
// over its connected proxies and its cache's ACKs.
type Machines interface {
	GatewayMachines(gw mesh.MeshService) []Machine
}

// ProgramStatus sets the Programmed conditions of status (as
// GatewayStatus built it for Gateway gw) from the machines connected as
// gw:
//
//   - Gateway Programmed True (Programmed) when at least one machine
//     acknowledged its current configuration; False with reason Pending
//     when none is connected or none acknowledged yet, and Invalid with
//     the proxies' error detail when they rejected it.
//   - A listener whose certificate files a connected machine's agent
//     reported bad: ResolvedRefs False (InvalidCertificateRef) and
//     Programmed False (Invalid), naming the machine, file and fix.
func ProgramStatus(status *gwv1.GatewayStatus, gw mesh.MeshService, machines []Machine) {
	if status == nil {
		return
	}
	acked, rejected := 0, []string{}
	for _, m := range machines {
		switch {
		case m.Rejected != "":
			rejected = append(rejected, fmt.Sprintf("machine %s rejected it: %s", m.Node, m.Rejected))
		case m.ACKed:
			acked++
		}
	}
	prog := metav1.Condition{Type: string(gwv1.GatewayConditionProgrammed)}
	switch {
	case acked > 0:
		prog.Status, prog.Reason = metav1.ConditionTrue, string(gwv1.GatewayReasonProgrammed)
		prog.Message = fmt.Sprintf("configured on %d of %d connected gateway machines", acked, len(machines))
		if len(rejected) > 0 {
			prog.Message += "; " + strings.Join(rejected, "; ")
		}
	case len(rejected) > 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(gwv1.GatewayReasonInvalid)
		prog.Message = strings.Join(rejected, "; ")
	case len(machines) > 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(gwv1.GatewayReasonPending)
		prog.Message = fmt.Sprintf("%d gateway machines connected; waiting for their proxies to acknowledge the configuration", len(machines))
	default:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(gwv1.GatewayReasonPending)
		prog.Message = fmt.Sprintf("no gateway machine is connected as Gateway %s: install one with `osm-agent install --gateway ingress --service %s --namespace %s ...` (docs/operator-guide.md, \"Ingress gateway machines\")", gw, gw.Name, gw.Namespace)
	}
	setCondition(&status.Conditions, prog)
	for i := range status.Listeners {
		ls := &status.Listeners[i]
		lp := metav1.Condition{Type: string(gwv1.ListenerConditionProgrammed), Status: prog.Status, Reason: prog.Reason, Message: prog.Message}
		if prog.Status == metav1.ConditionTrue {
			lp.Reason, lp.Message = string(gwv1.ListenerReasonProgrammed), "programmed"
		}
		var bad []string
		for _, m := range machines {
			if e, ok := m.Certificates[string(ls.Name)]; ok {
				bad = append(bad, fmt.Sprintf("machine %s: %s", m.Node, e))
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			msg := strings.Join(bad, "; ")
			setCondition(&ls.Conditions, metav1.Condition{Type: string(gwv1.ListenerConditionResolvedRefs), Status: metav1.ConditionFalse,
				Reason: string(gwv1.ListenerReasonInvalidCertificateRef), Message: msg})
			lp.Status, lp.Reason, lp.Message = metav1.ConditionFalse, string(gwv1.ListenerReasonInvalid), msg
		}
		setCondition(&ls.Conditions, lp)
	}
}

// setCondition replaces the condition of c's type in cs, or appends it.
func setCondition(cs *[]metav1.Condition, c metav1.Condition) {
	if i := slices.IndexFunc(*cs, func(x metav1.Condition) bool { return x.Type == c.Type }); i >= 0 {
		(*cs)[i] = c
		return
	}
	*cs = append(*cs, c)
}
