package enroll

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestReplicasFindEachOther: two replicas on one store each list both; a
// replica that stops removes its record; one killed stays listed.
func TestReplicasFindEachOther(t *testing.T) {
	st := store.NewMemory()
	a := meshapi.Replica{API: "https://127.0.0.1:1", XDS: "127.0.0.1:2"}
	b := meshapi.Replica{API: "https://127.0.0.2:1", XDS: "127.0.0.2:2"}
	ra, rb := NewReplicas(slog.Default(), st, a), NewReplicas(slog.Default(), st, b)
	ctxA, stopA := context.WithCancel(t.Context())
	ctxB, stopB := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = ra.Run(ctxA) })
	wg.Go(func() { _ = rb.Run(ctxB) })
	defer func() { stopA(); stopB(); wg.Wait() }()

	both := []meshapi.Replica{a, b}
	waitList(t, ra, both)
	waitList(t, rb, both)

	stopB()
	waitList(t, ra, []meshapi.Replica{a})

	// A replica that died without stopping stays listed: agents try it
	// and fail over.
	rc := NewReplicas(slog.Default(), st, meshapi.Replica{API: "https://127.0.0.3:1", XDS: "127.0.0.3:2"})
	rc.register(t.Context())
	waitList(t, ra, []meshapi.Replica{a, rc.self})
}

func waitList(t *testing.T, r *Replicas, want []meshapi.Replica) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("replicas of %s to be %v", r.self.API, want), func() (bool, string) {
		got := r.List()
		return cmp.Equal(got, want), fmt.Sprintf("got %v", got)
	})
}
