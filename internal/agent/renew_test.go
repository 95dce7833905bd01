package agent

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRenewAtIgnoresBackdating(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		notBefore time.Time
		notAfter  time.Time
		want      time.Time
	}{
		{"a 7-day certificate backdated a minute", now.Add(-time.Minute), now.Add(7 * 24 * time.Hour), now.Add(7 * 24 * time.Hour * 2 / 3)},
		{"a 9 s certificate backdated a minute renews in the future, not in a loop", now.Add(-time.Minute), now.Add(9 * time.Second), now.Add(6 * time.Second)},
		{"not yet valid: counted from NotBefore", now.Add(time.Hour), now.Add(4 * time.Hour), now.Add(3 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RenewAt(&x509.Certificate{NotBefore: tc.notBefore, NotAfter: tc.notAfter}, now)
			if !got.Equal(tc.want) {
				t.Errorf("RenewAt = %v, want %v", got, tc.want)
			}
		})
	}
}
