package spec

import (
	"sync/atomic"

	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// gatewayMachinesRef is shared by a Spec and every snapshot it publishes,
// so status read from any snapshot is the status now.
type gatewayMachinesRef struct {
	p atomic.Pointer[gateway.Machines]
}

func (r *gatewayMachinesRef) get() gateway.Machines {
	if r == nil {
		return nil
	}
	if m := r.p.Load(); m != nil {
		return *m
	}
	return nil
}

// SetGatewayMachines makes every Gateway's Programmed conditions (the
// Gateway's and its listeners') follow m (gateway.ProgramStatus). Without
// it they say only that the Gateway was accepted for rendering.
func (s *Spec) SetGatewayMachines(m gateway.Machines) { s.machines.p.Store(&m) }
