package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

var bookstore = mesh.ServiceAccount{Namespace: "default", Name: "bookstore"}

func TestServiceCertificate(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	c, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatalf("ServiceCertificate: %v", err)
	}
	if got, want := c.GetURISANs(), []string{"spiffe://osm.local/ns/default/sa/bookstore"}; !cmp.Equal(got, want) {
		t.Errorf("URI SANs = %q, want %q", got, want)
	}
	if got, want := c.GetCommonName(), CommonName("bookstore.default.osm.local"); got != want {
		t.Errorf("CN = %q, want %q", got, want)
	}
	leaf := c.X509()
	if len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Errorf("service certificate has SANs besides the SPIFFE ID: %v %v %v", leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:       m.CertPool(),
		CurrentTime: clk.Now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}); err != nil {
		t.Errorf("service certificate does not verify against the mesh root: %v", err)
	}
	if !cmp.Equal(c.GetIssuingCA(), m.RootPEM()) {
		t.Errorf("GetIssuingCA is not the mesh root")
	}
	b, err := c.AppendPEM([]byte("prefix:"), func(dst, chain, key []byte) ([]byte, error) {
		return append(append(append(dst, chain...), '|'), key...), nil
	})
	if want := "prefix:" + string(c.GetCertificateChain()) + "|" + string(c.GetPrivateKey()); err != nil || string(b) != want {
		t.Errorf("AppendPEM gave %q, %v; want the chain and key GetCertificateChain and GetPrivateKey return", b, err)
	}
	if got := c.GetSerialNumber(); got != leaf.SerialNumber.Text(16) {
		t.Errorf("GetSerialNumber = %q, want %q", got, leaf.SerialNumber.Text(16))
	}

	again, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	if again.GetSerialNumber() != c.GetSerialNumber() {
		t.Errorf("second ServiceCertificate issued a new certificate; want the shared one")
	}
	got, err := m.GetCertificate(t.Context(), bookstore)
	if err != nil || got.GetSerialNumber() != c.GetSerialNumber() {
		t.Errorf("GetCertificate = %v, %v; want the issued certificate", got, err)
	}
}

func TestServiceLifetimeJitter(t *testing.T) {
	clk := newClock()
	const lifetime = DefaultServiceLifetime
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	expiries := map[time.Time]bool{}
	for i := range 10 {
		c, err := m.ServiceCertificate(t.Context(), mesh.ServiceAccount{Namespace: "default", Name: fmt.Sprintf("sa%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		got := c.GetExpiration().Sub(clk.Now())
		// NotAfter has whole seconds.
		if lo := lifetime - lifetime/10 - time.Second; got < lo || got > lifetime {
			t.Errorf("lifetime = %s, want within [%s, %s]", got, lo, lifetime)
		}
		expiries[c.GetExpiration()] = true
	}
	if len(expiries) < 2 {
		t.Errorf("10 certificates issued at one instant share %d expiry; want jitter to spread them", len(expiries))
	}
}

func TestServiceCertificateNames(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	// The accounts the refused common names of the seed's CN-keyed methods
	// named; a trust domain or a proxy name cannot be given any more.
	for _, sa := range []mesh.ServiceAccount{
		{Namespace: "", Name: "bookstore"},
		{Namespace: "default", Name: "Book"},
		{Namespace: "c", Name: "a.b"},
	} {
		if _, err := m.ServiceCertificate(t.Context(), sa); err == nil {
			t.Errorf("ServiceCertificate(%q) succeeded; want an error", sa)
		}
	}
	reviews := mesh.ServiceAccount{Namespace: "shop", Name: "reviews"}
	c, err := m.issueService(t.Context(), reviews, time.Hour, false)
	if err != nil {
		t.Fatalf("issueService: %v", err)
	}
	if got, want := c.GetURISANs(), []string{"spiffe://osm.local/ns/shop/sa/reviews"}; !cmp.Equal(got, want) {
		t.Errorf("URI SANs = %q, want %q", got, want)
	}
	missing := mesh.ServiceAccount{Namespace: "shop", Name: "missing"}
	if _, err := m.GetCertificate(t.Context(), missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCertificate(missing) err = %v, want ErrNotFound", err)
	}
	if _, err := m.RotateCertificate(t.Context(), missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("RotateCertificate(missing) err = %v, want ErrNotFound", err)
	}
}

// Without Run, a certificate due for rotation is replaced on the next
// request, and the replacement is announced.
func TestRotationOnDemand(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ServiceLifetime: 30 * time.Hour})
	ch, cancel := m.Subscribe()
	defer cancel()
	old, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	if got := nextAnnouncement(t, ch, Issued); got.CommonName != old.GetCommonName() || got.ServiceAccount != bookstore {
		t.Errorf("Issued announcement = %+v", got)
	}
	clk.Advance(17 * time.Hour) // more than two thirds of 27h..30h left: not due
	if c, _ := m.ServiceCertificate(t.Context(), bookstore); c.GetSerialNumber() != old.GetSerialNumber() {
		t.Errorf("rotated with more than a third of the lifetime left")
	}
	clk.Advance(4 * time.Hour) // 21h of at most 30h passed: due
	c, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	if c.GetSerialNumber() == old.GetSerialNumber() {
		t.Fatalf("not rotated with less than a third of the lifetime left")
	}
	if !clk.Now().Before(old.GetExpiration()) {
		t.Errorf("rotated only after the old certificate expired")
	}
	nextAnnouncement(t, ch, Rotated)
	if got := drain(ch); len(got) != 0 {
		t.Errorf("extra announcements %+v", got)
	}

	forced, err := m.RotateCertificate(t.Context(), bookstore)
	if err != nil || forced.GetSerialNumber() == c.GetSerialNumber() {
		t.Fatalf("RotateCertificate = %v, %v; want a new certificate", forced, err)
	}
	nextAnnouncement(t, ch, Rotated)

	if err := m.ReleaseCertificate(t.Context(), bookstore); err != nil {
		t.Fatal(err)
	}
	if a := nextAnnouncement(t, ch, Released); a.ServiceAccount != bookstore {
		t.Errorf("Released announcement = %+v", a)
	}
	if _, err := m.GetCertificate(t.Context(), bookstore); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCertificate after release: err = %v, want ErrNotFound", err)
	}
	if err := m.ReleaseCertificate(t.Context(), bookstore); err != nil {
		t.Errorf("second release: %v", err)
	}
	list, err := m.ListCertificates(t.Context())
	if err != nil || len(list) != 0 {
		t.Errorf("ListCertificates after release = %d certificates, %v", len(list), err)
	}
}

// With Run, a short-lived certificate is replaced before it expires, and
// both replicas announce the rotation whichever of them made it.
func TestRotationByRunAcrossReplicas(t *testing.T) {
	t.Parallel()
	st := store.NewMemory()
	const lifetime = 6 * time.Second
	m1 := newTestManager(t, st, Options{ServiceLifetime: lifetime})
	m2 := newTestManager(t, st, Options{ServiceLifetime: lifetime})
	ch1, cancel1 := m1.Subscribe()
	defer cancel1()
	ch2, cancel2 := m2.Subscribe()
	defer cancel2()
	runManager(t, m1)
	runManager(t, m2)

	old, err := m1.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch2, Issued)
	if c, err := m2.ServiceCertificate(t.Context(), bookstore); err != nil || c.GetSerialNumber() != old.GetSerialNumber() {
		t.Fatalf("replica 2 ServiceCertificate = %v, %v; want the shared certificate", c, err)
	}

	for i, ch := range []<-chan Announcement{ch1, ch2} {
		a := nextAnnouncement(t, ch, Rotated)
		if a.CommonName != old.GetCommonName() || a.ServiceAccount != bookstore {
			t.Errorf("replica %d: Rotated announcement = %+v", i+1, a)
		}
	}
	n1, err := m1.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := m2.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	if n1.GetSerialNumber() == old.GetSerialNumber() {
		t.Fatalf("certificate not rotated")
	}
	if n1.GetSerialNumber() != n2.GetSerialNumber() {
		t.Errorf("replicas serve different certificates after the rotation (%s, %s)", n1.GetSerialNumber(), n2.GetSerialNumber())
	}
	if issued := n1.X509().NotBefore.Add(time.Minute); !issued.Before(old.GetExpiration()) {
		t.Errorf("new certificate issued at %s, after the old one expired at %s", issued, old.GetExpiration())
	}
}

// A replica that did not make a change learns it from the store watch.
func TestReplicaAnnouncesOthersRotation(t *testing.T) {
	st := store.NewMemory()
	m1 := newTestManager(t, st, Options{})
	m2 := newTestManager(t, st, Options{})
	runManager(t, m2)
	ch, cancel := m2.Subscribe()
	defer cancel()
	_, err := m1.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch, Issued)
	rot, err := m1.RotateCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch, Rotated)
	got, err := m2.ServiceCertificate(t.Context(), bookstore)
	if err != nil || got.GetSerialNumber() != rot.GetSerialNumber() {
		t.Errorf("replica 2 serves %v, %v after replica 1 rotated; want %s", got, err, rot.GetSerialNumber())
	}
	if err := m1.ReleaseCertificate(t.Context(), bookstore); err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch, Released)
}

// Two proxies' service certificates authenticate each other over real mTLS
// with only the mesh root as trust anchor.
func TestServiceCertificatesMutualTLS(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	server, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	client, err := m.ServiceCertificate(t.Context(), mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := server.TLS()
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := client.TLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverTLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.CertPool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peerURI := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			peerURI <- err.Error()
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peerURI <- err.Error()
			return
		}
		peerURI <- tc.ConnectionState().PeerCertificates[0].URIs[0].String()
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{clientTLS},
		RootCAs:      m.CertPool(),
		// Peers check SPIFFE IDs, not host names.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: m.CertPool()})
			return err
		},
	})
	if err != nil {
		t.Fatalf("mTLS handshake: %v", err)
	}
	conn.Close()
	if got, want := <-peerURI, "spiffe://osm.local/ns/default/sa/bookbuyer"; got != want {
		t.Errorf("server saw client %q, want %q", got, want)
	}
}

// failingStore fails the next n writes of service certificates.
type failingStore struct {
	*store.Memory
	mu     sync.Mutex
	n      int
	failed int
}

func (f *failingStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	f.mu.Lock()
	if f.n > 0 && strings.HasPrefix(ops[0].Key, servicePrefix) {
		f.n--
		f.failed++
		f.mu.Unlock()
		return false, errors.New("store unavailable")
	}
	f.mu.Unlock()
	return f.Memory.Txn(ctx, ops...)
}

// Run keeps trying when the store fails: certificates that stop rotating
// take the mesh down.
func TestRotationRetriesAfterStoreErrors(t *testing.T) {
	t.Parallel()
	st := &failingStore{Memory: store.NewMemory()}
	m := newTestManager(t, st, Options{ServiceLifetime: 3 * time.Second})
	ch, cancel := m.Subscribe()
	defer cancel()
	old, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.n = 3
	st.mu.Unlock()
	runManager(t, m)
	nextAnnouncement(t, ch, Rotated)
	c, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil || c.GetSerialNumber() == old.GetSerialNumber() {
		t.Errorf("after the store recovered: %v, %v; want a rotated certificate", c, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.failed != 3 {
		t.Errorf("%d failed writes, want 3 (the test did not exercise the retry)", st.failed)
	}
}

// SetLifetimes (a MeshConfig change) applies to certificates issued from
// then on: a service certificate of the default lifetime at its next
// rotation, a proxy certificate at its next issue; a service certificate
// issued with its own lifetime keeps it.
func TestSetLifetimes(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ServiceLifetime: 30 * time.Hour, ProxyLifetime: 40 * time.Hour})
	ctx := t.Context()
	within := func(what string, got, want time.Duration) {
		t.Helper()
		if got > want || got < want*85/100 { // jitter takes up to 10%
			t.Errorf("%s lives %s, want %s less at most 10%%", what, got, want)
		}
	}
	svc, err := m.ServiceCertificate(ctx, bookstore)
	if err != nil {
		t.Fatal(err)
	}
	within("service certificate before the change", svc.GetExpiration().Sub(clk.Now()), 30*time.Hour)
	own := mesh.ServiceAccount{Namespace: "default", Name: "own"}
	if _, err := m.issueService(ctx, own, 50*time.Hour, false); err != nil {
		t.Fatal(err)
	}

	if err := m.SetLifetimes(500*time.Millisecond, 0); err == nil || !strings.Contains(err.Error(), "at least 1s") {
		t.Errorf("SetLifetimes(500ms) = %v, want a refusal naming the 1s minimum", err)
	}
	if err := m.SetLifetimes(2*time.Hour, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, p := m.Lifetimes(); s != 2*time.Hour || p != 3*time.Hour {
		t.Errorf("Lifetimes() = %s, %s, want 2h, 3h", s, p)
	}
	if c, _ := m.ServiceCertificate(ctx, bookstore); c.GetSerialNumber() != svc.GetSerialNumber() {
		t.Error("a lifetime change replaced a certificate that is not due")
	}
	for _, sa := range []mesh.ServiceAccount{bookstore, own} {
		if _, err := m.RotateCertificate(ctx, sa); err != nil {
			t.Fatal(err)
		}
	}
	rotated, _ := m.ServiceCertificate(ctx, bookstore)
	within("service certificate rotated after the change", rotated.GetExpiration().Sub(clk.Now()), 2*time.Hour)
	ownRotated, _ := m.issueService(ctx, own, 0, false)
	within("service certificate issued with its own lifetime, rotated", ownRotated.GetExpiration().Sub(clk.Now()), 50*time.Hour)
	proxy, _ := issueProxy(t, m)
	if got := proxy.NotAfter.Sub(clk.Now()); got != 3*time.Hour {
		t.Errorf("proxy certificate issued after the change lives %s, want 3h", got)
	}
}

// A service certificate record written by an earlier version held the
// lifetime it was issued with under "lifetime", default or not; its
// rotations follow a MeshConfig change like any default one.
func TestEarlierRecordsFollowLifetimes(t *testing.T) {
	clk := newClock()
	st := store.NewMemory()
	m := newTestManager(t, st, Options{Now: clk.Now, ServiceLifetime: 30 * time.Hour})
	ctx := t.Context()
	if _, err := m.ServiceCertificate(ctx, bookstore); err != nil {
		t.Fatal(err)
	}
	// Rewrite the record as an earlier version stored it.
	raw, _, err := st.Get(ctx, serviceKey(bookstore))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "askedLifetime")
	rec["lifetime"] = int64(30 * time.Hour)
	if raw, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(ctx, store.Set(serviceKey(bookstore), store.AnyVersion, raw)); err != nil {
		t.Fatal(err)
	}
	m2 := newTestManager(t, st, Options{Now: clk.Now, ServiceLifetime: 30 * time.Hour})
	if err := m2.SetLifetimes(2*time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.RotateCertificate(ctx, bookstore); err != nil {
		t.Fatal(err)
	}
	c, err := m2.ServiceCertificate(ctx, bookstore)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.GetExpiration().Sub(clk.Now()); got > 2*time.Hour {
		t.Errorf("rotated certificate of an earlier record lives %s, want the new default 2h (less jitter)", got)
	}
}

// Following the store after one more service certificate reads that one
// record, not every service's (a fleet's first proxies of n services made
// n syncs of n records each).
func TestSyncServicesReadsOnlyChangedRecords(t *testing.T) {
	st := &readCounter{Memory: store.NewMemory(), prefix: servicePrefix}
	m := newTestManager(t, st, Options{})
	ctx := t.Context()
	for i := range 20 {
		if _, err := m.ServiceCertificate(ctx, mesh.ServiceAccount{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.syncServices(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Another replica issues one more.
	other := newTestManager(t, st.Memory, Options{})
	if _, err := other.ServiceCertificate(ctx, mesh.ServiceAccount{Namespace: "default", Name: "new"}); err != nil {
		t.Fatal(err)
	}
	st.reads()
	if err := m.syncServices(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := st.reads(); n != 1 {
		t.Errorf("a sync after one new certificate read %d records, want 1", n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.services[m.ServiceCommonName(mesh.ServiceAccount{Namespace: "default", Name: "new"})] == nil || len(m.services) != 21 {
		t.Errorf("after the sync: %d service certificates known, want 21 with the new one", len(m.services))
	}
}

// RequestServiceCertificate never issues in the caller's goroutine while
// Run runs: it answers ErrPending, Run issues and announces Issued, and
// the next request returns the certificate. Without Run it issues at once.
func TestRequestServiceCertificate(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{})
	if c, err := m.RequestServiceCertificate(t.Context(), bookstore); err != nil || c == nil {
		t.Fatalf("RequestServiceCertificate without Run = %v, %v; want the certificate issued at once", c, err)
	}

	m2 := newTestManager(t, st, Options{})
	ch, cancel := m2.Subscribe()
	defer cancel()
	runManager(t, m2)
	buyer := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	if _, err := m2.RequestServiceCertificate(t.Context(), mesh.ServiceAccount{Namespace: "default", Name: "Book"}); err == nil || errors.Is(err, ErrPending) {
		t.Errorf("RequestServiceCertificate(invalid account) err = %v, want a refusal", err)
	}
	var a Announcement
	if c, err := m2.RequestServiceCertificate(t.Context(), buyer); !errors.Is(err, ErrPending) {
		t.Fatalf("RequestServiceCertificate with Run = %v, %v; want ErrPending", c, err)
	}
	for a = nextAnnouncement(t, ch, Issued); a.ServiceAccount != buyer; a = nextAnnouncement(t, ch, Issued) {
	}
	c, err := m2.RequestServiceCertificate(t.Context(), buyer)
	if err != nil || c.GetCommonName() != a.CommonName {
		t.Errorf("RequestServiceCertificate after Issued = %v, %v; want the announced certificate", c, err)
	}
}

// Enrolling a proxy of an account with no service certificate has Run
// issue one, so that the proxy's first configuration does not wait for
// it; without Run, enrollment issues none.
func TestEnrollmentPreparesTheServiceCertificate(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{})
	issueProxy(t, m)
	if kvs, err := st.List(t.Context(), servicePrefix); err != nil || len(kvs) != 0 {
		t.Fatalf("service records after an enrollment without Run: %d (%v), want none", len(kvs), err)
	}

	ch, cancel := m.Subscribe()
	defer cancel()
	runManager(t, m)
	issueProxy(t, m)
	for a := nextAnnouncement(t, ch, Issued); a.ServiceAccount != bookstoreSA; a = nextAnnouncement(t, ch, Issued) {
	}
	if c, err := m.RequestServiceCertificate(t.Context(), bookstoreSA); err != nil || c == nil {
		t.Fatalf("RequestServiceCertificate after the enrollment = %v, %v; want the certificate at once", c, err)
	}
}

// The service certificates Run is asked for together are written in one
// transaction; one that is already fresh is kept.
func TestIssueRequestedBatches(t *testing.T) {
	st := newHeldStore()
	m := newTestManager(t, st, Options{})
	fresh, err := m.RequestServiceCertificate(t.Context(), bookstore) // no Run: issued at once
	if err != nil {
		t.Fatal(err)
	}
	sas := []mesh.ServiceAccount{bookstore}
	for i := range 10 {
		sas = append(sas, mesh.ServiceAccount{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)})
	}
	m.mu.Lock()
	for _, sa := range sas {
		m.requested[sa] = struct{}{}
	}
	m.mu.Unlock()
	st.mu.Lock()
	before := st.txns
	st.mu.Unlock()
	if err := m.issueRequested(t.Context()); err != nil {
		t.Fatalf("issueRequested: %v", err)
	}
	st.mu.Lock()
	txns := st.txns - before
	st.mu.Unlock()
	if txns != 1 {
		t.Errorf("issuing 10 service certificates took %d transactions, want 1", txns)
	}
	serials := map[string]bool{}
	for _, sa := range sas {
		c, err := m.GetCertificate(t.Context(), sa)
		if err != nil {
			t.Fatalf("GetCertificate(%s) after issueRequested: %v", sa, err)
		}
		serials[c.leaf.SerialNumber.String()] = true
		if sa == bookstore && !c.leaf.Equal(fresh.leaf) {
			t.Errorf("%s's fresh certificate was replaced", sa)
		}
	}
	if len(serials) != len(sas) {
		t.Errorf("%d distinct serials for %d service accounts", len(serials), len(sas))
	}
	m.mu.Lock()
	if len(m.requested) != 0 {
		t.Errorf("still requested after issueRequested: %v", m.requested)
	}
	m.mu.Unlock()
}
