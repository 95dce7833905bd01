//go:build consulintegration

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestReplicaPresence: the participant rule (requireConnectedProxy, the
// default) holds across replicas. A caller's proxy on replica 1 receives
// the endpoint of a backend whose proxy is connected to replica 2, and
// loses it when that proxy leaves (internal/presence shares each
// replica's connected proxies through Consul).
func TestReplicaPresence(t *testing.T) {
	consul := []*consultest.Agent{consultest.StartDev(t)}
	bin := buildBinaries(t)
	rs := newReplicas(t, bin, consul, 2)
	for _, r := range rs {
		r.addConfig(t, "startupGrace: 0s\n") // no grace: bookstore has no participant until its proxy connects
	}
	startReplicas(t, rs)
	rs[0].osm().Apply(t, strings.Replace(meshForBuyers, "requireConnectedProxy: false", "requireConnectedProxy: true", 1))
	testwait.For(t, "replica 2 to know Service bookstore", func() bool {
		out, err := rs[1].cli(t, "get", "services")
		return err == nil && strings.Contains(out, "bookstore")
	})

	buyer := rs[0].osm().Connect(t, rs[0].osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookbuyer"}), "10.0.0.6", "default/bookstore")
	buyer.WaitEDS(t, "default/bookstore", nil)

	store := rs[1].osm().Connect(t, rs[1].osm().Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookstore"}), "10.0.0.5")
	start := time.Now()
	buyer.WaitEDS(t, "default/bookstore", []string{"10.0.0.5:14001"})
	t.Logf("bookstore's proxy connected to replica 2: its endpoint reached the caller on replica 1 after %v", time.Since(start).Round(time.Millisecond))

	store.Close()
	start = time.Now()
	buyer.WaitEDS(t, "default/bookstore", nil)
	t.Logf("bookstore's proxy left replica 2: its endpoint left the caller on replica 1 after %v", time.Since(start).Round(time.Millisecond))
}
