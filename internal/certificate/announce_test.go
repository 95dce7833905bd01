package certificate

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// A subscriber that never reads does not hold the manager up; when it
// reads at last it is told to resync and then sees what came after.
func TestAnnouncementsNeverBlock(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	stuck, cancelStuck := m.Subscribe()
	defer cancelStuck()
	reader, cancelReader := m.Subscribe()

	const n = subscriberBuffer + 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			m.mu.Lock()
			m.announceLocked(Announcement{Kind: ProxyClaimed, ProxyCN: fmt.Sprint(i)})
			m.mu.Unlock()
		}
	}()
	select {
	case <-done:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("announcing blocked on a subscriber that does not read")
	}

	// A real change still goes through with the stuck subscriber attached.
	if _, err := m.ServiceCertificate(t.Context(), bookstore); err != nil {
		t.Fatalf("ServiceCertificate with a stuck subscriber: %v", err)
	}

	got := drain(stuck)
	if len(got) == 0 || got[0].Kind != Resync {
		t.Fatalf("a subscriber that fell behind got %d announcements starting %+v; want a Resync first", len(got), got[:min(1, len(got))])
	}
	if last := got[len(got)-1]; last.Kind != Issued || last.CommonName != m.ServiceCommonName(bookstore) {
		t.Errorf("last announcement after the resync = %+v, want the Issued that followed", last)
	}
	if len(got) > subscriberBuffer {
		t.Errorf("%d announcements buffered, want at most %d", len(got), subscriberBuffer)
	}

	// Unsubscribing closes the channel; later announcements skip it.
	cancelReader()
	cancelReader()
	for range reader {
	}
	if _, err := m.RotateCertificate(t.Context(), bookstore); err != nil {
		t.Fatal(err)
	}
}

// serveHandshakes listens on loopback with get's certificate and
// completes each connection's TLS handshake, until the test ends.
func serveHandshakes(t *testing.T, get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) net.Listener {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: get})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return ln
}

func TestServingCertificate(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	get := m.ServingCertificate([]string{"127.0.0.1", "osm-server.example"})
	ln := serveHandshakes(t, get)
	for _, name := range []string{"127.0.0.1", "osm-server.example"} {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: m.CertPool(), ServerName: name})
		if err != nil {
			t.Fatalf("dial as %s: %v", name, err)
		}
		chain := conn.ConnectionState().PeerCertificates
		conn.Close()
		if len(chain) != 2 {
			t.Fatalf("server sent %d certificates, want leaf and root", len(chain))
		}
		if got, want := CAHash(chain[1].Raw), m.CAHash(); got != want {
			t.Errorf("root in the handshake hashes to %s, want %s (what a pinning agent checks)", got, want)
		}
	}
	if _, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "osm-server.example"}); err == nil {
		t.Errorf("a client without the mesh root accepted the serving certificate")
	}
}

func TestServingCertificateRenewal(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: 9 * time.Hour})
	get := m.ServingCertificate([]string{"osm-server.example"})
	first, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Hour)
	if c, _ := get(nil); c != first {
		t.Errorf("serving certificate replaced with more than a third of its lifetime left")
	}
	clk.Advance(time.Hour + time.Second)
	second, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Errorf("serving certificate not renewed after two thirds of its lifetime")
	}
	if _, err := m.ServingCertificate(nil)(nil); err == nil {
		t.Errorf("serving certificate without hosts: want an error")
	}
}

// TestLeafOnly: the xDS listener's certificate is the API's leaf alone,
// verified by the mesh root a client holds, and follows its renewal.
func TestLeafOnly(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: 9 * time.Hour})
	full := m.ServingCertificate([]string{"127.0.0.1"})
	get := LeafOnly(full)
	ln := serveHandshakes(t, get)
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: m.CertPool(), ServerName: "127.0.0.1", Time: clk.Now})
	if err != nil {
		t.Fatalf("dial with the mesh root: %v", err)
	}
	chain := conn.ConnectionState().PeerCertificates
	conn.Close()
	api, err := full(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 1 || !chain[0].Equal(api.Leaf) {
		t.Fatalf("xDS listener sent %d certificates, want the API's leaf alone", len(chain))
	}
	if len(api.Certificate) != 2 {
		t.Errorf("the API's chain has %d certificates after LeafOnly, want leaf and root still", len(api.Certificate))
	}
	first, _ := get(nil)
	if again, _ := get(nil); again != first {
		t.Errorf("LeafOnly made a new copy of an unchanged certificate")
	}
	clk.Advance(6*time.Hour + time.Second)
	renewed, err := get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if renewed == first || renewed.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 || len(renewed.Certificate) != 1 {
		t.Errorf("after the API's certificate was renewed LeafOnly served serial %v (%d certificates), want the new leaf alone", renewed.Leaf.SerialNumber, len(renewed.Certificate))
	}
}

// TestOnlyServingCertificatesAreTheControlPlane: the serving certificate
// carries the control plane's identity, which every client of the control
// plane requires; no certificate a machine holds (its proxy certificate, its
// service's certificate, usable for server authentication between
// proxies) carries it.
func TestOnlyServingCertificatesAreTheControlPlane(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	want := mesh.ControlPlaneSPIFFEID(m.TrustDomain())
	serving, err := m.ServingCertificate([]string{"osm-server.example"})(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := uriSANs(serving.Leaf); !slices.Contains(got, want) {
		t.Errorf("serving certificate URIs = %q, want %q among them", got, want)
	}
	svc, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	proxy, _ := issueProxy(t, m)
	for name, c := range map[string]*x509.Certificate{"service": svc.X509(), "proxy": proxy} {
		for _, u := range uriSANs(c) {
			if u == want || !strings.HasPrefix(u, "spiffe://"+m.TrustDomain()+"/ns/") {
				t.Errorf("%s certificate has URI %q: want only identities under /ns/, never %q", name, u, want)
			}
		}
	}
}

func uriSANs(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}
