package pluginhost

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// listingProviders is a plugin host whose providers list when listed is
// closed.
type listingProviders struct {
	waiting []string
	listed  chan struct{}
}

func (p *listingProviders) Waiting() []string       { return p.waiting }
func (p *listingProviders) Listed() <-chan struct{} { return p.listed }

// TestWaitForProvidersReturnsWhenTheyHaveListed: xDS opens when the last
// provider lists, not at a poll after it, and at the bound without it.
func TestWaitForProvidersReturnsWhenTheyHaveListed(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, nil))
	p := &listingProviders{waiting: []string{"onprem"}, listed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		waitForProviders(t.Context(), log, p, time.Hour)
	}()
	close(p.listed)
	select {
	case <-done:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("waitForProviders did not return once the provider listed")
	}
	if !strings.Contains(out.String(), "every provider has listed its endpoints; serving xDS") {
		t.Errorf("log %q does not say every provider listed", out.String())
	}
	// Never listing: it returns at max, naming the provider.
	out.Reset()
	waitForProviders(t.Context(), log, &listingProviders{waiting: []string{"onprem"}, listed: make(chan struct{})}, time.Millisecond)
	if got := out.String(); !strings.Contains(got, "serving xDS before every provider has listed") || !strings.Contains(got, "onprem") {
		t.Errorf("log %q does not say xDS serves without provider onprem", got)
	}
}
