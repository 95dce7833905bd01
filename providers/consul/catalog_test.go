package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

// TestReplacedLoopLeavesItsSuccessorsProblem: after a re-read replaces a
// service's loop, the old loop ends after the new one started. Its last
// word (clearing its problem as it returns) must not clear the new loop's
// problem: the provider would say it is healthy while the service's
// instances cannot be read.
func TestReplacedLoopLeavesItsSuccessorsProblem(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := provider.NewState(log)
	client, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c := newCatalog(log, config{}, client, "127.0.0.1:1", pacing{}, st)

	old := &serviceWatch{name: "web"}
	successor := &serviceWatch{name: "web"}
	c.services["web"] = successor
	c.serviceProblem(successor, &problem{cause: "consul 127.0.0.1:1: reading service web: connection refused", fix: "check that the Consul agent is up"})

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c.followService(ctx, old) // the replaced loop ends

	if err := st.Health(); err == nil || !strings.Contains(err.Error(), "service web") {
		t.Fatalf("health after the replaced loop ended = %v; want the successor's problem with service web", err)
	}
	// A loop stopped because its service is gone clears its problem.
	delete(c.services, "web")
	c.followService(ctx, successor)
	if err := st.Health(); err != nil {
		t.Fatalf("health after the service's only loop ended = %v; want healthy", err)
	}
}
