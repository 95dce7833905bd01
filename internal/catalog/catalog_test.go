package catalog

import (
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
