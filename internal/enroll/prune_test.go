package enroll

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// pruneRecorder is a tokenPruner that fails its first call and records
// the retention of every call.
type pruneRecorder struct {
	mu    sync.Mutex
	calls []time.Duration
	next  *Tokens
}

func (p *pruneRecorder) Prune(ctx context.Context, retention time.Duration) (int, error) {
	p.mu.Lock()
	p.calls = append(p.calls, retention)
	first := len(p.calls) == 1
	p.mu.Unlock()
	if first {
		return 0, errors.New("store unavailable")
	}
	return p.next.Prune(ctx, retention)
}

func (p *pruneRecorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// pruneTokens prunes at start and at every period, goes on after a
// failure, and stops with its context.
func TestPruneTokensLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := store.NewMemory()
	now := time.Now()
	tokens := NewTokens(st, func() time.Time { return now })
	if _, _, err := tokens.Create(ctx, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: "web"}, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour) // expired an hour and more ago
	rec := &pruneRecorder{next: tokens}
	done := make(chan error, 1)
	go func() {
		done <- pruneTokens(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), rec, time.Hour, 10*time.Millisecond)
	}()
	testwait.Until(t, "the expired token deleted after the failed first prune", func() (bool, string) {
		list, err := tokens.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(list) == 0 && rec.count() >= 2, fmt.Sprintf("after %d prunes %d tokens are left", rec.count(), len(list))
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pruneTokens = %v, want nil when its context ends", err)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("pruneTokens did not return after its context ended")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.calls {
		if r != time.Hour {
			t.Errorf("Prune called with retention %s, want 1h", r)
		}
	}
}
