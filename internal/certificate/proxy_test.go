package certificate

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testlog"
)

var (
	bookstoreSvc = mesh.MeshService{Namespace: "default", Name: "bookstore"}
	bookstoreSA  = mesh.ServiceAccount{Namespace: "default", Name: "bookstore-sa"}
)

func parsePEM(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCertPEM(b)
	if err != nil {
		t.Fatalf("parse issued certificate: %v", err)
	}
	return c
}

// issueProxy enrolls a proxy with a fresh P-256 key and returns its
// certificate and CN.
func issueProxy(t *testing.T, m *Manager) (*x509.Certificate, string) {
	t.Helper()
	certPEM, cn, err := m.IssueProxy(t.Context(), csrFor(t, ecKey(t, elliptic.P256()), nil), bookstoreSvc, bookstoreSA)
	if err != nil {
		t.Fatalf("IssueProxy: %v", err)
	}
	return parsePEM(t, certPEM), cn
}

func TestIssueProxyIgnoresWhatTheCSRAsks(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	key := ecKey(t, elliptic.P256())
	evil, _ := url.Parse("spiffe://osm.local/ns/kube-system/sa/admin")
	csr := csrFor(t, key, &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: "00000000-0000-0000-0000-000000000000.admin.kube-system", Organization: []string{"system:masters"}},
		DNSNames:       []string{"osm-server.example"},
		IPAddresses:    []net.IP{net.ParseIP("127.0.0.1")},
		EmailAddresses: []string{"root@example.com"},
		URIs:           []*url.URL{evil},
	})
	certPEM, cn, err := m.IssueProxy(t.Context(), csr, bookstoreSvc, bookstoreSA)
	if err != nil {
		t.Fatalf("IssueProxy: %v", err)
	}
	cert := parsePEM(t, certPEM)

	id, err := mesh.ParseProxyIdentity(cn)
	if err != nil {
		t.Fatalf("CN %q does not parse as a proxy identity: %v", cn, err)
	}
	if id.Service != bookstoreSvc {
		t.Errorf("CN service = %v, want %v", id.Service, bookstoreSvc)
	}
	if want := id.UUID.String() + ".bookstore.default"; cn != want || cert.Subject.CommonName != want {
		t.Errorf("CN = %q (returned %q), want %q", cert.Subject.CommonName, cn, want)
	}
	var uris []string
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	if want := []string{"spiffe://osm.local/ns/default/sa/bookstore-sa/proxy/" + id.UUID.String()}; !cmp.Equal(uris, want) {
		t.Errorf("URI SANs = %q, want %q", uris, want)
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 {
		t.Errorf("certificate carries SANs from the CSR: %v %v %v", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses)
	}
	if got := cert.Subject.Organization; cmp.Equal(got, []string{"system:masters"}) {
		t.Errorf("certificate carries the CSR's organization %q", got)
	}
	if !cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key.Public()) {
		t.Errorf("certificate is not for the CSR's key")
	}
	if got, want := cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}; !cmp.Equal(got, want) {
		t.Errorf("ExtKeyUsage = %v, want client auth only", got)
	}
	if got, want := cert.NotAfter.Sub(clk.Now()), DefaultProxyLifetime; got != want {
		t.Errorf("lifetime = %s, want %s", got, want)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: m.CertPool(), CurrentTime: clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("proxy certificate does not verify against the mesh root: %v", err)
	}

	rec, err := m.Proxy(t.Context(), cn)
	if err != nil {
		t.Fatal(err)
	}
	want := ProxyRecord{CN: cn, Service: bookstoreSvc, ServiceAccount: bookstoreSA, State: StateUnclaimed,
		Serial: cert.SerialNumber.Text(16), Issued: clk.Now(), Expires: cert.NotAfter}
	if diff := cmp.Diff(want, rec, cmpopts.IgnoreFields(ProxyRecord{}, "Version")); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestIssueProxyKeys(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	rsaKey := func(bits int) crypto.Signer {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatalf("generate RSA %d: %v", bits, err)
		}
		return k
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name    string
		key     crypto.Signer
		wantErr string // "" for accepted
	}{
		{"ECDSA P-256", ecKey(t, elliptic.P256()), ""},
		{"ECDSA P-384", ecKey(t, elliptic.P384()), ""},
		{"RSA 2048", rsaKey(2048), ""},
		{"RSA 1024", rsaKey(1024), "RSA key of 1024 bits is too weak (2048 or more)"},
		{"ECDSA P-224", ecKey(t, elliptic.P224()), "ECDSA curve P-224 is not accepted (P-256 or P-384)"},
		{"ECDSA P-521", ecKey(t, elliptic.P521()), "ECDSA curve P-521 is not accepted"},
		{"Ed25519", edKey, "key type Ed25519 is not accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cn, err := m.IssueProxy(t.Context(), csrFor(t, tc.key, nil), bookstoreSvc, bookstoreSA)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("IssueProxy: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("IssueProxy succeeded (CN %s); want %q", cn, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidCSR) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want ErrInvalidCSR with %q", err, tc.wantErr)
			}
		})
	}
	list, err := m.ListProxies(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(list), 3; got != want {
		t.Errorf("%d proxy records, want %d (refused CSRs must store nothing)", got, want)
	}
}

func TestIssueProxyBadCSR(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	good := csrFor(t, ecKey(t, elliptic.P256()), &x509.CertificateRequest{Subject: pkix.Name{CommonName: "victim"}})
	tampered := bytes.Replace(good, []byte("victim"), []byte("victiM"), 1)
	if bytes.Equal(tampered, good) {
		t.Fatal("test CSR does not contain the name to tamper with")
	}
	for name, tc := range map[string]struct {
		der     []byte
		wantErr string
	}{
		"tampered": {tampered, "signature does not verify"},
		"garbage":  {[]byte("not a CSR"), "not a DER PKCS#10 request"},
		"empty":    {nil, "not a DER PKCS#10 request"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := m.IssueProxy(t.Context(), tc.der, bookstoreSvc, bookstoreSA)
			if !errors.Is(err, ErrInvalidCSR) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want ErrInvalidCSR with %q", err, tc.wantErr)
			}
		})
	}
	for name, tc := range map[string]struct {
		svc mesh.MeshService
		sa  mesh.ServiceAccount
	}{
		"bad service":         {mesh.MeshService{Namespace: "default", Name: "Book_Store"}, bookstoreSA},
		"empty namespace":     {mesh.MeshService{Name: "bookstore"}, bookstoreSA},
		"bad service account": {bookstoreSvc, mesh.ServiceAccount{Namespace: "default", Name: "a/b"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := m.IssueProxy(t.Context(), good, tc.svc, tc.sa); err == nil {
				t.Errorf("IssueProxy(%v, %v) succeeded; want an error", tc.svc, tc.sa)
			}
		})
	}
}

// The enrollment code spends its join token in the same transaction as the
// proxy record: both commit, or neither.
func TestIssueProxyOpsAreAtomic(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{})
	ctx := t.Context()
	if ok, err := st.Txn(ctx, store.Set("enroll/token/abc", 0, []byte(`{"uses":1}`))); !ok || err != nil {
		t.Fatalf("seed token: %v, %v", ok, err)
	}
	_, tokenVer, _ := st.Get(ctx, "enroll/token/abc")
	csr := csrFor(t, ecKey(t, elliptic.P256()), nil)

	// A stale version: nothing may be written.
	_, _, err := m.IssueProxy(ctx, csr, bookstoreSvc, bookstoreSA, store.Set("enroll/token/abc", tokenVer+100, []byte(`{"uses":0}`)))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("IssueProxy with a failing version check: err = %v, want ErrConflict", err)
	}
	if list, _ := m.ListProxies(ctx); len(list) != 0 {
		t.Errorf("a proxy was stored although the transaction failed: %+v", list)
	}
	if v, ver, _ := st.Get(ctx, "enroll/token/abc"); ver != tokenVer || string(v) != `{"uses":1}` {
		t.Errorf("token changed to %s (version %d) although the transaction failed", v, ver)
	}

	certPEM, cn, err := m.IssueProxy(ctx, csr, bookstoreSvc, bookstoreSA, store.Set("enroll/token/abc", tokenVer, []byte(`{"uses":0}`)))
	if err != nil {
		t.Fatalf("IssueProxy: %v", err)
	}
	if v, _, _ := st.Get(ctx, "enroll/token/abc"); string(v) != `{"uses":0}` {
		t.Errorf("token = %s, want it spent with the issuance", v)
	}
	rec, err := m.Proxy(ctx, cn)
	if err != nil || rec.Serial != parsePEM(t, certPEM).SerialNumber.Text(16) {
		t.Errorf("Proxy(%s) = %+v, %v", cn, rec, err)
	}
}

func TestProxyStates(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	ch, cancel := m.Subscribe()
	defer cancel()
	ctx := t.Context()
	_, cn := issueProxy(t, m)
	if a := nextAnnouncement(t, ch, ProxyIssued); a.ProxyCN != cn || a.ServiceAccount != bookstoreSA {
		t.Errorf("ProxyIssued announcement = %+v", a)
	}

	clk.Advance(time.Minute)
	if err := m.ClaimProxy(ctx, cn); err != nil {
		t.Fatalf("ClaimProxy: %v", err)
	}
	rec, _ := m.Proxy(ctx, cn)
	if rec.State != StateClaimed || !rec.LastSeen.Equal(clk.Now()) {
		t.Errorf("after claim: state %s, last seen %s; want claimed at %s", rec.State, rec.LastSeen, clk.Now())
	}
	nextAnnouncement(t, ch, ProxyClaimed)

	claimedAt := clk.Now()
	clk.Advance(time.Hour)
	if err := m.ClaimProxy(ctx, cn); err != nil {
		t.Fatalf("second ClaimProxy (reconnect): %v", err)
	}
	if rec, _ := m.Proxy(ctx, cn); !rec.LastSeen.Equal(claimedAt) {
		t.Errorf("a reconnect changed LastSeen to %s; want it left at the first claim, %s (no write per connection)", rec.LastSeen, claimedAt)
	}
	if got := drain(ch); len(got) != 0 {
		t.Errorf("a reconnect announced %+v; want nothing", got)
	}

	if err := m.RevokeProxy(ctx, cn); err != nil {
		t.Fatalf("RevokeProxy: %v", err)
	}
	if a := nextAnnouncement(t, ch, ProxyRevoked); a.ProxyCN != cn {
		t.Errorf("ProxyRevoked announcement = %+v", a)
	}
	if rec, _ := m.Proxy(ctx, cn); rec.State != StateRevoked {
		t.Errorf("state = %s, want revoked", rec.State)
	}
	if err := m.ClaimProxy(ctx, cn); !errors.Is(err, ErrRevoked) {
		t.Errorf("ClaimProxy of a revoked proxy: err = %v, want ErrRevoked", err)
	}
	if err := m.RevokeProxy(ctx, cn); err != nil {
		t.Errorf("revoking twice: %v", err)
	}

	for _, f := range map[string]func(string) error{
		"Proxy":       func(cn string) error { _, err := m.Proxy(ctx, cn); return err },
		"ClaimProxy":  func(cn string) error { return m.ClaimProxy(ctx, cn) },
		"RevokeProxy": func(cn string) error { return m.RevokeProxy(ctx, cn) },
	} {
		if err := f("2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.bookstore.default"); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown proxy: err = %v, want ErrNotFound", err)
		}
	}
}

func TestRenewAndVerifyProxy(t *testing.T) {
	clk := newClock()
	const lifetime = 24 * time.Hour
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: lifetime})
	ctx := t.Context()
	first, cn := issueProxy(t, m)
	if _, err := m.VerifyProxy(ctx, first); err != nil {
		t.Fatalf("VerifyProxy(first): %v", err)
	}

	clk.Advance(lifetime / 2)
	key := ecKey(t, elliptic.P384())
	renewedPEM, err := m.RenewProxy(ctx, first, csrFor(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "other"}}))
	if err != nil {
		t.Fatalf("RenewProxy: %v", err)
	}
	renewed := parsePEM(t, renewedPEM)
	if renewed.Subject.CommonName != cn || !cmp.Equal(renewed.URIs, first.URIs) {
		t.Errorf("renewed certificate is for %q %v, want %q %v", renewed.Subject.CommonName, renewed.URIs, cn, first.URIs)
	}
	rec, _ := m.Proxy(ctx, cn)
	if rec.Serial != renewed.SerialNumber.Text(16) || !rec.Expires.Equal(renewed.NotAfter) {
		t.Errorf("record serial %s expires %s, want the renewed certificate's %s %s", rec.Serial, rec.Expires, renewed.SerialNumber.Text(16), renewed.NotAfter)
	}

	// A certificate of the right name not issued through the records, and
	// one from another mesh.
	id, _ := mesh.ParseProxyIdentity(cn)
	stray, _, err := m.signProxy(id, bookstoreSA, key.Public(), clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherMesh := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	foreign, _, err := otherMesh.signProxy(id, bookstoreSA, key.Public(), clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	unknown, _ := issueProxy(t, otherMesh)

	for _, tc := range []struct {
		name    string
		peer    *x509.Certificate
		advance time.Duration
		want    error // nil: accepted
		wantMsg string
	}{
		{name: "current", peer: renewed},
		{name: "previous within overlap", peer: first},
		{name: "stray serial", peer: stray, want: ErrRevoked, wantMsg: "not a current certificate"},
		{name: "other mesh's CA", peer: foreign, wantMsg: "not issued by this mesh's CA"},
		{name: "unknown proxy", peer: unknown, want: ErrNotFound},
		{name: "previous after it expired", peer: first, advance: lifetime/2 + time.Second, want: ErrExpired},
		{name: "current still valid", peer: renewed},
	} {
		clk.Advance(tc.advance)
		// VerifyProxyChain is given the chain TLS would have built: the
		// peer and the CA that signed it (the other mesh's for foreign).
		issuer := m.ca.cert
		if tc.peer.CheckSignatureFrom(issuer) != nil {
			issuer = otherMesh.ca.cert
		}
		for _, verify := range []struct {
			name string
			f    func() (ProxyRecord, error)
		}{
			{"VerifyProxy", func() (ProxyRecord, error) { return m.VerifyProxy(ctx, tc.peer) }},
			{"VerifyProxyChain", func() (ProxyRecord, error) {
				return m.VerifyProxyChain(ctx, []*x509.Certificate{tc.peer, issuer})
			}},
			{"VerifyProxyChain without the CA", func() (ProxyRecord, error) {
				return m.VerifyProxyChain(ctx, []*x509.Certificate{tc.peer})
			}},
		} {
			got, err := verify.f()
			switch {
			case tc.want == nil && tc.wantMsg == "":
				if err != nil {
					t.Errorf("%s: %s: %v", tc.name, verify.name, err)
				} else if got.CN != cn {
					t.Errorf("%s: %s = %+v", tc.name, verify.name, got)
				}
			case err == nil:
				t.Errorf("%s: %s accepted the certificate", tc.name, verify.name)
			case tc.want != nil && !errors.Is(err, tc.want), !strings.Contains(err.Error(), tc.wantMsg):
				t.Errorf("%s: %s: err = %v, want %v %q", tc.name, verify.name, err, tc.want, tc.wantMsg)
			}
		}
	}

	// Renewal with the expired first certificate is refused.
	if _, err := m.RenewProxy(ctx, first, csrFor(t, key, nil)); !errors.Is(err, ErrExpired) {
		t.Errorf("RenewProxy with an expired certificate: err = %v, want ErrExpired", err)
	}
	// So is renewal with a bad CSR, and renewal of a revoked proxy.
	if _, err := m.RenewProxy(ctx, renewed, []byte("junk")); !errors.Is(err, ErrInvalidCSR) {
		t.Errorf("RenewProxy with a bad CSR: err = %v, want ErrInvalidCSR", err)
	}
	if err := m.RevokeProxy(ctx, cn); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RenewProxy(ctx, renewed, csrFor(t, key, nil)); !errors.Is(err, ErrRevoked) {
		t.Errorf("RenewProxy of a revoked proxy: err = %v, want ErrRevoked", err)
	}
	if _, err := m.VerifyProxy(ctx, renewed); !errors.Is(err, ErrRevoked) {
		t.Errorf("VerifyProxy of a revoked proxy: err = %v, want ErrRevoked", err)
	}
}

// A revocation made on one replica is announced by every replica running
// Run, so each closes the proxy's streams.
func TestReplicaAnnouncesRevocation(t *testing.T) {
	st := store.NewMemory()
	m1 := newTestManager(t, st, Options{})
	m2 := newTestManager(t, st, Options{})
	runManager(t, m2)
	ch, cancel := m2.Subscribe()
	defer cancel()
	_, cn := issueProxy(t, m1)
	if a := nextAnnouncement(t, ch, ProxyIssued); a.ProxyCN != cn {
		t.Errorf("ProxyIssued = %+v", a)
	}
	if err := m1.ClaimProxy(t.Context(), cn); err != nil {
		t.Fatal(err)
	}
	nextAnnouncement(t, ch, ProxyClaimed)
	if err := m1.RevokeProxy(t.Context(), cn); err != nil {
		t.Fatal(err)
	}
	if a := nextAnnouncement(t, ch, ProxyRevoked); a.ProxyCN != cn || a.ServiceAccount != bookstoreSA {
		t.Errorf("ProxyRevoked = %+v", a)
	}
}

// A proxy record that does not decode is reported once and not read again
// at every sync until it is rewritten; once deleted it is forgotten.
func TestUndecodableProxyRecordReportedOnce(t *testing.T) {
	ctx := t.Context()
	st := &readCounter{Memory: store.NewMemory(), prefix: proxyPrefix}
	var logs testlog.Buffer
	m, err := New(ctx, slog.New(slog.NewTextHandler(&logs, nil)), st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := proxyKey("11111111-2222-3333-4444-555555555555.web.default")
	write := func(version uint64, val string) {
		t.Helper()
		if ok, err := st.Memory.Txn(ctx, store.Set(key, version, []byte(val))); err != nil || !ok {
			t.Fatalf("write %s: %v %v", key, ok, err)
		}
	}
	write(0, "{not json")
	sync := func() {
		t.Helper()
		if err := m.syncProxies(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	sync()
	if n := st.reads(); n != 1 {
		t.Errorf("two syncs read the bad record %d times, want once", n)
	}
	if n := strings.Count(logs.String(), "does not decode"); n != 1 {
		t.Errorf("reported %d times, want once:\n%s", n, logs.String())
	}
	_, ver, _ := st.Memory.Get(ctx, key)
	write(ver, "{still not json")
	sync()
	if n := st.reads(); n != 1 {
		t.Errorf("a sync after the record was rewritten read it %d times, want once", n)
	}
	_, ver, _ = st.Memory.Get(ctx, key)
	if ok, err := st.Memory.Txn(ctx, store.Delete(key, ver)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	sync()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.undecodable) != 0 {
		t.Errorf("after the record was deleted: %v remembered, want nothing", m.undecodable)
	}
}
