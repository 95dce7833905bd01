package xds

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// heldCerts is a certificate source that issues a service account's
// certificate only when the test tells it to (issue), with the real
// manager, which announces it.
type heldCerts struct {
	*certificate.Manager
	mu     sync.Mutex
	asked  map[mesh.ServiceAccount]int
	issued map[mesh.ServiceAccount]bool
}

func (h *heldCerts) RequestServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked[sa]++
	if !h.issued[sa] {
		return nil, fmt.Errorf("service certificate of %s: %w", sa, certificate.ErrPending)
	}
	return h.Manager.ServiceCertificate(ctx, sa)
}

func (h *heldCerts) issue(t *testing.T, sa mesh.ServiceAccount) {
	t.Helper()
	h.mu.Lock()
	h.issued[sa] = true
	h.mu.Unlock()
	if _, err := h.Manager.ServiceCertificate(t.Context(), sa); err != nil { // announces Issued
		t.Fatal(err)
	}
}

func (h *heldCerts) timesAsked(sa mesh.ServiceAccount) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked[sa]
}

// A proxy whose service certificate is not issued yet gets everything
// else at once; its secrets follow the certificate's announcement, and
// nothing else changes then.
func TestSecretsFollowAnnouncement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := store.NewMemory()
	sp := specOver(t, st, workloadYAML(2))
	m, err := certificate.New(ctx, discard(), st, certificate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	certs := &heldCerts{Manager: m, asked: map[mesh.ServiceAccount]int{}, issued: map[mesh.ServiceAccount]bool{}}
	cat := catalog.New()
	c := cache.New(discard())
	src := &testSpec{snap: sp.Snapshot()}
	p := NewPublisher(PublisherOptions{Log: discard(), Cache: c, Views: &testViews{catalog.NewModel(cat, src, m.TrustDomain(), 0), src}, Certs: certs})
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	svc := benchService(1)
	sa := mesh.ServiceAccount{Namespace: svc.Namespace, Name: svc.Name}
	id := "00000001-0000-4000-8000-000000000000.svc-00001.bench"
	p.connect(Proxy{NodeID: id, Service: svc, Flavor: render.Envoy, Address: netip.MustParseAddr("10.254.0.1")})

	published := func(what, typeURL string) *cache.Set {
		t.Helper()
		var set *cache.Set
		testwait.For(t, what, func() bool { set = c.View(id)[typeURL]; return set != nil })
		return set
	}
	lds := published("listeners published while the certificate is pending", resource.ListenerType)
	for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.RouteType} {
		if c.View(id)[typeURL] == nil {
			t.Errorf("no %s published while the certificate is pending", typeURL)
		}
	}
	if got := c.View(id)[resource.SecretType]; got != nil {
		t.Fatalf("secrets published before the certificate was issued: %v", got.Resources())
	}
	if certs.timesAsked(sa) == 0 {
		t.Fatalf("the publisher did not ask for the certificate of %s", sa)
	}
	if got := p.RenderError(id); got != "" {
		t.Errorf("RenderError = %q while the certificate is pending, want none", got)
	}

	certs.issue(t, sa)
	sds := published("secrets published after the certificate's announcement", resource.SecretType)
	for _, name := range []string{render.ServiceCertSecret, render.RootCASecret} {
		if sds.Get(name) == nil {
			t.Errorf("secret %q missing from %v", name, sds.Resources())
		}
	}
	if got := c.View(id)[resource.ListenerType].Version(); got != lds.Version() {
		t.Errorf("listeners changed when the secrets arrived (%s -> %s)", lds.Version(), got)
	}
}
