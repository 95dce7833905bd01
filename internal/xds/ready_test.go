package xds

import (
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// TestReadyFollowsTheListener: Ready is an error before Serve's listener
// opens and after Serve returns, and nil while it listens, so the
// readiness probe says a client may dial xDS only when it may.
func TestReadyFollowsTheListener(t *testing.T) {
	e := startEnv(t)
	srv := NewServer(discard(), cache.New(discard()), e.certs, Options{})
	if err := srv.Ready(); err == nil || !strings.Contains(err.Error(), "not open yet") {
		t.Fatalf("Ready before Serve = %v, want the listener not open yet", err)
	}
	_, stop := serveXDS(t, e, srv)
	if err := srv.Ready(); err != nil {
		t.Errorf("Ready while listening = %v, want nil", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(); err == nil {
		t.Error("Ready after Serve returned = nil, want an error")
	}
}
