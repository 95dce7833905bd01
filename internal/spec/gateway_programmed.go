package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// GatewayMachine is what the control plane knows of one machine connected
// as a Gateway (its proxy's node ID), for the Gateway's Programmed status.
type GatewayMachine struct {
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

// GatewayMachines says which machines are connected as a Gateway and how
// their proxies answered the configuration sent. cmd/osm-server implements
// it over the xDS server's connected proxies and its cache's ACKs (the spec
// imports no xds).
type GatewayMachines interface {
	GatewayMachines(gw mesh.MeshService) []GatewayMachine
}

// gatewayMachinesRef is shared by a Spec and every snapshot it publishes,
// so status read from any snapshot is the status now.
type gatewayMachinesRef struct {
	p atomic.Pointer[GatewayMachines]
}

func (r *gatewayMachinesRef) get() GatewayMachines {
	if r == nil {
		return nil
	}
	if m := r.p.Load(); m != nil {
		return *m
	}
	return nil
}

// SetGatewayMachines makes every Gateway's Programmed conditions (the
// Gateway's and its listeners') follow m. Without it they say only that
// the Gateway was accepted for rendering.
func (s *Spec) SetGatewayMachines(m GatewayMachines) { s.machines.p.Store(&m) }

// programGatewayStatus sets the Programmed conditions of status (as
// gatewayStatus built it for g) from the machines connected as g:
//
//   - Gateway Programmed True (Programmed) when at least one machine
//     acknowledged its current configuration; False with reason Pending
//     when none is connected or none acknowledged yet, and Invalid with
//     the proxies' error detail when they rejected it.
//   - A listener whose certificate files a connected machine's agent
//     reported bad: ResolvedRefs False (InvalidCertificateRef) and
//     Programmed False (Invalid), naming the machine, file and fix.
func programGatewayStatus(status *gwv1.GatewayStatus, g *Gateway, machines []GatewayMachine) {
	if status == nil {
		return
	}
	gw := mesh.MeshService{Namespace: g.Metadata.Namespace, Name: g.Metadata.Name}
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
