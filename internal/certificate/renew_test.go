package certificate

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
)

// renewAfter advances the clock by d and renews with peer.
func renewAfter(t *testing.T, m *Manager, clk *clock, d time.Duration, peer *x509.Certificate) *x509.Certificate {
	t.Helper()
	clk.Advance(d)
	certPEM, err := m.RenewProxy(t.Context(), peer, csrFor(t, ecKey(t, elliptic.P256()), nil))
	if err != nil {
		t.Fatalf("RenewProxy: %v", err)
	}
	return parsePEM(t, certPEM)
}

// A renewal keeps the certificate it replaced as the one overlap; older
// ones fall out of the record and are refused from then on, and the
// record does not grow with renewals.
func TestRenewProxyKeepsOneOverlap(t *testing.T) {
	clk := newClock()
	const lifetime = 24 * time.Hour
	st := store.NewMemory()
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: lifetime})
	ctx := t.Context()
	a, cn := issueProxy(t, m)
	b := renewAfter(t, m, clk, 2*time.Hour, a)
	c := renewAfter(t, m, clk, 2*time.Hour, b)

	if _, err := m.VerifyProxy(ctx, a); !errors.Is(err, ErrRevoked) {
		t.Errorf("VerifyProxy(a), two renewals ago = %v, want ErrRevoked (it fell out of the record)", err)
	}
	for name, peer := range map[string]*x509.Certificate{"b (overlap)": b, "c (current)": c} {
		if _, err := m.VerifyProxy(ctx, peer); err != nil {
			t.Errorf("VerifyProxy(%s) = %v, want accepted", name, err)
		}
	}
	if _, err := m.RenewProxy(ctx, a, csrFor(t, ecKey(t, elliptic.P256()), nil)); !errors.Is(err, ErrRevoked) {
		t.Errorf("RenewProxy with a, two renewals ago = %v, want ErrRevoked", err)
	}
	recs, err := m.ListProxies(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("ListProxies = %v, %v", recs, err)
	}
	if diff := cmp.Diff(&OverlapCertificate{Serial: serialString(b.SerialNumber), Expires: b.NotAfter}, recs[0].Overlap); diff != "" {
		t.Errorf("listed overlap (-want +got):\n%s", diff)
	}
	if got, want := recs[0].Serial, serialString(c.SerialNumber); got != want {
		t.Errorf("listed serial = %s, want c's %s", got, want)
	}
	clk.Set(b.NotAfter.Add(time.Second))
	if recs, _ := m.ListProxies(ctx); recs[0].Overlap != nil {
		t.Errorf("listed overlap after it expired = %+v, want none", recs[0].Overlap)
	}
	if _, err := m.VerifyProxy(ctx, b); !errors.Is(err, ErrExpired) {
		t.Errorf("VerifyProxy(b) after it expired = %v, want ErrExpired", err)
	}

	raw, _, _ := st.Get(ctx, proxyKey(cn))
	size := len(raw)
	peer := c
	for range 50 {
		peer = renewAfter(t, m, clk, time.Hour, peer)
	}
	raw, _, _ = st.Get(ctx, proxyKey(cn))
	if got, want := len(raw), size; got > want+16 {
		t.Errorf("record after 50 more renewals is %d bytes, after 2 it was %d: it grows with renewals", got, want)
	}
}

// A renewal while the current certificate is young is refused, saying
// when renewal is allowed; at that time it is accepted.
func TestRenewProxyTooEarly(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: 24 * time.Hour})
	a, _ := issueProxy(t, m)
	clk.Advance(time.Minute)
	_, err := m.RenewProxy(t.Context(), a, csrFor(t, ecKey(t, elliptic.P256()), nil))
	if err == nil {
		t.Fatal("RenewProxy a minute after issue succeeded, want refused as too early")
	}
	var early *TooEarlyError
	if !errors.Is(err, ErrTooEarly) || !errors.As(err, &early) {
		t.Fatalf("RenewProxy a minute after issue = %v, want a *TooEarlyError", err)
	}
	issued := clk.Now().Add(-time.Minute)
	if got, want := early.RetryAt(), issued.Add(time.Hour); !got.Equal(want) {
		t.Errorf("renewal allowed from %s, want %s (an hour after issue)", got, want)
	}
	if !strings.Contains(err.Error(), "renewal is allowed from "+issued.Add(time.Hour).Format(time.RFC3339)) {
		t.Errorf("error %q does not say when renewal is allowed", err)
	}
	clk.Set(early.RetryAt())
	if _, err := m.RenewProxy(t.Context(), a, csrFor(t, ecKey(t, elliptic.P256()), nil)); err != nil {
		t.Errorf("RenewProxy at the time it said = %v, want renewed", err)
	}

	// A short lifetime is renewable after a tenth of it.
	m.SetLifetimes(0, 10*time.Minute)
	b, _ := issueProxy(t, m)
	clk.Advance(time.Minute - time.Second)
	if _, err := m.RenewProxy(t.Context(), b, csrFor(t, ecKey(t, elliptic.P256()), nil)); !errors.Is(err, ErrTooEarly) {
		t.Errorf("RenewProxy of a 10-minute certificate after 59s = %v, want ErrTooEarly", err)
	}
	clk.Advance(time.Second)
	if _, err := m.RenewProxy(t.Context(), b, csrFor(t, ecKey(t, elliptic.P256()), nil)); err != nil {
		t.Errorf("RenewProxy of a 10-minute certificate after 1m = %v, want renewed", err)
	}
}

// A record written before the overlap was bounded, with a list of earlier
// certificates, keeps only the newest unexpired one.
func TestOldRecordKeepsNewestOverlap(t *testing.T) {
	clk := newClock()
	st := store.NewMemory()
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: 24 * time.Hour})
	ctx := t.Context()
	a, cn := issueProxy(t, m)
	b := renewAfter(t, m, clk, 2*time.Hour, a)
	c := renewAfter(t, m, clk, 2*time.Hour, b)
	// Rewrite the record the old way: every replaced certificate listed.
	raw, ver, _ := st.Get(ctx, proxyKey(cn))
	var old map[string]any
	if err := json.Unmarshal(raw, &old); err != nil {
		t.Fatal(err)
	}
	delete(old, "overlap")
	old["previous"] = []OverlapCertificate{
		{Serial: serialString(a.SerialNumber), Expires: a.NotAfter},
		{Serial: serialString(b.SerialNumber), Expires: b.NotAfter},
	}
	raw, _ = json.Marshal(old)
	if ok, err := st.Txn(ctx, store.Set(proxyKey(cn), ver, raw)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := m.VerifyProxy(ctx, a); !errors.Is(err, ErrRevoked) {
		t.Errorf("VerifyProxy(a) from an old record = %v, want ErrRevoked", err)
	}
	for _, peer := range []*x509.Certificate{b, c} {
		if _, err := m.VerifyProxy(ctx, peer); err != nil {
			t.Errorf("VerifyProxy(%s) from an old record = %v, want accepted", serialString(peer.SerialNumber), err)
		}
	}
	rec, err := m.Proxy(ctx, cn)
	if err != nil {
		t.Fatal(err)
	}
	want := &OverlapCertificate{Serial: serialString(b.SerialNumber), Expires: b.NotAfter}
	if diff := cmp.Diff(want, rec.Overlap); diff != "" {
		t.Errorf("overlap (-want +got):\n%s", diff)
	}
}

// A flood of concurrent renewals of one proxy on a real bbolt store: none
// fails because the record kept changing.
func TestRenewProxyConcurrentFlood(t *testing.T) {
	clk := newClock()
	st, err := boltstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := newTestManager(t, st, Options{Now: clk.Now, ProxyLifetime: 24 * time.Hour})
	a, _ := issueProxy(t, m)
	clk.Advance(12 * time.Hour)

	const n = 32
	errs := make([]error, n)
	csrs := make([][]byte, n)
	for i := range csrs {
		csrs[i] = csrFor(t, ecKey(t, elliptic.P256()), nil)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = m.RenewProxy(t.Context(), a, csrs[i])
		})
	}
	close(start)
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict):
			conflicts++
			t.Log(err)
		}
	}
	t.Logf("%d concurrent renewals: %d issued, %d conflicts", n, ok, conflicts)
	if conflicts != 0 {
		t.Errorf("%d of %d concurrent renewals failed with a conflict, want 0", conflicts, n)
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent renewals issued a certificate, want 1 (the others present the overlap with another key)", ok, n)
	}
}

// FuzzCheckCSR feeds checkCSR arbitrary DER: it never panics, and what it
// accepts is a verified request with an accepted key.
func FuzzCheckCSR(f *testing.F) {
	for _, key := range []crypto.Signer{ecKey(f, elliptic.P256()), ecKey(f, elliptic.P384()), ecKey(f, elliptic.P224())} {
		der := csrFor(f, key, nil)
		f.Add(der)
		f.Add(der[:len(der)/2])
		bad := slices.Clone(der)
		bad[len(bad)-1] ^= 1
		f.Add(bad)
	}
	f.Add([]byte{})
	f.Add([]byte{0x30, 0x82, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, der []byte) {
		pub, err := checkCSR(der)
		if err != nil {
			if !errors.Is(err, ErrInvalidCSR) {
				t.Fatalf("checkCSR error %v does not wrap ErrInvalidCSR", err)
			}
			return
		}
		csr, perr := x509.ParseCertificateRequest(der)
		if perr != nil || csr.CheckSignature() != nil {
			t.Fatalf("checkCSR accepted a request that does not parse or verify: %v", perr)
		}
		switch k := pub.(type) {
		case *ecdsa.PublicKey:
			if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
				t.Fatalf("checkCSR accepted curve %s", k.Curve.Params().Name)
			}
		case *rsa.PublicKey:
			if k.N.BitLen() < 2048 {
				t.Fatalf("checkCSR accepted RSA %d", k.N.BitLen())
			}
		default:
			t.Fatalf("checkCSR accepted a %T key", pub)
		}
	})
}

// Only the current certificate renews. The overlap certificate (the one
// the proxy renewed from) still connects until it expires, but a renewal
// with it is refused, naming it and the current certificate: otherwise a
// stolen, already rotated key could renew and so revoke the machine's
// newest certificate, and keep doing so.
func TestRenewWithOverlapRefused(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: 24 * time.Hour})
	ctx := t.Context()
	a, _ := issueProxy(t, m)
	b := renewAfter(t, m, clk, 2*time.Hour, a)
	clk.Advance(2 * time.Hour) // past the renewal rate bound of b

	_, err := m.RenewProxy(ctx, a, csrFor(t, ecKey(t, elliptic.P256()), nil))
	var nc *NotCurrentError
	if !errors.Is(err, ErrNotCurrent) || !errors.As(err, &nc) {
		t.Fatalf("RenewProxy with the overlap certificate = %v, want a *NotCurrentError", err)
	}
	if got, want := nc.Serial, serialString(a.SerialNumber); got != want {
		t.Errorf("refusal names serial %s, want the overlap's %s", got, want)
	}
	if got, want := nc.CurrentSerial(), serialString(b.SerialNumber); got != want {
		t.Errorf("refusal names current serial %s, want %s", got, want)
	}
	for _, want := range []string{serialString(a.SerialNumber), "current certificate", "must renew"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for name, peer := range map[string]*x509.Certificate{"a (overlap)": a, "b (current)": b} {
		if _, err := m.VerifyProxy(ctx, peer); err != nil {
			t.Errorf("VerifyProxy(%s) after the refused renewal = %v, want accepted", name, err)
		}
	}
	c := renewAfter(t, m, clk, 0, b)
	if _, err := m.VerifyProxy(ctx, c); err != nil {
		t.Errorf("VerifyProxy(c), renewed from b = %v, want accepted", err)
	}
}

// An agent whose renewal succeeded but whose answer was lost holds only
// the overlap certificate. Asking again with the same key (the CSR's key
// is the current certificate's) gets a certificate for that key at once,
// without the rate bound, and leaves the overlap as it was: only the
// holder of the new key can make that request or use its answer.
func TestRenewRepeatAfterLostAnswer(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, store.NewMemory(), Options{Now: clk.Now, ProxyLifetime: 24 * time.Hour})
	ctx := t.Context()
	a, cn := issueProxy(t, m)
	clk.Advance(2 * time.Hour)
	key := ecKey(t, elliptic.P256())
	csr := csrFor(t, key, nil)
	if _, err := m.RenewProxy(ctx, a, csr); err != nil { // the answer is lost
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	certPEM, err := m.RenewProxy(ctx, a, csrFor(t, key, nil))
	if err != nil {
		t.Fatalf("RenewProxy again with the overlap and the same key = %v, want the certificate for that key", err)
	}
	b := parsePEM(t, certPEM)
	if !key.Public().(*ecdsa.PublicKey).Equal(b.PublicKey) {
		t.Error("the repeated renewal's certificate is not for the CSR's key")
	}
	if got := b.Subject.CommonName; got != cn {
		t.Errorf("the repeated renewal's certificate is for %q, want %q", got, cn)
	}
	rec, err := m.Proxy(ctx, cn)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rec.Serial, serialString(b.SerialNumber); got != want {
		t.Errorf("current serial = %s, want the answer's %s", got, want)
	}
	if diff := cmp.Diff(&OverlapCertificate{Serial: serialString(a.SerialNumber), Expires: a.NotAfter}, rec.Overlap); diff != "" {
		t.Errorf("overlap (-want +got):\n%s", diff)
	}
	for name, peer := range map[string]*x509.Certificate{"a (overlap)": a, "b (current)": b} {
		if _, err := m.VerifyProxy(ctx, peer); err != nil {
			t.Errorf("VerifyProxy(%s) = %v, want accepted", name, err)
		}
	}
	// Another key with the overlap is still refused.
	if _, err := m.RenewProxy(ctx, a, csrFor(t, ecKey(t, elliptic.P256()), nil)); !errors.Is(err, ErrNotCurrent) {
		t.Errorf("RenewProxy with the overlap and another key = %v, want ErrNotCurrent", err)
	}
	if _, err := m.VerifyProxy(ctx, b); err != nil {
		t.Errorf("VerifyProxy(b) after the refused renewal = %v, want accepted", err)
	}
}
