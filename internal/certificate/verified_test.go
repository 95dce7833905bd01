package certificate

import (
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/osm-vm/osm-vm/internal/store"
)

// caSigned returns a certificate the manager's CA signs for pub outside
// IssueProxy, valid for an hour from now, with extended key usage eku.
func caSigned(t *testing.T, m *Manager, eku x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	now := m.now()
	cert, _, err := m.ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "11111111-2222-3333-4444-555555555555.bookstore.default"},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{eku},
	}, ecKey(t, elliptic.P256()).Public())
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestVerifyClient(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	wantChain := func(t *testing.T, leaf *x509.Certificate) {
		t.Helper()
		chain, err := m.VerifyClient([]*x509.Certificate{leaf})
		if err != nil {
			t.Fatalf("VerifyClient: %v", err)
		}
		if len(chain) != 2 || chain[0] != leaf || !chain[1].Equal(m.ca.cert) {
			t.Fatalf("chain = %v, want the leaf and the mesh root", chain)
		}
	}
	remembered := func(leaf *x509.Certificate) bool {
		_, ok := m.verified.lookup(leaf, clk.Now())
		return ok
	}

	issued, _ := issueProxy(t, m)
	if !remembered(issued) {
		t.Error("a certificate IssueProxy signed is not remembered")
	}
	wantChain(t, issued)

	other := caSigned(t, m, x509.ExtKeyUsageClientAuth)
	if remembered(other) {
		t.Fatal("a certificate signed outside IssueProxy is remembered before it was verified")
	}
	wantChain(t, other)
	if !remembered(other) {
		t.Error("a verified certificate is not remembered")
	}

	// A remembered certificate is not checked against the root again: with
	// the CA's pool emptied, it still verifies and a new one does not.
	pool := m.ca.pool
	m.ca.pool = x509.NewCertPool()
	wantChain(t, issued)
	if _, err := m.VerifyClient([]*x509.Certificate{caSigned(t, m, x509.ExtKeyUsageClientAuth)}); err == nil {
		t.Error("a certificate not remembered verified against an empty pool")
	}
	m.ca.pool = pool

	for name, c := range map[string]struct {
		certs []*x509.Certificate
		want  string
	}{
		"none":                 {nil, "no client certificate presented"},
		"nil leaf":             {[]*x509.Certificate{nil}, "no client certificate presented"},
		"self-signed":          {[]*x509.Certificate{selfSigned(t, clk.Now())}, "not verified by this mesh's CA: x509: certificate signed by unknown authority"},
		"self-signed and root": {[]*x509.Certificate{selfSigned(t, clk.Now()), m.ca.cert}, "unknown authority"},
		"server auth only":     {[]*x509.Certificate{caSigned(t, m, x509.ExtKeyUsageServerAuth)}, "incompatible key usage"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := m.VerifyClient(c.certs); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("VerifyClient = %v, want an error containing %q", err, c.want)
			}
			if len(c.certs) > 0 && c.certs[0] != nil && remembered(c.certs[0]) {
				t.Error("a refused certificate is remembered")
			}
		})
	}

	// A remembered certificate is refused outside its validity period.
	for _, at := range []time.Time{issued.NotBefore.Add(-time.Second), issued.NotAfter.Add(time.Second)} {
		clk.Set(at)
		_, err := m.VerifyClient([]*x509.Certificate{issued})
		if err == nil || !strings.Contains(err.Error(), "expired or is not yet valid") {
			t.Errorf("at %s: VerifyClient = %v, want the validity period refused", at, err)
		}
	}
}

// A resumed session's certificate is checked for what may have changed
// since the handshake that verified it (its CA, validity, key usage), not
// against the CA's signature, and is remembered after.
func TestVerifyResumedClient(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	remembered := func(leaf *x509.Certificate) bool {
		_, ok := m.verified.lookup(leaf, clk.Now())
		return ok
	}
	leaf := caSigned(t, m, x509.ExtKeyUsageClientAuth)
	pool := m.ca.pool
	m.ca.pool = x509.NewCertPool() // no signature can be checked
	chain, err := m.VerifyResumedClient([]*x509.Certificate{leaf})
	if err != nil {
		t.Fatalf("VerifyResumedClient: %v", err)
	}
	if len(chain) != 2 || chain[0] != leaf || !chain[1].Equal(m.ca.cert) {
		t.Fatalf("chain = %v, want the leaf and the mesh root", chain)
	}
	if !remembered(leaf) {
		t.Error("a resumed session's certificate is not remembered (the stream's VerifyClient would check its signature)")
	}
	m.ca.pool = pool

	otherMesh := newTestManager(t, store.NewMemory(), Options{Now: clk.Now})
	for name, c := range map[string]struct {
		certs []*x509.Certificate
		want  string
	}{
		"none":             {nil, "no client certificate"},
		"another mesh's":   {[]*x509.Certificate{caSigned(t, otherMesh, x509.ExtKeyUsageClientAuth)}, "not issued by this mesh's CA"},
		"self-signed":      {[]*x509.Certificate{selfSigned(t, clk.Now())}, "not issued by this mesh's CA"},
		"server auth only": {[]*x509.Certificate{caSigned(t, m, x509.ExtKeyUsageServerAuth)}, "may not authenticate a client"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := m.VerifyResumedClient(c.certs); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("VerifyResumedClient = %v, want an error containing %q", err, c.want)
			}
			if len(c.certs) > 0 && remembered(c.certs[0]) {
				t.Error("a refused certificate is remembered")
			}
		})
	}

	// Outside its validity period it is refused, remembered or not.
	fresh := caSigned(t, m, x509.ExtKeyUsageClientAuth)
	for _, at := range []time.Time{leaf.NotBefore.Add(-time.Second), leaf.NotAfter.Add(time.Second)} {
		clk.Set(at)
		for _, c := range []*x509.Certificate{leaf, fresh} {
			if _, err := m.VerifyResumedClient([]*x509.Certificate{c}); err == nil || !strings.Contains(err.Error(), "is valid from") {
				t.Errorf("at %s: VerifyResumedClient = %v, want the validity period refused", at, err)
			}
		}
	}
}

// selfSigned returns a self-signed client certificate valid for an hour
// from now.
func selfSigned(t *testing.T, now time.Time) *x509.Certificate {
	t.Helper()
	key := ecKey(t, elliptic.P256())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "11111111-2222-3333-4444-555555555555.bookstore.default"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// Expired entries are swept once the count has doubled; the chain's
// earliest expiry is what counts.
func TestVerifiedCertsSweep(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	root := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	leaf := func(i int, notAfter time.Time) []*x509.Certificate {
		raw := binary.BigEndian.AppendUint64(nil, uint64(i))
		return []*x509.Certificate{{Raw: raw, NotBefore: now.Add(-time.Minute), NotAfter: notAfter}, root}
	}
	var v verifiedCerts
	for i := range 1024 {
		v.add(leaf(i, now.Add(-time.Second)), now.Add(-2*time.Second)) // expired by now
	}
	long := leaf(-1, now.Add(24*time.Hour))
	v.add(long, now)
	if got, ok := v.lookup(long[0], now.Add(30*time.Minute)); !ok || len(got) != 2 {
		t.Errorf("lookup within the root's validity = %v, %t", got, ok)
	}
	if _, ok := v.lookup(long[0], now.Add(2*time.Hour)); ok {
		t.Error("remembered past the root's expiry")
	}
	for i := 1024; i < 2046; i++ {
		v.add(leaf(i, now.Add(time.Hour)), now)
	}
	if len(v.certs) != 2047 || v.swept != 0 {
		t.Fatalf("%d entries, swept at %d: want 2,047 and no sweep yet", len(v.certs), v.swept)
	}
	v.add(leaf(2046, now.Add(time.Hour)), now)
	if len(v.certs) != 1024 || v.swept != 1024 {
		t.Errorf("after the sweep: %d entries, swept at %d; want the 1,024 unexpired", len(v.certs), v.swept)
	}
}

// What is remembered of a certificate is its hash and its issuers, shared
// between entries: never the parsed leaf, which a connection drops when it
// ends.
func TestVerifiedCertsKeepNoLeaf(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	root := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	var v verifiedCerts
	leaves := make([]weak.Pointer[x509.Certificate], 3)
	for i := range leaves {
		leaf := &x509.Certificate{Raw: []byte{byte(i)}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Minute)}
		leaves[i] = weak.Make(leaf)
		v.add([]*x509.Certificate{leaf, root}, now)
	}
	runtime.GC()
	for i, w := range leaves {
		if w.Value() != nil {
			t.Errorf("leaf %d is still reachable after add: remembering it keeps the parsed certificate", i)
		}
	}
	var issuers [][]*x509.Certificate
	for _, e := range v.certs {
		issuers = append(issuers, e.issuers)
	}
	if len(issuers) != 3 || len(issuers[0]) != 1 || issuers[0][0] != root {
		t.Fatalf("issuers = %v, want [root] for each of 3 entries", issuers)
	}
	for _, is := range issuers[1:] {
		if &is[0] != &issuers[0][0] {
			t.Error("entries with the same issuers do not share them")
		}
	}
	// Still found by the leaf's bytes, with the chain rebuilt.
	again := &x509.Certificate{Raw: []byte{1}}
	if chain, ok := v.lookup(again, now); !ok || len(chain) != 2 || chain[0] != again || chain[1] != root {
		t.Errorf("lookup = %v, %t; want the leaf and the root", chain, ok)
	}
}
