package enroll_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/enroll/enrolltest"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// Only the current certificate renews, over the real API: after a
// renewal, the certificate it replaced (the overlap, kept for connections)
// is refused 403 RenewalNotCurrent, naming it, and the machine's current
// certificate still renews. An agent whose renewal's answer was lost asks
// again with the overlap and the same key, and gets a certificate for it.
func TestRenewWithOverlapRefusedRealIssuer(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	start := time.Now()
	clock.Store(&start)
	now := func() time.Time { return *clock.Load() }
	advance := func(d time.Duration) { t := now().Add(d); clock.Store(&t) }
	s := newRealServerWith(t, certificate.Options{Now: now, ProxyLifetime: 24 * time.Hour})
	ctx := context.Background()
	a, res, _ := s.enroll(t, s.token(t, 1))

	advance(2 * time.Hour)
	key := newKey(t)
	if _, err := meshclient.Renew(ctx, s.srv.URL, res.CAPEM, a, key); err != nil {
		t.Fatal(err) // the answer is lost: the machine keeps a
	}
	advance(2 * time.Hour) // past the renewal rate bound

	// A stolen, rotated key: the overlap with another key.
	_, err := meshclient.Renew(ctx, s.srv.URL, res.CAPEM, a, newKey(t))
	var apiErr *meshclient.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("Renew with the overlap certificate = %v, want refused", err)
	}
	if apiErr.Status != http.StatusForbidden || apiErr.Body.Reason != meshapi.ReasonRenewalNotCurrent {
		t.Errorf("Renew with the overlap certificate = %d %s, want 403 %s", apiErr.Status, apiErr.Body.Reason, meshapi.ReasonRenewalNotCurrent)
	}
	for _, want := range []string{a.Leaf.SerialNumber.Text(16), "current certificate must renew"} {
		if !strings.Contains(apiErr.Body.Error, want) {
			t.Errorf("refusal %q does not say %q", apiErr.Body.Error, want)
		}
	}
	if _, err := s.certs.VerifyProxy(ctx, a.Leaf); err != nil {
		t.Errorf("VerifyProxy(overlap) after the refusal = %v, want still accepted for connections", err)
	}

	// The machine asks again with the key of the lost answer.
	again, err := meshclient.Renew(ctx, s.srv.URL, res.CAPEM, a, key)
	if err != nil {
		t.Fatalf("Renew again with the overlap and the same key = %v, want the certificate for that key", err)
	}
	b := enrolltest.TLSCertificate(t, key, again.CertificatePEM)
	if _, err := s.certs.VerifyProxy(ctx, b.Leaf); err != nil {
		t.Errorf("VerifyProxy(current) = %v, want accepted", err)
	}

	// The current certificate renews.
	advance(2 * time.Hour)
	next, err := meshclient.Renew(ctx, s.srv.URL, res.CAPEM, b, newKey(t))
	if err != nil {
		t.Fatalf("Renew with the current certificate = %v, want renewed", err)
	}
	if next.Identity != res.Identity {
		t.Errorf("renewed identity %s, want %s", next.Identity, res.Identity)
	}
}
