package dnspublish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeProvider is a zone in memory whose Apply can be made to fail.
type fakeProvider struct {
	sets     []RecordSet
	readErr  error
	applyErr error
	applied  []Change
}

func (f *fakeProvider) Zone() string { return "example.test" }
func (f *fakeProvider) Records(context.Context) ([]RecordSet, error) {
	return f.sets, f.readErr
}
func (f *fakeProvider) Apply(_ context.Context, c Change) error {
	if f.applyErr != nil {
		return f.applyErr
	}
	f.applied = append(f.applied, c)
	return nil
}

type staticSource map[string][]netip.Addr

func (s staticSource) Names() map[string][]netip.Addr       { return s }
func (s staticSource) Subscribe() (<-chan struct{}, func()) { return nil, func() {} }

func TestPublisherHealth(t *testing.T) {
	prov := &fakeProvider{readErr: errors.New("connection refused")}
	src := staticSource{"shop.example.test": addrs("10.0.0.1")}
	p, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), "fake", prov, src, Options{Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(t.Context()); err == nil {
		t.Fatal("Sync with an unreachable server succeeded")
	}
	if s := p.Status(); s.Healthy || !strings.Contains(s.Error, "fake DNS zone example.test: connection refused") {
		t.Errorf("status after a failed read = %+v, want unhealthy naming the zone and the cause", s)
	}

	// Someone takes the name between the read and the update: the change
	// fails, and that shows (a name left as it was is not "healthy").
	prov.readErr, prov.applyErr = nil, fmt.Errorf("%w (NXRRSET)", ErrConflict)
	if err := p.Sync(t.Context()); err == nil || !strings.Contains(err.Error(), "shop.example.test") {
		t.Fatalf("Sync with a failed change = %v, want an error naming shop.example.test", err)
	}
	s := p.Status()
	if s.Healthy || !strings.Contains(s.Error, "create shop.example.test") || !strings.Contains(s.Error, "NXRRSET") || len(s.Owned) != 0 {
		t.Errorf("status after a failed change = %+v, want unhealthy, naming the change and the cause, owning nothing", s)
	}
	if len(s.Failed) != 1 || !strings.Contains(s.Failed[0], "shop.example.test") {
		t.Errorf("status.failed = %q, want shop.example.test", s.Failed)
	}
	if got := testutil.ToFloat64(p.metrics.changeFailures); got != 1 {
		t.Errorf("osm_dns_publisher_change_failures_total = %v, want 1", got)
	}

	prov.applyErr = nil
	if err := p.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s := p.Status(); !s.Healthy || len(s.Owned) != 1 || len(s.Conflicts) != 0 || len(s.Failed) != 0 || len(prov.applied) != 1 || !prov.applied[0].Claim {
		t.Errorf("status after the claim = %+v, applied %v", s, prov.applied)
	}

	if _, err := New(slog.Default(), "fake", prov, src, Options{}); err == nil || !strings.Contains(err.Error(), "dns.ownerID") {
		t.Errorf("New without an owner: %v, want an error naming dns.ownerID", err)
	}
}
