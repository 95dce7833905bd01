package catalog

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

var (
	bookstore = mesh.MeshService{Namespace: "default", Name: "bookstore"}
	bookbuyer = mesh.MeshService{Namespace: "default", Name: "bookbuyer"}
)

func ep(addr string, labels map[string]string) mesh.Endpoint {
	ap := netip.MustParseAddrPort(addr)
	return mesh.Endpoint{IP: ap.Addr(), Port: ap.Port(), Labels: labels}
}

// addrs summarises a service's endpoints as "addr@provider".
func addrs(t *testing.T, s *Snapshot, svc mesh.MeshService) []string {
	t.Helper()
	se, ok := s.Endpoints(svc)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range se.Endpoints {
		out = append(out, e.AddrPort().String()+"@"+e.Provider)
	}
	return out
}

func TestMergeAcrossProviders(t *testing.T) {
	c := New()
	c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{ep("10.0.0.6:80", nil), ep("10.0.0.5:80", nil)})
	c.SetEndpoints("lab", bookstore, []mesh.Endpoint{ep("10.1.0.5:80", nil)})
	got := addrs(t, c.Snapshot(), bookstore)
	want := []string{"10.0.0.5:80@onprem", "10.0.0.6:80@onprem", "10.1.0.5:80@lab"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged endpoints (-want +got):\n%s", diff)
	}

	// One provider's resync replaces only its own share.
	c.ReplaceProvider("lab", map[mesh.MeshService][]mesh.Endpoint{bookbuyer: {ep("10.1.0.9:80", nil)}})
	s := c.Snapshot()
	if diff := cmp.Diff([]string{"10.0.0.5:80@onprem", "10.0.0.6:80@onprem"}, addrs(t, s, bookstore)); diff != "" {
		t.Errorf("bookstore after lab resync (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.1.0.9:80@lab"}, addrs(t, s, bookbuyer)); diff != "" {
		t.Errorf("bookbuyer after lab resync (-want +got):\n%s", diff)
	}
}

func TestVersionsAndChanged(t *testing.T) {
	c := New()
	s0 := c.Snapshot()
	c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{ep("10.0.0.5:80", nil)})
	c.SetEndpoints("onprem", bookbuyer, []mesh.Endpoint{ep("10.0.0.7:80", nil)})
	s2 := c.Snapshot()
	if s2.Version != 2 {
		t.Fatalf("version after two changes = %d, want 2", s2.Version)
	}
	if diff := cmp.Diff([]mesh.MeshService{bookbuyer, bookstore}, s2.Changed(s0)); diff != "" {
		t.Errorf("Changed (-want +got):\n%s", diff)
	}

	// The same content again publishes nothing.
	c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{ep("10.0.0.5:80", nil)})
	if got := c.Snapshot(); got != s2 {
		t.Errorf("identical update published version %d; want the same snapshot", got.Version)
	}

	// A label change is a change.
	c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{ep("10.0.0.5:80", map[string]string{"version": "v2"})})
	s3 := c.Snapshot()
	if diff := cmp.Diff([]mesh.MeshService{bookstore}, s3.Changed(s2)); diff != "" {
		t.Errorf("Changed after label edit (-want +got):\n%s", diff)
	}

	// Deleting reports the service as changed and removes it.
	c.DeleteService("onprem", bookstore)
	s4 := c.Snapshot()
	if _, ok := s4.Endpoints(bookstore); ok {
		t.Errorf("bookstore still present after delete")
	}
	if diff := cmp.Diff([]mesh.MeshService{bookstore}, s4.Changed(s3)); diff != "" {
		t.Errorf("Changed after delete (-want +got):\n%s", diff)
	}
	// The old snapshot is untouched.
	if got := addrs(t, s3, bookstore); len(got) != 1 {
		t.Errorf("published snapshot was modified: %v", got)
	}
}

func TestDuplicateAddressesWithinProvider(t *testing.T) {
	c := New()
	c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{
		ep("10.0.0.5:80", map[string]string{"first": "yes"}), ep("10.0.0.5:80", nil),
	})
	se, _ := c.Snapshot().Endpoints(bookstore)
	if len(se.Endpoints) != 1 || se.Endpoints[0].Labels["first"] != "yes" {
		t.Errorf("endpoints = %+v; want one, with the first one's labels", se.Endpoints)
	}
}

func TestEmptyServiceStaysKnown(t *testing.T) {
	c := New()
	c.SetEndpoints("onprem", bookstore, nil)
	se, ok := c.Snapshot().Endpoints(bookstore)
	if !ok || len(se.Endpoints) != 0 {
		t.Errorf("Endpoints(bookstore) = %+v, %v; want known with none", se, ok)
	}
}

func TestSubscribeCoalesces(t *testing.T) {
	c := New()
	notify, cancel := c.Subscribe()
	defer cancel()
	for i := range 5 {
		c.SetEndpoints("onprem", bookstore, []mesh.Endpoint{ep(netip.AddrPortFrom(netip.MustParseAddr("10.0.0.5"), uint16(80+i)).String(), nil)})
	}
	select {
	case <-notify:
	default:
		t.Fatal("no notification after changes")
	}
	select {
	case <-notify:
		t.Fatal("second notification; want bursts coalesced into one")
	default:
	}
	if got := c.Snapshot().Version; got != 5 {
		t.Errorf("version = %d, want 5", got)
	}
}

// TestChangedFromParentMatchesFullDiff: after random updates, Changed
// against the previous snapshot (answered from the recorded delta) equals
// the full comparison of the two snapshots.
func TestChangedFromParentMatchesFullDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := New()
	svcs := []mesh.MeshService{bookstore, bookbuyer, {Namespace: "default", Name: "bookwarehouse"}}
	providers := []string{"static", "azure"}
	randomEndpoints := func() []mesh.Endpoint {
		var out []mesh.Endpoint
		for range r.IntN(3) {
			out = append(out, ep(fmt.Sprintf("10.0.0.%d:80", 1+r.IntN(3)), nil))
		}
		return out
	}
	changes := 0
	for range 500 {
		prev := c.Snapshot()
		switch pr := providers[r.IntN(2)]; r.IntN(4) {
		case 0, 1:
			c.SetEndpoints(pr, svcs[r.IntN(3)], randomEndpoints())
		case 2:
			c.DeleteService(pr, svcs[r.IntN(3)])
		case 3:
			all := map[mesh.MeshService][]mesh.Endpoint{}
			for _, svc := range someServices(r, svcs) {
				all[svc] = randomEndpoints()
			}
			c.ReplaceProvider(pr, all)
		}
		next := c.Snapshot()
		if next == prev {
			continue
		}
		changes++
		full := (&Snapshot{Version: next.Version, services: next.services}).Changed(prev)
		if diff := cmp.Diff(full, next.Changed(prev)); diff != "" {
			t.Fatalf("Changed from the parent (-full diff +delta):\n%s", diff)
		}
	}
	if changes < 100 {
		t.Fatalf("only %d of 500 updates changed the catalog", changes)
	}
}

func someServices(r *rand.Rand, from []mesh.MeshService) []mesh.MeshService {
	var out []mesh.MeshService
	for _, s := range from {
		if r.IntN(2) == 0 {
			out = append(out, s)
		}
	}
	return out
}
