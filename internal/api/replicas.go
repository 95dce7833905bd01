package api

import "github.com/osm-vm/osm-vm/internal/meshapi"

// SetReplicas makes the agent config list the mesh's live replicas (from
// enroll.Replicas), so agents can fail over to another when theirs dies.
// Without it the list is empty and agents keep the servers they know.
func (ir *IdentityRoutes) SetReplicas(list func() []meshapi.Replica) { ir.replicas = list }
